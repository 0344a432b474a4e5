package httpforward_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers/httpforward"
)

// A target that answers 101 Switching Protocols and then sends nothing does
// not hold the handler past its Timeout: a 1xx fails the attempt at once,
// and reading any answer ends with the timeout. (Found by a review: net/http
// hands the raw connection over as the body of a 101, the request's context
// no longer closes it, and forward read it with no deadline.)
func TestForwardTimeoutHoldsAgainstA101Answer(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = buf.Flush()
		<-release // then silence
	}))
	defer hostile.Close()
	defer close(release)

	f := newForwarder(t, httpforward.Config{URL: hostile.URL, Timeout: 200 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- f(context.Background(), event()) }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("101 answer: success")
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("Timeout 200ms: the handler still runs 3s after a 101 answer (its slot is held for as long as the target keeps the connection open)")
	}
}
