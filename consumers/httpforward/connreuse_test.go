package httpforward_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/httpforward"
)

// A forwarder keeps its connections to its service under concurrency.
//
// Regression test (review helper-128; fixed: the text describes the
// behaviour before the fix). the forwarder's own client (forward.go:95-101,
// http.DefaultTransport.Clone()) keeps the default MaxIdleConnsPerHost of 2,
// while a ready handler runs up to `concurrency` (default 64) attempts at once
// against ONE host, the internal service. After every burst only 2
// connections go back to the idle pool; all the others are closed, and the
// next burst dials (and, for https, TLS-handshakes) them again. Under steady
// load this is one new TCP connection per request: TIME_WAIT piles up on the
// consumer host (ephemeral port exhaustion), and every delivery pays a
// handshake, far from "deliver as fast as ingress accepts".
//
// Expected: connections of one forwarder to its one service are reused up to
// the handler's concurrency: R rounds of N concurrent deliveries open about N
// connections, not N + (R-1)*(N-2).
func TestForwarderReusesConnectionsUnderConcurrency(t *testing.T) {
	t.Parallel()
	const (
		concurrent = 16
		rounds     = 4
	)
	var newConns atomic.Int64
	var mu sync.Mutex
	inFlight := 0
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A barrier: hold every request until the whole round is in flight,
		// so the round really uses `concurrent` connections at once.
		mu.Lock()
		inFlight++
		if inFlight == concurrent {
			inFlight = 0
			close(release)
			release = make(chan struct{})
			mu.Unlock()
		} else {
			ch := release
			mu.Unlock()
			select {
			case <-ch:
			case <-time.After(5 * time.Second):
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			newConns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	f, err := httpforward.New(httpforward.Config{URL: srv.URL, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, concurrent)
		for i := range concurrent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := &consumers.Event{JobID: int64(round*concurrent + i + 1), EventID: 1, Handler: "forward",
					Provider: "github", EventType: "push", Headers: http.Header{}, Body: []byte(`{}`), Attempt: 1, MaxAttempts: 25}
				errs <- f(context.Background(), e)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		// Let the closed connections' StateNew/StateClosed settle.
		time.Sleep(50 * time.Millisecond)
	}
	if n := newConns.Load(); n > 2*concurrent {
		t.Errorf("%d rounds of %d concurrent deliveries to one service opened %d connections; want about %d (reused): "+
			"the forwarder keeps only 2 idle connections per host", rounds, concurrent, n, concurrent)
	}
}
