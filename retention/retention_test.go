package retention_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/audit"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/retention"
	"github.com/inlet-dev/inlet/schema"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const day = 24 * time.Hour

type bundle struct {
	url  string
	pool *pgxpool.Pool // the owner
}

// setup returns a database whose partitions are weekly from ten weeks ago
// through two weeks ahead, and one subscribed handler.
func setup(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b := &bundle{url: url, pool: pool}
	// The migration partitioned from the week it ran; start the log earlier.
	// Dropping the empty partitions is retention's own path (and leaves rows in
	// retention_log, which the tests count from).
	b.exec(t, `SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`)
	b.exec(t, `SELECT webhook_ingress.create_partitions('week', 2, now() - interval '70 days')`)
	b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('h')`)
	return b
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := b.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// event stores an event received age ago (as the owner may; ingress stores
// now()) and returns its id.
func (b *bundle) event(t *testing.T, key string, age time.Duration) int64 {
	t.Helper()
	var id int64
	err := b.pool.QueryRow(context.Background(), `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, signature_verified, received_at)
		VALUES ('stripe', 'stripe', $1, 'invoice.paid', '{}', true, now() - $2::interval)
		RETURNING id`, key, age).Scan(&id)
	if err != nil {
		t.Fatalf("insert event %s: %v", key, err)
	}
	return id
}

// finish ends the jobs of event id with one attempt, recorded as consumers
// record it (010_lease_token): a success on the job row, under an id from
// job_attempts' sequence; a failure as a job_attempts row.
func (b *bundle) finish(t *testing.T, id int64, status string) {
	t.Helper()
	if status == "completed" {
		b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'completed', attempt_count = 1, attempted_at = now(), completed_at = now(),
			completed_attempt_id = nextval('webhook_ingress.job_attempts_id_seq'), worker_id = 'c1', updated_at = now() WHERE event_id = $1`, id)
		return
	}
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = $2, updated_at = now() WHERE event_id = $1`, id, status)
	b.exec(t, `INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, started_at, outcome)
		SELECT id, event_received_at, 1, now(), $2 FROM webhook_ingress.jobs WHERE event_id = $1`, id, status)
}

func (b *bundle) seal(t *testing.T) {
	t.Helper()
	s, err := audit.NewSealer(audit.Config{DB: b.pool, Grace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(context.Background()); err != nil && !errors.Is(err, audit.ErrNothingToSeal) {
		t.Fatal(err)
	}
}

func run(t *testing.T, db retention.DB, o retention.Options) retention.Report {
	t.Helper()
	if o.Interval == "" {
		o.Interval, o.Ahead = "week", 2
	}
	rep, err := retention.Run(context.Background(), db, o)
	if err != nil {
		t.Fatalf("Run(%+v): %v", o, err)
	}
	return rep
}

func verdicts(rep retention.Report) map[string]retention.Partition {
	out := map[string]retention.Partition{}
	for _, p := range rep.Partitions {
		if p.Events > 0 {
			out[p.Name] = p
		}
	}
	return out
}

func partitionOf(t *testing.T, b *bundle, id int64) string {
	t.Helper()
	var name string
	if err := b.pool.QueryRow(context.Background(), `SELECT tableoid::regclass::text FROM webhook_ingress.events WHERE id = $1`, id).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name[len("webhook_ingress."):]
}

func TestRetentionDropsOnlyOldFinishedSealedPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	baseLog := b.count(t, `SELECT count(*) FROM webhook_ingress.retention_log`)

	old1 := b.event(t, "evt_old_1", 60*day) // completed
	old2 := b.event(t, "evt_old_2", 60*day) // dead letter: finished too
	open := b.event(t, "evt_open", 45*day)  // its job is still pending
	recent := b.event(t, "evt_recent", 2*day)
	b.finish(t, old1, "completed")
	b.finish(t, old2, "dead_letter")
	b.finish(t, recent, "completed")
	oldPart, openPart := partitionOf(t, b, old1), partitionOf(t, b, open)
	if oldPart == openPart || partitionOf(t, b, old2) != oldPart {
		t.Fatalf("partitions: old %s, old2 %s, open %s", oldPart, partitionOf(t, b, old2), openPart)
	}

	// Not sealed yet: nothing with events is dropped; the empty old periods are.
	rep := run(t, b.pool, retention.Options{MaxAge: 30 * day})
	v := verdicts(rep)
	if p := v[oldPart]; p.Verdict != retention.Kept || p.Events != 2 || p.Reason == "" {
		t.Fatalf("unsealed %s: %+v, want kept for being unsealed", oldPart, p)
	}
	if p := v[openPart]; p.Verdict != retention.Kept || p.OpenJobs != 1 {
		t.Fatalf("%s with an open job: %+v, want kept", openPart, p)
	}
	emptyDropped := rep.Dropped()
	if emptyDropped == 0 {
		t.Fatalf("no empty old partition dropped: %+v", rep.Partitions)
	}
	for _, p := range rep.Partitions {
		if !p.End.Before(*rep.Cutoff) && !p.End.Equal(*rep.Cutoff) {
			t.Fatalf("partition %s ends %s, after the cutoff %s", p.Name, p.End, rep.Cutoff)
		}
	}

	b.seal(t)
	// A dry run says what would go and changes nothing.
	dry := run(t, b.pool, retention.Options{MaxAge: 30 * day, DryRun: true})
	if p := verdicts(dry)[oldPart]; p.Verdict != retention.WouldDrop {
		t.Fatalf("dry run, %s: %+v, want would_drop", oldPart, p)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE id = $1`, old1); n != 1 {
		t.Fatal("the dry run dropped events")
	}

	rep = run(t, b.pool, retention.Options{MaxAge: 30 * day})
	v = verdicts(rep)
	if p := v[oldPart]; p.Verdict != retention.Dropped || p.Events != 2 || p.Jobs != 2 || p.Attempts != 2 || p.DeadLetters != 1 {
		t.Fatalf("sealed %s: %+v, want dropped with 2 events, 2 jobs, 2 attempts (the success on its job row counted)", oldPart, p)
	}
	if p := v[openPart]; p.Verdict != retention.Kept {
		t.Fatalf("%s with an open job after sealing: %+v, want kept", openPart, p)
	}
	if _, ok := v[partitionOf(t, b, recent)]; ok {
		t.Fatal("a partition younger than the maximum age was considered")
	}
	for _, q := range []string{
		`SELECT count(*) FROM webhook_ingress.events WHERE id = ANY($1)`,
		`SELECT count(*) FROM webhook_ingress.jobs WHERE event_id = ANY($1)`,
		`SELECT count(*) FROM webhook_ingress.event_keys WHERE event_id = ANY($1)`,
		`SELECT count(*) FROM pg_class WHERE relname = ANY(ARRAY['` + oldPart + `', 'jobs` + oldPart[len("events"):] + `']) AND $1::bigint[] IS NOT NULL`,
	} {
		if n := b.count(t, q, []int64{old1, old2}); n != 0 {
			t.Fatalf("%s: %d rows left", q, n)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE id = ANY($1)`, []int64{open, recent}); n != 2 {
		t.Fatalf("kept events: %d of 2 left", n)
	}
	// The view of every attempt reads the parents: the drop did not need to
	// touch it, and it shows what is left (recent's success on its job row).
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.attempts`); n != 1 {
		t.Fatalf("the view attempts shows %d attempts after the drop, want recent's 1", n)
	}
	var ids string
	if err := b.pool.QueryRow(ctx, `SELECT event_ids::text FROM webhook_ingress.retention_log WHERE events > 0`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	if want := "{\"[" + strconv.FormatInt(old1, 10) + "," + strconv.FormatInt(old2+1, 10) + ")\"}"; ids != want {
		t.Fatalf("retention_log event_ids = %s, want %s", ids, want)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.retention_log`); n != baseLog+int64(emptyDropped+rep.Dropped()) {
		t.Fatalf("retention_log has %d rows, want %d", n, baseLog+int64(emptyDropped+rep.Dropped()))
	}

	// The seals still verify: the dropped ids are accounted as pruned.
	vr, err := audit.Verify(ctx, b.pool, audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !vr.OK || vr.Pruned != 2 {
		t.Fatalf("verify after retention: %+v, want OK with 2 pruned", vr)
	}
	// An event removed by other means is still reported.
	b.exec(t, `ALTER TABLE webhook_ingress.events DISABLE TRIGGER events_append_only_row`)
	b.exec(t, `DELETE FROM webhook_ingress.job_attempts WHERE job_id IN (SELECT id FROM webhook_ingress.jobs WHERE event_id = $1)`, recent)
	b.exec(t, `DELETE FROM webhook_ingress.jobs WHERE event_id = $1`, recent)
	b.exec(t, `DELETE FROM webhook_ingress.events WHERE id = $1`, recent)
	b.exec(t, `ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row`)
	vr, err = audit.Verify(ctx, b.pool, audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vr.OK || vr.Problem.Kind != audit.MissingEvent || vr.Problem.EventID != recent {
		t.Fatalf("verify after deleting event %d: %+v, want it missing", recent, vr)
	}

	// With its key gone, the same provider id is a new event again.
	if id := b.event(t, "evt_old_1", time.Hour); id <= old1 {
		t.Fatalf("re-sent event got id %d", id)
	}
}

func TestRetentionKeepsDefaultPartitionAndCreatesAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// Far older than any partition: lands in the default partition.
	ancient := b.event(t, "evt_ancient", 400*day)
	b.finish(t, ancient, "completed")
	b.seal(t)
	if p := partitionOf(t, b, ancient); p != "events_default" {
		t.Fatalf("ancient event in %s", p)
	}
	rep := run(t, b.pool, retention.Options{MaxAge: 30 * day, Interval: "day", Ahead: 10})
	if rep.Default.Events != 1 {
		t.Fatalf("default partition: %+v, want 1 event", rep.Default)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE id = $1`, ancient); n != 1 {
		t.Fatal("retention dropped an event of the default partition")
	}
	// Weekly partitions reach two weeks ahead; daily ones continue from their
	// end through ten days ahead (none needed when the weeks already reach).
	through := *rep.Through
	if through.Before(rep.Now.Add(10 * day)) {
		t.Fatalf("partitioned through %s, want at least ten days past %s", through, rep.Now)
	}
	again, err := retention.EnsurePartitions(ctx, b.pool, "day", 10, time.Second)
	if err != nil || len(again) != 0 {
		t.Fatalf("second EnsurePartitions: %v, %v; want none created", again, err)
	}
	more, err := retention.EnsurePartitions(ctx, b.pool, "day", 30, time.Second)
	if err != nil || len(more) == 0 {
		t.Fatalf("EnsurePartitions 30 days ahead: %v, %v", more, err)
	}
	for i, p := range more {
		if p.End.Sub(p.Start) != day && i > 0 {
			t.Fatalf("daily partition %d: %s..%s", i, p.Start, p.End)
		}
		if i > 0 && !p.Start.Equal(more[i-1].End) {
			t.Fatalf("partitions not contiguous at %s", p.Start)
		}
	}
	// Every new partition is guarded like the parent.
	if n := b.count(t, `SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		WHERE c.relname LIKE 'events_p%' AND t.tgname IN ('events_append_only_row', 'events_append_only_truncate', 'events_dedupe') AND t.tgenabled <> 'A'`); n != 0 {
		t.Fatalf("%d partition triggers not ENABLE ALWAYS", n)
	}
	if _, err := b.pool.Exec(ctx, `TRUNCATE webhook_ingress.`+partitionOf(t, b, b.event(t, "evt_new", 0))); err == nil {
		t.Fatal("TRUNCATE of a period partition succeeded")
	}
	if _, err := retention.EnsurePartitions(ctx, b.pool, "fortnight", 1, time.Second); err == nil {
		t.Fatal("EnsurePartitions accepted interval fortnight")
	}
}

func TestRetentionRefusesNonOwnerAndBusyPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	op, err := database.Open(ctx, b.url, database.Options{Role: schema.OperatorRole, MaxConns: 2, AppName: "retention-test-operator"})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if _, err := retention.Run(ctx, op, retention.Options{MaxAge: day, Interval: "week"}); !errors.Is(err, retention.ErrNotOwner) {
		t.Fatalf("Run as webhook_operator: %v, want ErrNotOwner", err)
	}

	old := b.event(t, "evt_old", 60*day)
	b.finish(t, old, "completed")
	b.seal(t)
	// A reader holding the partition (a long report, say): the drop waits at
	// most the lock timeout and keeps the partition for the next run.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM webhook_ingress.`+partitionOf(t, b, old)); err != nil {
		t.Fatal(err)
	}
	rep := run(t, b.pool, retention.Options{MaxAge: 30 * day, LockTimeout: 100 * time.Millisecond})
	if p := verdicts(rep)[partitionOf(t, b, old)]; p.Verdict != retention.Kept || p.Reason == "" {
		t.Fatalf("busy partition: %+v, want kept as busy", p)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	rep = run(t, b.pool, retention.Options{MaxAge: 30 * day})
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE id = $1`, old); n != 0 || rep.Dropped() == 0 {
		t.Fatalf("after the reader left: %d events left, %d dropped", n, rep.Dropped())
	}
}

// A dropped period takes its ordered handlers' dead letters out of
// order_lanes (020) too: they no longer hold back their keys, as the jobs
// they were are gone. A lane of a period kept stays.
func TestRetentionDropsTheLanesOfItsDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.event(t, "evt_old", 60*day)
	recent := b.event(t, "evt_recent", 2*day)
	b.finish(t, old, "completed")
	b.finish(t, recent, "completed")
	for _, e := range []struct {
		id     int64
		status string
	}{{old, "dead_letter"}, {recent, "pending"}} {
		b.exec(t, `INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts, order_key, order_at, status)
			SELECT id, received_at, 'o', provider, event_type, 5, 'cus_1', received_at, $2 FROM webhook_ingress.events WHERE id = $1`, e.id, e.status)
	}
	lanes := func() string {
		rows, _ := b.pool.Query(context.Background(), `SELECT e.external_event_id FROM webhook_ingress.order_lanes l
			JOIN webhook_ingress.jobs j ON j.id = l.job_id JOIN webhook_ingress.events e ON e.id = j.event_id ORDER BY 1`)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		n := b.count(t, `SELECT count(*) FROM webhook_ingress.order_lanes`)
		return fmt.Sprintf("%v (%d rows)", ids, n)
	}
	if got := lanes(); got != "[evt_old evt_recent] (2 rows)" {
		t.Fatalf("lanes before: %s", got)
	}
	b.seal(t)
	rep := run(t, b.pool, retention.Options{MaxAge: 30 * day})
	if p := verdicts(rep)[partitionOf(t, b, recent)]; p.Verdict != "" {
		t.Fatalf("the recent period was considered: %+v", p)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE id = $1`, old); n != 0 {
		t.Fatalf("the old period was not dropped: %+v", rep.Partitions)
	}
	if got := lanes(); got != "[evt_recent] (1 rows)" {
		t.Fatalf("lanes after the drop: %s, want only evt_recent's", got)
	}
}

// remove deletes event id, its jobs and attempts, as an owner who disabled
// the append-only trigger would.
func (b *bundle) remove(t *testing.T, id int64) {
	t.Helper()
	b.exec(t, `ALTER TABLE webhook_ingress.events DISABLE TRIGGER events_append_only_row`)
	b.exec(t, `DELETE FROM webhook_ingress.job_attempts WHERE job_id IN (SELECT id FROM webhook_ingress.jobs WHERE event_id = $1)`, id)
	b.exec(t, `DELETE FROM webhook_ingress.jobs WHERE event_id = $1`, id)
	b.exec(t, `DELETE FROM webhook_ingress.events WHERE id = $1`, id)
	b.exec(t, `ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row`)
}

// A real drop of a sealed period verifies, its events pruned. An owner who
// then deletes an event sealed apart from that period's events and adds its
// id to a retention_log row of the same period is found out: the period does
// not overlap when the event's checkpoint says its events were received. An
// event sealed in the same checkpoint as the dropped ones cannot be told
// apart (the window the audit package doc names).
func TestVerifyChecksPrunesAgainstTheSeals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old1 := b.event(t, "evt_old_1", 60*day)
	old2 := b.event(t, "evt_old_2", 60*day)
	beside := b.event(t, "evt_beside", 2*day) // sealed with old1 and old2
	for _, id := range []int64{old1, old2, beside} {
		b.finish(t, id, "completed")
	}
	b.seal(t)
	apart := b.event(t, "evt_apart", 2*day) // sealed in a checkpoint of its own
	b.finish(t, apart, "completed")
	b.seal(t)

	if p := verdicts(run(t, b.pool, retention.Options{MaxAge: 30 * day})); len(p) != 1 {
		t.Fatalf("retention considered %v with events, want old1's and old2's partition alone", p)
	}
	var start, end time.Time
	if err := b.pool.QueryRow(ctx, `SELECT period_start, period_end FROM webhook_ingress.retention_log WHERE events > 0`).Scan(&start, &end); err != nil {
		t.Fatalf("the dropped period: %v", err)
	}
	vr, err := audit.Verify(ctx, b.pool, audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !vr.OK || vr.Pruned != 2 || vr.Checkpoints != 2 {
		t.Fatalf("verify after the drop: %+v, want OK with 2 pruned", vr)
	}

	forge := func(id int64) {
		t.Helper()
		b.exec(t, `INSERT INTO webhook_ingress.retention_log (period_start, period_end, events, jobs, attempts, event_ids, sealed_through)
			VALUES ($1, $2, 1, 1, 1, ARRAY[int8range($3, $3, '[]')], (SELECT max(last_event_id) FROM webhook_ingress.audit_checkpoints))`, start, end, id)
	}
	b.remove(t, apart)
	forge(apart)
	b.remove(t, beside)
	forge(beside)
	vr, err = audit.Verify(ctx, b.pool, audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vr.OK || vr.ProblemsFound != 1 || vr.Problem.Kind != audit.MissingEvent || vr.Problem.EventID != apart || vr.Problem.Checkpoint != 2 {
		t.Fatalf("verify after forging the prune of event %d: %+v, want it missing", apart, vr)
	}
	t.Logf("problem: %s", vr.Problem.Reason)
	if vr.Pruned != 3 {
		t.Fatalf("verify: %d pruned, want 3: old1, old2 and, unseen, event %d sealed beside them", vr.Pruned, beside)
	}
}
