package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, `{"status":"ok"}`)
			return
		}
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"2xx", []string{srv.URL + "/healthz"}, 0},
		{"5xx", []string{srv.URL + "/readyz"}, 1},
		{"nothing listening", []string{closed.URL + "/healthz"}, 1},
		{"no argument", nil, 2},
		{"two arguments", []string{srv.URL, srv.URL}, 2},
		{"not http", []string{"tcp://127.0.0.1:1"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(tc.args, io.Discard); got != tc.want {
				t.Errorf("run(%q) = %d, want %d", tc.args, got, tc.want)
			}
		})
	}
}
