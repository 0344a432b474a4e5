// Package health serves the probes of the services that have no public HTTP
// port of their own (streamer, consumer): GET /healthz (the process is up) and
// GET /readyz (its dependencies answer), and their GET /metrics; ingress
// serves the same on its metrics listener, away from the webhook port.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server is a probe listener.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// Start listens on addr ("" means no listener: a nil *Server, whose Stop is a
// no-op) and serves the probes; ready reports readiness. A non-nil metrics
// is served as GET /metrics.
func Start(ctx context.Context, addr string, ready func(context.Context) error, metrics http.Handler, log *slog.Logger) (*Server, error) {
	if addr == "" {
		return nil, nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health listener on %s: %w", addr, err)
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
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln, done: make(chan error, 1)}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	log.Info("health listener", slog.String("addr", ln.Addr().String()))
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() string {
	if s == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Stop closes the listener.
func (s *Server) Stop(ctx context.Context) error {
	if s == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	return errors.Join(err, <-s.done)
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
