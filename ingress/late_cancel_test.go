package ingress_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	neturl "net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// cancelProxy is a TCP hop in front of PostgreSQL (as a pooler or a sidecar
// proxy is) that forwards every connection at once, except a cancel request
// (code 80877102), which it holds until release is closed: a cancel request
// that takes longer than pgx's 100 ms to reach the backend (a proxy that
// opens a TLS connection to a remote server for it, a busy postmaster).
type cancelProxy struct {
	url       string
	held      chan struct{} // one value per cancel request received
	forwarded chan struct{} // one value per cancel request delivered
	release   chan struct{}
	once      sync.Once
}

func (p *cancelProxy) releaseCancels() { p.once.Do(func() { close(p.release) }) }

func startCancelProxy(t *testing.T, dbURL string) *cancelProxy {
	t.Helper()
	u, err := neturl.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	upstream := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cancelProxy{held: make(chan struct{}, 16), forwarded: make(chan struct{}, 16), release: make(chan struct{})}
	pu := *u
	pu.Host = ln.Addr().String()
	p.url = pu.String()
	var wg sync.WaitGroup
	t.Cleanup(func() {
		p.releaseCancels()
		_ = ln.Close()
		wg.Wait()
	})
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range open {
			_ = c.Close()
		}
	})
	track := func(c net.Conn) {
		mu.Lock()
		open = append(open, c)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				head := make([]byte, 8)
				if _, err := io.ReadFull(c, head); err != nil {
					return
				}
				length := binary.BigEndian.Uint32(head[0:4])
				code := binary.BigEndian.Uint32(head[4:8])
				if code == 80877102 && length >= 8 && length < 1024 {
					rest := make([]byte, length-8)
					if _, err := io.ReadFull(c, rest); err != nil {
						return
					}
					p.held <- struct{}{}
					<-p.release
					up, err := net.Dial("tcp", upstream)
					if err != nil {
						return
					}
					track(up)
					defer up.Close()
					_, _ = up.Write(append(head, rest...))
					_, _ = io.Copy(io.Discard, up) // the server closes once it has signalled the backend
					p.forwarded <- struct{}{}
					return
				}
				up, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				track(up)
				defer up.Close()
				if _, err := up.Write(head); err != nil {
					return
				}
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return p
}

// TestLateCancelDoesNotFailTheNextWebhook (review helper-304, fixed).
// Defect: since 5d25b05 every pool of internal/database.Open sends
// PostgreSQL a cancel request when a statement's context ends
// (database.go:cancelOnContextEnd, pgconn.CancelRequestContextWatcherHandler),
// and keeps the connection. A cancel request names only the backend PID,
// and it is asynchronous: when the statement finishes before the cancel
// reached the backend (the context ended as the answer came), pgx gives up
// waiting for the server's acknowledgement, sleeps a fixed 100 ms
// ("inherently racy", pgconn.go) and the pool hands the connection to the
// next caller. A cancel that takes longer than that to reach the backend
// then cancels whatever statement that caller runs: here a webhook whose
// own store_timeout is far away is answered 503 "canceling statement due to
// user request" and not stored (PGStore would instead store it with payload
// NULL, next test). Before 5d25b05 the socket was cut and the connection
// destroyed: no statement but the timed-out one could be hit.
// Setup: ingress (GroupStore, store_timeout 15 s) on a pool of 1 connection
// reached through a TCP hop that delivers cancel requests late (held until
// released, modelling a cancel that needs > 100 ms to arrive); a statement
// on that pool whose 200 ms context ends while it runs (pg_sleep(0.6)); then
// a webhook whose insert waits on a row lock (an uncommitted event with its
// key) when the late cancel arrives; the lock is released 3 s later.
// Expected: 200 stored: a cancel is meant for the statement whose context
// ended, never for another caller's.
// Observed: the first statement returned nil after 0.70 s (its context
// ended at 0.2 s), the connection went back to the pool, and the webhook was
// answered 503 {"status":"unavailable","reason":"database_unavailable"}
// (Retry-After 5) as soon as the cancel arrived; 0 events stored (3 of 3
// runs). With the suggested fix applied to a scratch copy: 200, stored.
// Fixed: a connection a cancel request was sent on is closed at release
// (internal/database: cancelSent, the pool's AfterRelease).
func TestLateCancelDoesNotFailTheNextWebhook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	proxy := startCancelProxy(t, url)
	pool, err := database.Open(ctx, proxy.url, database.Options{Role: schema.IngressRole, MaxConns: 1, AppName: "review304-ingress"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := ingress.NewGroupStore(pool, nil, ingress.GroupConfig{Timeout: 15 * time.Second})
	t.Cleanup(store.Close)
	b := setupWith(t, url, func(c *ingress.Config) {
		c.Store = store
		c.Section.StoreTimeout = 15 * time.Second
	})
	if _, err := pool.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}

	// A statement whose context ends while it runs, and which finishes
	// before its cancel request reached the backend.
	xctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	_, xerr := pool.Exec(xctx, `SELECT pg_sleep(0.6)`)
	cancel()
	t.Logf("statement with a 200ms context: err=%v after %v", xerr, time.Since(start).Round(time.Millisecond))
	select {
	case <-proxy.held:
	case <-time.After(30 * time.Second):
		t.Fatal("no cancel request was sent for the statement whose context ended")
	}

	// The next webhook on that pool, waiting on a row lock when the late
	// cancel arrives.
	tx, err := b.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	const id = "evt_review304_victim"
	if _, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', $1, 't', '\x7b7d', true)`, id); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"` + id + `","type":"charge.succeeded"}`)
	answer := sendAsync(t, stripeRequest(t, b.url, body, time.Now()))
	for deadline := time.Now().Add(60 * time.Second); ; {
		if count(t, b.admin, `SELECT count(*)::int FROM pg_stat_activity
			WHERE application_name = 'review304-ingress' AND wait_event_type = 'Lock'`) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the webhook's insert never waited on the row lock")
		}
		time.Sleep(50 * time.Millisecond)
	}
	proxy.releaseCancels()
	select {
	case <-proxy.forwarded:
	case <-time.After(30 * time.Second):
		t.Fatal("the held cancel request was never delivered")
	}
	var got [2]string
	select {
	case got = <-answer:
	case <-time.After(3 * time.Second):
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		got = <-answer
	}
	_ = tx.Rollback(ctx)
	stored := count(t, b.admin, `SELECT count(*)::int FROM webhook_ingress.events WHERE external_event_id = $1`, id)
	if got[0] != "200" || stored != 1 {
		t.Errorf("a webhook whose store_timeout (15 s) never passed: %s, %d events stored; want 200 stored. The cancel request "+
			"sent for another statement of the connection (its 200 ms context ended as it finished: err=%v) reached the "+
			"backend after the pool had handed the connection on, and cancelled this webhook's insert", got[1], stored, xerr)
	}
}

// TestCancelledInsertIsNotStoredWithoutPayload (review helper-304, fixed).
// Defect: PGStore.insertMatched (ingress/store.go) retries a failed insert
// without the JSON copy (payload NULL) whenever the error is any
// PostgreSQL error (isStatementError) and its own context is alive; 5d25b05
// added `ctx.Err() == nil` so that its own timeout's 57014 is excluded, but
// every other 57014 (query_canceled) is still read as "PostgreSQL refused
// the body's JSON": a DBA's pg_cancel_backend on a statement stuck behind a
// lock, a statement_timeout, or the late cancel of the test above. The
// webhook is answered 200 and stored for good with payload NULL though its
// body is valid JSON: it is invisible to `inlet events list --where` and
// GET /api/events?where= (and to JSON-path consumers of events.payload),
// and docs/configuration.md says a body gets NULL only when it "is not JSON
// PostgreSQL accepts, or is larger". 5d25b05 itself declares 57014
// "the database unavailable (503, retried)". PGStore serves ingress with
// group_commit disabled, inlet backfill, inlet reconcile, and GroupStore's
// per-event fallback.
// Setup: ingress with PGStore; an uncommitted event row holds the webhook's
// key so its insert waits; the test cancels that backend's statement
// (pg_cancel_backend), waits for the retried insert to wait too, then rolls
// its transaction back.
// Expected: never stored with payload NULL: the 57014 answered 503 (nothing
// stored; the provider's retry stores it with its payload), or the same
// insert retried with the copy.
// Observed: 200 {"status":"stored"}, payload NULL, raw_body the valid JSON
// sent (3 of 3 runs). With the suggested fix applied to a scratch copy: 503
// database_unavailable, nothing stored.
// Fixed: insertMatched drops the copy only for a data error of it
// (refusedData: classes 22 and 54).
func TestCancelledInsertIsNotStoredWithoutPayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	b := setupWith(t, url, func(c *ingress.Config) {}) // PGStore, store_timeout 10s
	tx, err := b.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	const id = "evt_review304_cancelled"
	if _, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', $1, 't', '\x7b7d', true)`, id); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"` + id + `","type":"charge.succeeded","data":{"object":{"amount":2500}}}`)
	answer := sendAsync(t, stripeRequest(t, b.url, body, time.Now()))
	waiting := func(since time.Time) int {
		var pid int
		err := b.admin.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%events%'
			  AND query_start > $1 AND pid <> pg_backend_pid() LIMIT 1`, since).Scan(&pid)
		if err != nil {
			return 0
		}
		return pid
	}
	poll := func(since time.Time, what string) int {
		for deadline := time.Now().Add(60 * time.Second); ; {
			if pid := waiting(since); pid != 0 {
				return pid
			}
			select {
			case got := <-answer:
				t.Fatalf("answered %s before its insert waited on the row lock (%s)", got[1], what)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("no insert waiting on the row lock (%s)", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	pid := poll(time.Time{}, "first insert")
	var cancelledAt time.Time
	if err := b.admin.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&cancelledAt); err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := b.admin.QueryRow(ctx, `SELECT pg_cancel_backend($1)`, pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_cancel_backend(%d): %v %v", pid, ok, err)
	}
	// Either the webhook is answered (the cancel ended it), or its insert
	// was tried again and waits on the same lock.
	var got [2]string
	answered := false
	for deadline := time.Now().Add(60 * time.Second); !answered; {
		select {
		case got = <-answer:
			answered = true
			continue
		default:
		}
		if waiting(cancelledAt) != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("after the cancel the webhook was neither answered nor tried again")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !answered {
		got = <-answer
	}
	var payload *string
	err = b.admin.QueryRow(ctx, `SELECT payload::text FROM webhook_ingress.events WHERE provider = 'stripe' AND external_event_id = $1`, id).Scan(&payload)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		t.Logf("answer %s; not stored", got[1])
	case err != nil:
		t.Fatal(err)
	case payload == nil:
		t.Errorf("a valid JSON webhook whose insert an operator cancelled (57014, its store_timeout far away): answered %s, "+
			"stored with payload NULL for good (invisible to --where); a cancelled statement was read as PostgreSQL refusing the JSON copy",
			strings.TrimSpace(got[1]))
	default:
		t.Logf("answer %s; stored with payload %s", got[1], *payload)
	}
}
