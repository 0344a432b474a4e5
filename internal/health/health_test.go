package health

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
)

func TestProbes(t *testing.T) {
	var down atomic.Bool
	s, err := Start(context.Background(), "127.0.0.1:0", func(context.Context) error {
		if down.Load() {
			return errors.New("database gone")
		}
		return nil
	}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("inlet_up 1\n")) }), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	get := func(path string) int {
		resp, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if get("/healthz") != 200 || get("/readyz") != 200 || get("/metrics") != 200 {
		t.Fatal("probes not 200 while ready")
	}
	down.Store(true)
	if get("/healthz") != 200 || get("/readyz") != 503 {
		t.Fatal("readyz not 503 (or healthz not 200) while a dependency is down")
	}
	var none *Server
	if none.Addr() != "" || none.Stop(context.Background()) != nil {
		t.Fatal("a nil Server is not a no-op")
	}
	if s, err := Start(context.Background(), "", nil, nil, nil); s != nil || err != nil {
		t.Fatal(`Start("") should start nothing`)
	}
}
