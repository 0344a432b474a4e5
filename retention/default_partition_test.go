package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/retention"
	"github.com/inlet-dev/inlet/schema/queries"
)

// uncoverNow drops the (empty) period partitions that cover now and later,
// as if inlet retention / inlet migrate had not run for longer than
// retention.ahead periods: new events land in the default partition.
func uncoverNow(t *testing.T, b *bundle) {
	t.Helper()
	b.exec(t, `SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions() WHERE period_end > now()`)
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.partitions() WHERE period_end > now()`); n != 0 {
		t.Fatalf("%d partitions still cover now", n)
	}
}

// DEFECT: inlet retention / inlet migrate (retention.EnsurePartitions ->
// webhook_ingress.create_partitions) fail with
//
//	updated partition constraint for default partition "events_default"
//	would be violated by some row (SQLSTATE 23514)
//
// when an ingest transaction that has inserted an event into the default
// partition (its period has no partition yet) is still open while the run
// creates that period's partition. create_partitions promises "A period with
// rows already in the default partition is skipped (creating it would fail)",
// but it looks for such rows (SELECT max(received_at) FROM events_default ...)
// before it holds any lock: the uncommitted row is invisible to that read,
// CREATE TABLE ... PARTITION OF then waits for the ingest transaction
// (ACCESS EXCLUSIVE on events), and, once it commits, re-scans the default
// partition with a fresh snapshot, finds the row and fails. The whole run
// fails (inlet retention drops nothing that run; an inlet migrate init
// container exits non-zero) with an error that names neither the cause nor
// the remedy. This is exactly the situation after partitions ran out
// ("retention not run for a while") on a live system, at the first run.
//
// Expected: the run succeeds; the period holding the in-flight row is
// skipped (it stays in the default partition, as documented) and the later
// periods are created.
func TestEnsurePartitionsWaitsForAnInFlightDefaultRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	uncoverNow(t, b)

	w, _ := ingressWriter(t, b.url)
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// Ingress's own insert (as webhook_ingress_writer, received_at now()):
	// no partition covers now, so it goes to events_default. Not committed yet.
	if _, err := queries.New(tx).InsertEvent(ctx, queries.InsertEventParams{Provider: "stripe", Scheme: "stripe",
		ExternalEventID: "evt_in_flight", EventType: "invoice.paid",
		Headers: []byte(`{}`), RawBody: []byte(`{}`), SignatureVerified: true, Column10: ""}); err != nil {
		t.Fatal(err)
	}

	type result struct {
		created []retention.Period
		err     error
	}
	done := make(chan result, 1)
	go func() {
		c, err := retention.EnsurePartitions(ctx, b.pool, "week", 2, 20*time.Second)
		done <- result{c, err}
	}()
	// The run waits for the ingest transaction's lock on events.
	waitFor(t, b, "create_partitions to wait for the ingest transaction", `SELECT count(*) FROM pg_locks l
		WHERE l.relation = 'webhook_ingress.events'::regclass AND l.mode = 'AccessExclusiveLock' AND NOT l.granted`)
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the ingest transaction failed to commit: %v", err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("inlet retention / inlet migrate failed because an event was being ingested into the default partition: %v", r.err)
	}
	if len(r.created) == 0 {
		t.Fatalf("no later period created")
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events_default WHERE external_event_id = 'evt_in_flight'`); n != 1 {
		t.Fatalf("the in-flight event is not in the default partition (%d)", n)
	}
}

// DEFECT: one row in the default partition dated past the newest partition
// stops create_partitions from creating any period before that row's, even
// the periods that hold no default row: it computes
// `start := date_trunc(p_interval, max(received_at of events_default >= start)) + step`
// and so jumps over every period up to the newest default row. A row dated a
// year ahead (the database host's clock stepped forward for a minute - a VM
// restored with a wrong clock, an NTP step - or an owner's import with a
// mistyped timestamp) makes every inlet retention / inlet migrate create
// nothing for a year, silently (exit 0, "created: []"), and every event
// ingested meanwhile goes to the default partition, which retention never
// drops: max_age stops applying to the whole log.
//
// create_partitions' own comment (005_partitions, 009) promises less damage:
// "A period with rows already in the default partition is skipped (creating
// it would fail); those rows stay in the default partition." Here the
// current period and the next two hold no default row, yet are not created.
//
// Expected: the periods from the newest partition through retention.ahead
// past now that hold no row of the default partition are created (only a
// period that holds such rows is skipped), so new events land in period
// partitions again.
func TestAFutureDatedDefaultRowHoldsBackOnlyItsPeriod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	uncoverNow(t, b)
	// One event stored while the database clock read a year ahead (as the
	// owner may set received_at; ingress's default now() would have done the
	// same under that clock).
	b.exec(t, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified, received_at)
		VALUES ('stripe', 'stripe', 'evt_clock_jump', 'invoice.paid', '{}', true, now() + interval '365 days')`)

	created, err := retention.EnsurePartitions(ctx, b.pool, "week", 2, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d periods: %v", len(created), created)
	// Ingress stores an event now: where does it go?
	w, _ := ingressWriter(t, b.url)
	if err := ingest(ctx, w); err != nil {
		t.Fatal(err)
	}
	var part string
	if err := b.pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM webhook_ingress.events WHERE external_event_id LIKE 'evt_lock_%' ORDER BY id DESC LIMIT 1`).Scan(&part); err != nil {
		t.Fatal(err)
	}
	if len(created) == 0 || part == "webhook_ingress.events_default" {
		t.Fatalf("with one default-partition row dated a year ahead, partitions ahead created: %d (want the current week and 2 ahead); an event ingested now lands in %s, which retention never drops", len(created), part)
	}
}
