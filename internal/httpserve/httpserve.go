// Package httpserve runs one HTTP server the way every Inlet listener does:
// listen (failing at once, naming the address), serve in the background with
// timeouts on each phase of a request, and on Stop drain the requests in
// flight until a deadline, then close what is left. Ingress, the relay, the
// admin API, the probe listeners and the control plane all use it.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Config is what to serve, where, and how long a request may take.
type Config struct {
	// Name names the server in errors ("ingress listen on :8080: …").
	// Required.
	Name string
	// Addr is the TCP address to listen on (host:port; port 0 picks one).
	// Required.
	Addr string
	// Handler answers the requests. Required.
	Handler http.Handler
	// ReadHeaderTimeout bounds reading a request's headers. Defaults to 5s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included. Zero: no
	// limit.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of the answer. Zero: no limit.
	WriteTimeout time.Duration
	// IdleTimeout bounds how long a kept-alive connection waits for the next
	// request. Zero: ReadTimeout's value (net/http's rule).
	IdleTimeout time.Duration
	// MaxHeaderBytes caps the request headers. Defaults to net/http's 1 MB.
	MaxHeaderBytes int
	// MaxConnections caps the connections open at once, so the memory
	// held for connections (their buffers, the headers being read) is
	// bounded whatever the number of clients. Past it new connections wait
	// in the kernel's accept queue, unrefused, until one closes. While the
	// server is full it makes room: keep-alive is off (idle connections are
	// closed, and each answer closes its connection), and a connection that
	// has not sent a request's headers whole within 1 s of its accept (on
	// Linux, of its connect when it sent nothing while queued) is closed, so
	// neither idle connections nor ones that send nothing keep new ones out
	// for long. Zero: no cap.
	MaxConnections int
	// ErrorLog, when set, receives net/http's own complaints (bad requests,
	// handler panics) at Warn. Nil: the log package's default logger.
	ErrorLog *slog.Logger
}

// Server is one started HTTP server. A nil *Server is valid: Addr is nil
// and Stop does nothing, for listeners that are switched off.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	err  error // Serve's error, other than http.ErrServerClosed; read after done
}

// Start listens on cfg.Addr and serves cfg.Handler in the background until
// Stop. It returns once the listener is bound, so Addr is known and a
// request sent then is served.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Handler == nil {
		return nil, fmt.Errorf("%s: no handler to serve", cfg.Name)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("%s listen on %s: %w", cfg.Name, cfg.Addr, err)
	}
	if cfg.MaxConnections < 0 {
		_ = ln.Close()
		return nil, fmt.Errorf("%s: max connections %d must not be negative", cfg.Name, cfg.MaxConnections)
	}
	s := &Server{
		srv: &http.Server{
			Handler:           cfg.Handler,
			ReadHeaderTimeout: cfg.ReadHeaderTimeout,
			ReadTimeout:       cfg.ReadTimeout,
			WriteTimeout:      cfg.WriteTimeout,
			IdleTimeout:       cfg.IdleTimeout,
			MaxHeaderBytes:    cfg.MaxHeaderBytes,
		},
		ln:   ln,
		done: make(chan struct{}),
	}
	if s.srv.ReadHeaderTimeout <= 0 {
		s.srv.ReadHeaderTimeout = 5 * time.Second
	}
	if cfg.ErrorLog != nil {
		s.srv.ErrorLog = slog.NewLogLogger(cfg.ErrorLog.Handler(), slog.LevelWarn)
	}
	serveOn := ln
	if cfg.MaxConnections > 0 {
		ll := newLimitListener(ln, cfg.MaxConnections, s.srv.SetKeepAlivesEnabled)
		s.srv.ConnState = ll.connState(s.srv.ConnState)
		serveOn = ll
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(serveOn); !errors.Is(err, http.ErrServerClosed) {
			s.err = fmt.Errorf("%s serve on %s: %w", cfg.Name, ln.Addr(), err)
		}
	}()
	return s, nil
}

// Addr is the bound address (nil for a nil Server).
func (s *Server) Addr() net.Addr {
	if s == nil {
		return nil
	}
	return s.ln.Addr()
}

// Done is closed when the server stops serving: after Stop, or earlier if
// accepting connections failed (Stop then returns why).
func (s *Server) Done() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.done
}

// Stop closes the listener and waits for the requests in flight to finish
// until ctx is done; connections still open then are closed, cutting their
// requests off, and Stop returns ctx's error. It also returns the error
// that ended serving early, if one did. Stop on a nil Server returns nil.
func (s *Server) Stop(ctx context.Context) error {
	if s == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	<-s.done
	if s.err != nil {
		return errors.Join(err, s.err)
	}
	return err
}
