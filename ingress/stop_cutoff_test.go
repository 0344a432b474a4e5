package ingress_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
)

// TestStopCutsOffAStoreStillRunning
//
// Regression test (review helper-100; fixed: the text describes the behaviour
// before the fix). since d6b5395 the store of a verified event runs under
// context.WithoutCancel(r.Context()) + store_timeout. Server.Stop documents
// "waits for in-flight ones until ctx is done; requests still running then
// are cut off", and before the change they were: http.Server.Close closes
// the connections, net/http cancels the request's context, and pgx cancels
// the INSERT. Now nothing cancels it: after the drain deadline the handler
// keeps its INSERT running (and its pool connection acquired) for up to
// store_timeout more, after Stop has returned; the process's shutdown then
// blocks in pool.Close() behind it, and the event may be committed by an
// ingress that has already stopped (its sender got a closed connection).
//
// Expected: once Stop's ctx is done, a store still running is cancelled
// (within moments), as the doc says.
//
// Root cause: ingress/server.go:311 ctx, cancel :=
// context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout) —
// detached from every cancellation, including the server's own stop.
func TestStopCutsOffAStoreStillRunning(t *testing.T) {
	ls := startListening(t, func(c *ingress.Config, _ string) { c.Section.StoreTimeout = 30 * time.Second })
	ctx := context.Background()
	// The database stalls the insert: the events table is locked.
	waiting, _ := lockEvents(t, ls)
	body := []byte(`{"id":"evt_stop_cutoff","type":"charge.succeeded","object":"event","created":1700000000,"data":{"object":{}}}`)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+ls.host+"/webhooks/stripe", bytes.NewReader(body))
		req.Header.Set("Stripe-Signature", stripeSig(body))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	awaitLockWait(t, waiting, "the webhook's insert")
	stopCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_ = ls.srv.Stop(stopCtx)
	stopped := time.Now()
	for waiting() > 0 {
		if time.Since(stopped) > 3*time.Second {
			t.Fatalf("%s after Stop's deadline the insert of a request Stop cut off is still running (it runs until store_timeout, 30s); want it cancelled",
				time.Since(stopped).Round(time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lockEvents locks the events table in a transaction of its own and
// returns a count of the other sessions waiting on that lock for a
// statement on events, and the release of the lock (at the end of the test
// at the latest).
func lockEvents(t *testing.T, ls *listeningServer) (waiting func() int, release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := ls.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	release = func() { _ = tx.Rollback(ctx) }
	t.Cleanup(release)
	if _, err := tx.Exec(ctx, `LOCK TABLE webhook_ingress.events IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var lockPID int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&lockPID); err != nil {
		t.Fatal(err)
	}
	return func() int {
		var n int
		if err := ls.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> $1 AND pid <> pg_backend_pid()
			  AND wait_event_type = 'Lock' AND query ILIKE '%events%'`, lockPID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}, release
}

// awaitLockWait waits up to 10 s for a session to wait on lockEvents' lock.
func awaitLockWait(t *testing.T, waiting func() int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for waiting() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("premise: %s never waited on the locked events table", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
