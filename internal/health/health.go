// Package health serves the probes of the services that have no public HTTP
// port of their own (streamer, consumer): GET /healthz (the process is up) and
// GET /readyz (its dependencies answer), and their GET /metrics; ingress
// serves the same on its metrics listener, away from the webhook port.
package health

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/inlet-dev/inlet/internal/httpserve"
)

// Server is a probe listener.
type Server struct {
	hs *httpserve.Server
}

// Start listens on addr ("" means no listener: a nil *Server, whose Stop is a
// no-op) and serves the probes; ready reports readiness. A non-nil metrics
// is served as GET /metrics.
func Start(ctx context.Context, addr string, ready func(context.Context) error, metrics http.Handler, log *slog.Logger) (*Server, error) {
	if addr == "" {
		return nil, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		write(w, http.StatusOK, "ok", "")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			log.Warn("not ready", slog.String("error", err.Error()))
			w.Header().Set("Retry-After", "5")
			write(w, http.StatusServiceUnavailable, "unavailable", "dependency_unavailable")
			return
		}
		write(w, http.StatusOK, "ready", "")
	})
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	hs, err := httpserve.Start(ctx, httpserve.Config{Name: "health", Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	log.Info("health listener", slog.String("addr", hs.Addr().String()))
	return &Server{hs: hs}, nil
}

// Addr is the bound address.
func (s *Server) Addr() string {
	if s == nil {
		return ""
	}
	return s.hs.Addr().String()
}

// Stop closes the listener and lets the probes in flight finish until ctx
// is done.
func (s *Server) Stop(ctx context.Context) error {
	if s == nil {
		return nil
	}
	return s.hs.Stop(ctx)
}

func write(w http.ResponseWriter, code int, status, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	m := map[string]string{"status": status}
	if reason != "" {
		m["reason"] = reason
	}
	_ = json.NewEncoder(w).Encode(m)
}
