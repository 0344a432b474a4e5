package ingress_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// TestBatchLockTimeoutIsNotRetriedEventByEvent (review helper-73).
//
// Defect: when a group-commit batch fails with an error that says nothing
// about any one event's data — here lock_timeout (SQLSTATE 55P03), which an
// operator sets precisely so that ingress fails fast while something holds
// a lock — GroupStore.commit (ingress/groupcommit.go, the `default:` branch
// chosen by the condition at line ~287: every statement error that is not
// database.IsUnavailable) re-inserts every event of the batch ALONE, one
// after the other, on the one committer. Each of those single inserts waits
// lock_timeout again, so a batch of N events occupies its committer for
// (N+1)·lock_timeout, every later event waits behind it, and the webhooks
// whose turn comes after ingress.store_timeout are answered 503
// "outcome_unknown" (and logged "webhook outcome unknown") although the
// database refused the write outright and nothing can commit.
// GroupStore's own doc says the split is "fails on one event's data → event
// by event; database unavailable → fails all of its callers (none was
// acknowledged)"; a lock timeout is the latter.
//
// Expected: every webhook of the refused batch is answered promptly (about
// one lock_timeout after its batch started) with 503 database_unavailable,
// exactly what the PGStore and a lone GroupStore request answer
// (TestRefusedWritesAreNotStored).
func TestBatchLockTimeoutIsNotRetriedEventByEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	const lockTimeout = 400 * time.Millisecond
	for _, q := range []string{
		`ALTER DATABASE ` + pgx.Identifier{conn.Config().Database}.Sanitize() + fmt.Sprintf(` SET lock_timeout = '%dms'`, lockTimeout.Milliseconds()),
		// A gate: an event of type review.gate holds the only committer
		// for 1.5 s (pg_sleep is no lock wait: lock_timeout does not cut
		// it), so the next events queue and form one batch.
		`CREATE FUNCTION webhook_ingress.review_gate() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.event_type = 'review.gate' THEN
				PERFORM pg_sleep(1.5);
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER a_review_gate BEFORE INSERT ON webhook_ingress.events FOR EACH ROW EXECUTE FUNCTION webhook_ingress.review_gate()`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)

	const storeTimeout = 3 * time.Second
	var g *ingress.GroupStore
	b := setupWith(t, url, func(c *ingress.Config) {
		c.Section.StoreTimeout = storeTimeout
		g = groupStoreOn(t, url, ingress.GroupConfig{Committers: 1, MaxBatch: 64, Timeout: storeTimeout})
		c.Store = g
	})

	// Another transaction is writing the keys of the batch's events (a
	// backfill, a slow batch of another replica): each insert of them waits
	// on its row lock, and lock_timeout refuses it.
	const n = 12
	tx, err := b.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for i := range n {
		if _, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
			VALUES ('stripe', 'stripe', $1, 'invoice.paid', '{}', '{}', true)`, fmt.Sprintf("evt_lt_%d", i)); err != nil {
			t.Fatal(err)
		}
	}

	gate := sendAsync(t, stripeRequest(t, b.url, []byte(`{"id":"evt_gate","type":"review.gate"}`), time.Now()))
	testwait.Eventually(t, 10*time.Second, "the gate's batch sleeping in its trigger", func() (bool, string) {
		n := count(t, b.admin, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'`)
		return n == 1, fmt.Sprintf("%d sleeping", n)
	})
	start := time.Now()
	answers := make([]chan [2]string, n)
	for i := range n {
		answers[i] = sendAsync(t, stripeRequest(t, b.url, []byte(fmt.Sprintf(`{"id":"evt_lt_%d","type":"invoice.paid"}`, i)), time.Now()))
	}
	testwait.Eventually(t, 10*time.Second, "the events queued behind the gate", func() (bool, string) {
		return g.Queued() == n, fmt.Sprintf("%d queued", g.Queued())
	})
	if r := <-gate; r[0] != "200" {
		t.Fatalf("gate: %s", r[1])
	}

	var bad []string
	var slowest time.Duration
	for i, ch := range answers {
		r := <-ch
		took := time.Since(start)
		slowest = max(slowest, took)
		t.Logf("evt_lt_%d read after %s: %s", i, took.Round(10*time.Millisecond), strings.TrimSpace(r[1]))
		if r[0] != "503" || !strings.Contains(r[1], `"database_unavailable"`) {
			bad = append(bad, fmt.Sprintf("evt_lt_%d after %s: %s", i, took.Round(10*time.Millisecond), strings.TrimSpace(r[1])))
		}
	}
	t.Logf("slowest answer %s after the batch queued (gate 1.5s + lock_timeout %s)", slowest.Round(10*time.Millisecond), lockTimeout)
	if len(bad) > 0 {
		t.Fatalf("a batch refused by lock_timeout (nothing written): %d of %d webhooks not answered 503 database_unavailable; slowest answer after %s:\n%s",
			len(bad), n, slowest.Round(10*time.Millisecond), strings.Join(bad, "\n"))
	}
	if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id LIKE 'evt_lt_%'`); n != 0 {
		t.Fatalf("%d events visible outside the holding transaction", n)
	}
}
