// Package health serves the probes of the services that have no public HTTP
// port of their own (streamer, consumer): GET /healthz (the process is up) and
// GET /readyz (its dependencies answer), and their GET /metrics; ingress
// serves the same on its metrics listener, away from the webhook port. A
// failed readiness is logged once per change of state (ReadyLog), not per
// probe.
package health

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
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
	var states ReadyLog
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		write(w, http.StatusOK, "ok", "")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			states.Note(log, "dependency_unavailable", err)
			w.Header().Set("Retry-After", "5")
			write(w, http.StatusServiceUnavailable, "unavailable", "dependency_unavailable")
			return
		}
		states.Note(log, "", nil)
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

// ReadyLog logs the outcomes of a readiness probe once per change of state:
// ready → not ready (with its reason and error), a new reason, and back to
// ready. Probes come as often as anyone sends them (ingress serves /readyz on
// its public webhook port, unauthenticated), so a line per failed probe let
// anyone fill the log while the database was down. The zero value starts
// ready.
type ReadyLog struct {
	mu     sync.Mutex
	reason string // "" while ready
}

// Note records one probe's outcome: reason "" (and err nil) for ready, else
// the failure's reason as the probe answers it, and err, logged when the
// reason changes.
func (l *ReadyLog) Note(log *slog.Logger, reason string, err error) {
	l.mu.Lock()
	prev := l.reason
	l.reason = reason
	l.mu.Unlock()
	if reason == prev {
		return
	}
	switch reason {
	case "":
		log.Info("ready again", slog.String("was", prev))
	default:
		msg := "<nil>"
		if err != nil {
			msg = err.Error()
		}
		log.Warn("not ready", slog.String("reason", reason), slog.String("error", msg))
	}
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
