package ingress_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// TestFilterCutByStoreTimeoutIsNotOutcomeUnknown (review helper-164, fixed;
// this describes the code before the fix): defect: a webhook whose
// subscription filter evaluation is stopped by its store_timeout is answered
// 503 "outcome_unknown" (counted in inlet_ingress_outcome_unknown_total and
// logged "webhook outcome unknown; the provider's retry will be
// deduplicated"), although nothing of it was ever sent to the database.
// docs/pipeline.md "HTTP contract" reserves outcome_unknown for "the write was
// sent but no answer came … the transaction may still commit"; a write that
// never reached the database is database_unavailable. An operator alerting on
// outcome_unknown (a possible duplicate/commit ambiguity) is sent looking for
// an ambiguous commit that cannot exist.
//
// How it happens here: the filtered subscriptions' periodic reload waits on
// the database (a lock on filter_version: a slow or locked catalog) for up
// to filterLoadTimeout (5s, ingress/filters.go), longer than store_timeout;
// the reload fails and the last copy is used, and the filter (a
// comprehension: CEL checks the context every 16 iterations) is then
// evaluated on the request's expired context.
//
// Root cause: filters.match returns the evaluation's context error as is
// (ingress/filters.go:179, "return nil, version, err"), and
// GroupStore.Insert / PGStore.Insert wrap it without errNotWritten
// (ingress/groupcommit.go:129, store.go:108), so classify
// (ingress/fault.go:40-64) finds neither errNotWritten nor a PgError nor a
// SafeToRetry error and falls through to faultUnknown.
//
// Now: 503 database_unavailable (known not written), as for an insert
// given up while waiting for a pool connection or queued for a batch.
func TestFilterCutByStoreTimeoutIsNotOutcomeUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, filter)
		VALUES ('rv-any-big', 'stripe', 'charge.*', 'payload.items.exists(i, i > 1000)')`); err != nil {
		t.Fatal(err)
	}
	// store_timeout 4s: shorter than the filters' reload timeout (5s), and
	// the answer's write deadline (store_timeout + 2s) still outlasts it.
	b := setupWith(t, url, func(c *ingress.Config) {
		c.Section.StoreTimeout = 4 * time.Second
		c.Store = groupStoreOn(t, url, c.Section.WithDefaults().GroupConfig())
	})
	items := make([]string, 40)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	body := func(id string) []byte {
		return fmt.Appendf(nil, `{"id":%q,"type":"charge.succeeded","items":[%s]}`, id, strings.Join(items, ","))
	}
	// The first webhook reads the filtered subscriptions (the copy).
	if code, ans, _ := do(t, stripeRequest(t, b.url, body("evt_rv_first"), time.Now())); code != 200 {
		t.Fatalf("first webhook: %d %s", code, ans)
	}
	// The next reload waits on filter_version.
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE webhook_ingress.filter_version IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the copy is older than filterRefresh (1s)
	ch := sendAsync(t, stripeRequest(t, b.url, body("evt_rv_cut"), time.Now()))
	testwait.Eventually(t, 10*time.Second, "the reload waiting on filter_version", func() (bool, string) {
		n := count(t, admin, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)
		return n > 0, fmt.Sprintf("%d waiting", n)
	})
	r := <-ch
	_ = tx.Rollback(ctx)
	t.Logf("answer: %s", r[1])
	if n := count(t, admin, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = 'evt_rv_cut'`); n != 0 {
		t.Fatalf("premise: the event was stored (%d rows)", n)
	}
	if r[0] != "503" {
		t.Fatalf("premise: answer %s, want a 503", r[1])
	}
	if !strings.Contains(r[1], `"database_unavailable"`) {
		t.Fatalf("a webhook never sent to the database (its filter evaluation cut by store_timeout) answered %s; want 503 database_unavailable, not outcome_unknown", r[1])
	}
}
