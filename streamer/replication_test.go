package streamer_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/streamer"
)

// replTarget is one test's replication slot and the way to reach it.
type replTarget struct {
	url  string // the test database's superuser URL plus replication=database
	slot string
	// refuse makes (re)connects fail, as while the network to Postgres is cut.
	refuse atomic.Bool
}

// replication names a slot for this test (slots are cluster-wide: it is
// named after the test database) and drops it when the test ends, before the
// database's own cleanup (registered earlier, so it runs later). DROP
// DATABASE drops a database's inactive slots with it, but fails, even WITH
// (FORCE), while a slot is active, and pgtest ignores that error: so the slot
// is dropped here, waiting out a walsender that lingers after Stop, and a
// slot left behind fails the test.
func (b *testBundle) replication(t *testing.T) *replTarget {
	t.Helper()
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	slot := strings.TrimPrefix(u.Path, "/")
	q := u.Query()
	q.Set("replication", "database")
	u.RawQuery = q.Encode()
	r := &replTarget{url: u.String(), slot: slot}
	t.Cleanup(func() { b.dropSlot(t, slot) })
	return r
}

func (b *testBundle) dropSlot(t *testing.T, slot string) {
	t.Helper()
	ctx := context.Background()
	// The streamer has stopped, but its walsender may take a moment to
	// release the slot.
	testwait.Eventually(t, 10*time.Second, "replication slot "+slot+" dropped", func() (bool, string) {
		_, err := b.admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		return err == nil, fmt.Sprint(err)
	})
	var n int
	if err := b.admin.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n); err != nil || n != 0 {
		t.Errorf("replication slot %s still there (%d, %v): its database cannot be dropped", slot, n, err)
	}
}

func (r *replTarget) connect(ctx context.Context) (*pgconn.PgConn, error) {
	if r.refuse.Load() {
		return nil, errors.New("connection refused (test)")
	}
	return pgconn.Connect(ctx, r.url)
}

func (r *replTarget) config(poll time.Duration) streamer.Config {
	// No follow-up claims: these tests see what the replication wake-ups do.
	return streamer.Config{PollInterval: poll, ReplicationConnect: r.connect, SlotName: r.slot, FollowUp: -1}
}

func waitReplicationConnected(t *testing.T, s *streamer.Streamer, reconnects int) {
	t.Helper()
	testwait.Eventually(t, 15*time.Second, fmt.Sprintf("replication connected with %d reconnects", reconnects), func() (bool, string) {
		up, n := s.Replication().Connected()
		return up && n >= reconnects, fmt.Sprintf("connected=%v reconnects=%d", up, n)
	})
}

// waitStats waits until cond holds for s's stats, failing with the last seen.
func waitStats(t *testing.T, s *streamer.Streamer, within time.Duration, what string, cond func(streamer.Stats) bool) {
	t.Helper()
	testwait.Eventually(t, within, what, func() (bool, string) {
		st := s.Stats()
		return cond(st), fmt.Sprintf("stats %+v", st)
	})
}

// walLSN is a pg_lsn query's result as text.
func (b *testBundle) walLSN(t *testing.T, sql string, args ...any) string {
	t.Helper()
	var lsn string
	if err := b.admin.QueryRow(context.Background(), sql, args...).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

func (b *testBundle) lsnAtLeast(t *testing.T, a, c string) bool {
	t.Helper()
	var ok bool
	if err := b.admin.QueryRow(context.Background(), `SELECT $1::pg_lsn >= $2::pg_lsn`, a, c).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

const confirmedFlushSQL = `SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE slot_name = $1`

func TestReplicationConfigIsValidated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	connect := func(context.Context) (*pgconn.PgConn, error) { return nil, errors.New("unused") }
	tests := []struct {
		name string
		cfg  streamer.Config
		want string
	}{
		{"with LISTEN", streamer.Config{ReplicationConnect: connect, ListenConnect: b.listenConnect}, "exclusive"},
		{"slot name with capitals", streamer.Config{ReplicationConnect: connect, SlotName: "Inlet"}, "SlotName"},
		{"slot name with a quote", streamer.Config{ReplicationConnect: connect, SlotName: "a'b"}, "SlotName"},
		{"slot name too long", streamer.Config{ReplicationConnect: connect, SlotName: strings.Repeat("a", 64)}, "SlotName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Pool, cfg.Publisher = b.pool, b.pubsub
			if _, err := streamer.New(cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want an error naming %q", err, tt.want)
			}
		})
	}
	s, err := streamer.New(streamer.Config{Pool: b.pool, Publisher: b.pubsub, ReplicationConnect: connect})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Replication().Slot(); got != streamer.DefaultSlotName {
		t.Fatalf("default slot %q, want %q", got, streamer.DefaultSlotName)
	}
}

func TestReplicationWakesWithinMilliseconds(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	r := b.replication(t)
	c := b.collect(t, "h")
	// Polling effectively off: only the replication stream can deliver in time.
	s := b.newStreamer(t, r.config(time.Hour))
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitReplicationConnected(t, s, 0)
	const rounds = 20
	var took []time.Duration
	for i := 0; i < rounds; i++ {
		// Past the trailing rechecks of the last wake-up (recheckLater,
		// 100ms): this commit's own wake-up delivers, for a fair latency.
		time.Sleep(150 * time.Millisecond)
		before := s.Stats()
		start := time.Now()
		b.insertEvents(t, 1)
		select {
		case <-c.got:
		case <-time.After(2 * time.Second):
			t.Fatalf("round %d: no reference within 2s; stats before %+v, after %+v", i, before, s.Stats())
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("insert to reference over %d rounds: min %s, median %s, worst %s", rounds, took[0], took[rounds/2], took[rounds-1])
	waitStats(t, s, 2*time.Second, "a wake-up per insert", func(st streamer.Stats) bool { return st.ReplicationWakeups >= rounds })
	if st := s.Stats(); st.ReplicationWakeups != rounds || st.PollWakeups != 0 {
		t.Fatalf("stats %+v: want %d replication wake-ups and no poll", st, rounds)
	}
	if n := b.count(t, `SELECT count(*) FROM pg_publication_tables WHERE pubname = $1 AND schemaname = 'webhook_ingress' AND tablename = 'jobs'`, streamer.Publication); n != 1 {
		t.Fatalf("publication %s has %d jobs tables, want 1", streamer.Publication, n)
	}
}

// Only commits that make work claimable wake the claim loop: inserts, and
// updates back to pending; not the claim's own update to leased, nor a
// failure whose retry is due later.
func TestReplicationWakesOnInsertAndPendingAgainOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	r := b.replication(t)
	c := b.collect(t, "h")
	s := b.newStreamer(t, r.config(time.Hour))
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitReplicationConnected(t, s, 0)
	wakeups := func() int64 { return s.Stats().ReplicationWakeups }

	b.insertEvents(t, 1)
	first := c.wait(t, 1, 2*time.Second)[0]
	// A later insert orders after the claim's update in the stream: when it
	// has been counted, the claim has been seen.
	b.insertEvents(t, 1)
	c.wait(t, 1, 2*time.Second)
	waitStats(t, s, 2*time.Second, "second insert counted", func(st streamer.Stats) bool { return st.ReplicationWakeups >= 2 })
	if n := wakeups(); n != 2 {
		t.Fatalf("%d wake-ups after two inserts and their claims, want 2", n)
	}

	ctx := context.Background()
	if _, err := b.admin.Exec(ctx, `UPDATE webhook_ingress.jobs SET status = 'failed', lease_holder_id = NULL,
		lease_expires_at = NULL, next_attempt_at = now() + interval '1 hour' WHERE id = $1`, first.JobID); err != nil {
		t.Fatal(err)
	}
	b.insertEvents(t, 1)
	c.wait(t, 1, 2*time.Second)
	waitStats(t, s, 2*time.Second, "third insert counted", func(st streamer.Stats) bool { return st.ReplicationWakeups >= 3 })
	if n := wakeups(); n != 3 {
		t.Fatalf("%d wake-ups, want 3: an update to failed is no wake-up", n)
	}

	// As a replay would: pending again, due now. After the trailing
	// rechecks of the last wake-up (recheckLater, 100ms), so only this
	// update's can deliver.
	time.Sleep(150 * time.Millisecond)
	if _, err := b.admin.Exec(ctx, `UPDATE webhook_ingress.jobs SET status = 'pending', next_attempt_at = now() WHERE id = $1`, first.JobID); err != nil {
		t.Fatal(err)
	}
	again := c.wait(t, 1, 2*time.Second)[0]
	if again.JobID != first.JobID || again.Attempt != 2 {
		t.Fatalf("reference %+v, want job %d's second attempt", again, first.JobID)
	}
	waitStats(t, s, 2*time.Second, "the update counted", func(st streamer.Stats) bool { return st.ReplicationWakeups >= 4 })
	if n := wakeups(); n != 4 {
		t.Fatalf("%d wake-ups, want 4", n)
	}
}

func TestReplicationResumesFromConfirmedPosition(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	r := b.replication(t)
	c := b.collect(t, "h")
	ctx := context.Background()

	s1 := b.newStreamer(t, r.config(time.Hour))
	if err := s1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s1.Stop() // if the test fails before it is stopped below; Stop is idempotent
	waitReplicationConnected(t, s1, 0)
	before := b.walLSN(t, `SELECT pg_current_wal_lsn()::text`)
	b.insertEvents(t, 1)
	c.wait(t, 1, 2*time.Second)
	// The reference may come from the start's own claim, if that ran after
	// the insert: wait until the stream has carried the insert too, or
	// there is no position past it to confirm yet.
	waitStats(t, s1, 5*time.Second, "the insert seen in the replication stream", func(st streamer.Stats) bool { return st.ReplicationWakeups >= 1 })
	s1.Stop()
	confirmed1 := b.walLSN(t, confirmedFlushSQL, r.slot)
	t.Logf("slot confirmed %s after the first streamer (it reported %s); WAL was at %s before its insert",
		confirmed1, s1.Replication().Confirmed(), before)
	if !b.lsnAtLeast(t, confirmed1, before) || confirmed1 == before {
		t.Fatalf("confirmed_flush_lsn %s did not pass %s: the first streamer's position was not confirmed", confirmed1, before)
	}

	// Three transactions while no streamer runs.
	const missed = 3
	for i := 0; i < missed; i++ {
		b.insertEvents(t, 1)
	}
	after := b.walLSN(t, `SELECT pg_current_wal_lsn()::text`)

	s2 := b.newStreamer(t, r.config(time.Hour))
	if err := s2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s2.Stop()
	// It got none of the three in 20 s under loaded full runs, twice: the
	// first streamer's last claim, cancelled by Stop, still ran on the server
	// after these inserts and leased them unpublished (Stop now waits for the
	// round instead). If it fails again, say what the second streamer did and
	// where the jobs are.
	defer func() {
		if t.Failed() {
			t.Logf("second streamer: %+v", s2.Stats())
			rows, err := b.admin.Query(ctx, `SELECT id, status, attempt_count, next_attempt_at, coalesce(lease_holder_id, ''), created_at, now()
				FROM webhook_ingress.jobs ORDER BY id`)
			if err != nil {
				t.Logf("jobs: %v", err)
				return
			}
			defer rows.Close()
			for rows.Next() {
				var id int64
				var attempts int32
				var status, holder string
				var due, created, now time.Time
				if err := rows.Scan(&id, &status, &attempts, &due, &holder, &created, &now); err != nil {
					t.Logf("jobs: %v", err)
					return
				}
				t.Logf("job %d: %s, attempt %d, due %s, lease holder %q, created %s (now %s)", id, status, attempts,
					due.Format(time.RFC3339Nano), holder, created.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
			}
		}
	}()
	start := time.Now()
	// Generous: under -race on a loaded 2-core machine the slot's replay can
	// take seconds (CI once saw 2 of 3 within 5s).
	c.wait(t, missed, 20*time.Second)
	t.Logf("restart to %d references: %s", missed, time.Since(start))
	// The slot replays exactly the three transactions after its confirmed
	// position (the start's own claim delivered them first); had it started
	// before it, the first streamer's insert would wake a fourth time.
	waitStats(t, s2, 5*time.Second, "the missed inserts replayed from the slot", func(st streamer.Stats) bool {
		return st.ReplicationWakeups >= missed
	})
	testwait.Consistently(t, 300*time.Millisecond, fmt.Sprintf("%d replication wake-ups after the restart, no more", missed), func() (bool, string) {
		n := s2.Stats().ReplicationWakeups
		return n == missed, fmt.Sprintf("%d wake-ups", n)
	})
	testwait.Eventually(t, 10*time.Second, "confirmed_flush_lsn past the missed inserts at "+after, func() (bool, string) {
		lsn := b.walLSN(t, confirmedFlushSQL, r.slot)
		return b.lsnAtLeast(t, lsn, after), "confirmed " + lsn
	})
	t.Logf("slot confirmed %s, past %s", b.walLSN(t, confirmedFlushSQL, r.slot), after)
}

func TestReplicationKilledPollingCoversAndItReconnects(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	r := b.replication(t)
	c := b.collect(t, "h")
	s := b.newStreamer(t, r.config(300*time.Millisecond))
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitReplicationConnected(t, s, 0)
	// One delivery first: then the start's own claim is surely done, and
	// the trailing recheck after its wake-up has passed before the kill.
	b.insertEvents(t, 1)
	c.wait(t, 1, 2*time.Second)
	time.Sleep(250 * time.Millisecond) // past recheckLater (100ms): the wake-up's trailing rechecks are over

	r.refuse.Store(true)
	if n := b.count(t, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE backend_type = 'walsender' AND datname = current_database()`); n != 1 {
		t.Fatalf("terminated %d walsenders, want 1", n)
	}
	testwait.Eventually(t, 5*time.Second, "the streamer to notice its stream is gone", func() (bool, string) {
		up, n := s.Replication().Connected()
		return !up, fmt.Sprintf("connected=%v reconnects=%d", up, n)
	})
	wakeups := s.Stats().ReplicationWakeups
	start := time.Now()
	b.insertEvents(t, 1) // no stream: only polling can find it
	c.wait(t, 1, 5*time.Second)
	t.Logf("insert to reference by polling: %s", time.Since(start))
	if up, _ := s.Replication().Connected(); up {
		t.Fatal("reconnected while connects were refused")
	}
	if st := s.Stats(); st.PollWakeups == 0 || st.ReplicationWakeups != wakeups {
		t.Fatalf("stats %+v: want delivery by a poll wake-up", st)
	}

	r.refuse.Store(false)
	waitReplicationConnected(t, s, 1)
	// The slot kept the insert made while disconnected: it is replayed (a
	// wake-up, though polling already delivered it).
	waitStats(t, s, 5*time.Second, "the insert made while disconnected replayed", func(st streamer.Stats) bool {
		return st.ReplicationWakeups > wakeups
	})
	// And the new stream wakes the claim loop again, faster than the poll.
	wakeups = s.Stats().ReplicationWakeups
	b.insertEvents(t, 1)
	c.wait(t, 1, 2*time.Second)
	waitStats(t, s, 2*time.Second, "a replication wake-up on the new stream", func(st streamer.Stats) bool {
		return st.ReplicationWakeups > wakeups
	})
}

// A configuration that cannot work fails Start with a message saying what to
// do; once an operator has done it, a role that is not the owner streams too.
func TestReplicationSetupErrorsFailStart(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	ctx := context.Background()
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	slot := db
	t.Cleanup(func() { b.dropSlot(t, slot) })
	roleURL := func(role string) string {
		c := *u
		c.User = url.UserPassword(role, "pw")
		return c.String()
	}
	newRole := func(name, attrs string) string {
		t.Helper()
		if _, err := b.admin.Exec(ctx, `CREATE ROLE `+name+` LOGIN PASSWORD 'pw' `+attrs); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = b.admin.Exec(context.Background(), `DROP ROLE IF EXISTS `+name) })
		return roleURL(name)
	}
	start := func(roleURL string) (*streamer.Streamer, error) {
		s := b.newStreamer(t, streamer.Config{PollInterval: time.Hour, SlotName: slot,
			ReplicationConnect: func(ctx context.Context) (*pgconn.PgConn, error) {
				return streamer.ConnectReplication(ctx, roleURL)
			}})
		return s, s.Start(ctx)
	}

	plain := newRole(db+"_plain", "")
	if _, err := start(plain); !errors.Is(err, streamer.ErrReplicationSetup) || !strings.Contains(err.Error(), "REPLICATION") {
		t.Fatalf("Start without REPLICATION = %v, want ErrReplicationSetup naming REPLICATION", err)
	}

	repl := newRole(db+"_repl", "REPLICATION")
	_, err = start(repl)
	if !errors.Is(err, streamer.ErrReplicationSetup) ||
		!strings.Contains(err.Error(), "CREATE PUBLICATION inlet_jobs FOR TABLE webhook_ingress.jobs WITH (publish = 'insert, update', publish_via_partition_root = true)") {
		t.Fatalf("Start without the publication = %v, want ErrReplicationSetup naming the statement", err)
	}
	t.Logf("the operator is told: %v", err)

	if _, err := b.admin.Exec(ctx, `CREATE PUBLICATION inlet_jobs FOR TABLE webhook_ingress.jobs WITH (publish = 'insert, update', publish_via_partition_root = true)`); err != nil {
		t.Fatal(err)
	}
	c := b.collect(t, "h")
	s, err := start(repl)
	if err != nil {
		t.Fatalf("Start once the publication exists: %v", err)
	}
	defer s.Stop()
	waitReplicationConnected(t, s, 0)
	b.insertEvents(t, 1)
	c.wait(t, 1, 2*time.Second)
	// The delivery may come from another wake-up (the streamer also claims
	// when a handler's consumer turns live); the insert's transaction must
	// still arrive on the stream.
	waitStats(t, s, 5*time.Second, "a replication wake-up", func(st streamer.Stats) bool {
		return st.ReplicationWakeups > 0
	})
}

// Replicas of the streamer started together (a deployment scaled to several)
// may all find the publication missing and all create it: each must start,
// the losers of that race taking the winner's publication.
func TestReplicationStreamersStartingTogetherAllStart(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	ctx := context.Background()
	const replicas = 6
	targets := make([]*replTarget, replicas)
	streamers := make([]*streamer.Streamer, replicas)
	for i := range replicas {
		targets[i] = b.replication(t)
		targets[i].slot += fmt.Sprintf("_%d", i)
		t.Cleanup(func() { b.dropSlot(t, targets[i].slot) })
		streamers[i] = b.newStreamer(t, targets[i].config(time.Hour))
	}
	errs := make(chan error, replicas)
	gate := make(chan struct{})
	for i, s := range streamers {
		go func() {
			<-gate
			err := s.Start(ctx)
			if err != nil {
				err = fmt.Errorf("streamer %d: %w", i, err)
			}
			errs <- err
		}()
	}
	close(gate)
	for range replicas {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for _, s := range streamers {
		defer s.Stop()
	}
	var n int
	if err := b.admin.QueryRow(ctx, `SELECT count(*) FROM pg_publication WHERE pubname = 'inlet_jobs'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d publications inlet_jobs (%v), want 1", n, err)
	}
}

// inlet_streamer_replication_connected follows the stream: 0 before Start,
// 1 while it is up, 0 after Stop.
func TestReplicationConnectedMetric(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	r := b.replication(t)
	reg := prometheus.NewRegistry()
	cfg := r.config(time.Hour)
	cfg.Metrics = reg
	s := b.newStreamer(t, cfg)
	connected := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "inlet_streamer_replication_connected" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no inlet_streamer_replication_connected")
		return 0
	}
	if v := connected(); v != 0 {
		t.Fatalf("before Start: %v, want 0", v)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitReplicationConnected(t, s, 0)
	if v := connected(); v != 1 {
		t.Fatalf("while connected: %v, want 1", v)
	}
	s.Stop()
	if v := connected(); v != 0 {
		t.Fatalf("after Stop: %v, want 0", v)
	}
}
