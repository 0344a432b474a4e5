package ingress_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema"
)

// TestStopCutsOffAGroupCommitBatchStillRunning (review helper-164, fixed; this
// describes the code before the fix): defect: with group commit (the default:
// ingress.group_commit.disabled is false, cmd/inlet/ingress.go startIngress),
// Server.Stop does not cut off a write still running at its deadline, and does
// not return at its deadline either. Server.Stop documents "waits for
// in-flight ones until ctx is done; requests still running then are cut off",
// and `inlet ingress --help` says "SIGTERM stops accepting, drains in-flight
// requests for --drain-timeout, then exits". The fix of helper-100
// (Server.cut, ingress/server.go:326 `defer context.AfterFunc(s.cut,
// cancel)()`) cancels the request's context only; with GroupStore the INSERT
// runs on the committer's own context,
// context.WithTimeout(context.Background(), g.cfg.Timeout)
// (ingress/groupcommit.go:227), which nothing but store_timeout ends. Stop
// then calls GroupStore.Close (server.go:259), whose groupcommit.Close waits
// for the batch in flight (internal/groupcommit/groupcommit.go:150
// g.wg.Wait()): Stop blocks up to store_timeout past its deadline, the batch
// keeps its pool connection and may still commit after ingress "stopped", and
// the drain deadlines that the deployments size their kill timers by
// (TimeoutStopSec=30s for --drain-timeout 20s, stop_grace_period) no longer
// bound the shutdown. The same test with a PGStore passes
// (TestStopCutsOffAStoreStillRunning).
//
// Now: once Stop's ctx is done, the batch still running is cancelled
// within moments and Stop returns (its callers were already answered 503).
func TestStopCutsOffAGroupCommitBatchStillRunning(t *testing.T) {
	ls := startListening(t, func(c *ingress.Config, dbURL string) {
		c.Section.StoreTimeout = 30 * time.Second
		pool, err := database.Open(context.Background(), dbURL, database.Options{Role: schema.IngressRole})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		// As cmd/inlet does: the section's group commit, its batches bounded
		// by store_timeout.
		c.Store = ingress.NewGroupStore(pool, nil, c.Section.WithDefaults().GroupConfig())
	})
	ctx := context.Background()
	// The database stalls the insert: the events table is locked.
	waiting, release := lockEvents(t, ls)
	body := []byte(`{"id":"evt_stop_gc","type":"charge.succeeded","object":"event","created":1700000000,"data":{"object":{}}}`)
	answered := make(chan int, 1) // the webhook's status; 0: no answer (connection closed)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+ls.host+"/webhooks/stripe", bytes.NewReader(body))
		req.Header.Set("Stripe-Signature", stripeSig(body))
		req.Header.Set("Content-Type", "application/json")
		code := 0
		if resp, err := http.DefaultClient.Do(req); err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
		answered <- code
	}()
	awaitLockWait(t, waiting, "the webhook's batch")
	stopCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	stopDone := make(chan struct{})
	go func() {
		defer close(stopDone)
		_ = ls.srv.Stop(stopCtx)
	}()
	<-stopCtx.Done()
	cutAt := time.Now()
	var failure string
	for {
		select {
		case <-stopDone:
		default:
			if time.Since(cutAt) < 3*time.Second {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			failure = "Server.Stop has not returned"
		}
		break
	}
	stillWaiting := waiting()
	// Let the batch go, so Stop (and the test's cleanup) can end.
	release()
	<-stopDone
	if failure != "" || stillWaiting > 0 {
		t.Fatalf("3s after Stop's deadline (300ms): %s; %d insert(s) of the group-commit batch still running (they run until store_timeout, 30s); want the batch cut off and Stop returned",
			failure, stillWaiting)
	}
	// The cut batch did not commit: its caller must not have been told so.
	select {
	case code := <-answered:
		if code/100 == 2 {
			t.Fatalf("the webhook of the cut batch was answered %d; want no 2xx", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the webhook of the cut batch got neither an answer nor a closed connection")
	}
}
