package httpforward_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/httpforward"
)

// TestForwardHonoursRetryAfter: a service that answers with Retry-After
// (delay-seconds or an HTTP-date) holds the retry back that long; a
// malformed, past or absent one adds nothing, and the class stays the
// status's.
func TestForwardHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, header string
		status       int
		min, max     time.Duration
	}{
		{"seconds", "120", http.StatusTooManyRequests, 120 * time.Second, 120 * time.Second},
		{"padded", " 7 ", http.StatusServiceUnavailable, 7 * time.Second, 7 * time.Second},
		{"date", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat), http.StatusServiceUnavailable, 58 * time.Minute, time.Hour},
		{"beyond the cap", "99999999999999999999", http.StatusTooManyRequests, 24 * time.Hour, 24 * time.Hour},
		{"past date", "Mon, 02 Jan 2006 15:04:05 GMT", http.StatusServiceUnavailable, 0, 0},
		{"negative", "-5", http.StatusTooManyRequests, 0, 0},
		{"malformed", "soon", http.StatusTooManyRequests, 0, 0},
		{"absent", "", http.StatusTooManyRequests, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if c.header != "" {
					w.Header().Set("Retry-After", c.header)
				}
				w.WriteHeader(c.status)
			}))
			t.Cleanup(srv.Close)
			err := newForwarder(t, httpforward.Config{URL: srv.URL})(context.Background(), event())
			if err == nil {
				t.Fatal("success")
			}
			if got := consumers.RetryAfterOf(err); got < c.min || got > c.max {
				t.Errorf("Retry-After %q: the retry is held back %s, want %s–%s", c.header, got, c.min, c.max)
			}
			want := consumers.ClassHTTP4xx
			if c.status >= 500 {
				want = consumers.ClassHTTP5xx
			}
			if got := consumers.ClassOf(err); got != want {
				t.Errorf("class %q, want %q", got, want)
			}
		})
	}
}
