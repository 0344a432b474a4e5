package streamer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
	"github.com/inlet-dev/inlet/streamer"
)

// TestDeferredLeasesAreDueOnTheDatabaseClock (review helper-270, fixed).
// Defect: the streamer defers the references of a handler shared by
// consumer roles beyond what a role's consumers start (paceRoutes, DeferJobs)
// to a due time computed on the streamer's own wall clock
// (streamer/streamer.go:paceRoutes `now := time.Now()` and
// streamer/inflight.go:topicDefer), written as an absolute next_attempt_at
// that every claim compares with the database's now(). The docs say leases,
// retries and durations use the database's clock or the monotonic one
// (tests/chaos_test.go TestChaosClockSkew: "so nothing changes"; pipeline.md
// "on the database clock"), and only silence alerts are a known clock limit.
// With the database's clock ahead of the streamer's, the deferral lands in
// the database's past: greatest(next_attempt_at, due_at) keeps the old due
// time, the deferred jobs are due again at once, every claim leases and
// defers the slow role's backlog again, and the other role's jobs behind it
// are never reached (the starvation helper-173/180 fixed: guarantee 3).
// With the database behind, the deferred jobs wait the whole skew longer.
// Setup: a cluster under libfaketime, 10 minutes ahead of this process;
// handler "shared" run by two scoped roles (stripe, github) with live
// consumers; 8 due stripe jobs, then 1 github job; a streamer with batch 4,
// floor 2; six ClaimOnce rounds.
// Expected: the deferred stripe jobs are due after the database's now(), so
// a later claim reaches the github job (as it does with clocks in sync).
// Observed: both jobs deferred by the first claim stay due at once
// (next_attempt_at - now() = -0.03 s on the database's clock, their old due
// time: the streamer's due_at was ~600 s in the database's past); 6 rounds
// leased stripe jobs 24 times, published 2, deferred 22, and the github job
// stayed pending. The same test with the clocks in sync passes (deferred
// +2.0 s, github job leased, 9 leases).
// Fixed: DeferJobs takes a delay per job (interval[]) and sets
// next_attempt_at = greatest(next_attempt_at, now() + delay), on the
// database's clock; the topic's deferral chain (topicPace.deferred) is kept
// as an offset on this process's monotonic clock, and inFlight.topicDefer
// returns the delay, not a wall-clock due time. The same setup with the
// database's clock 10 minutes behind checks the other way: the deferred
// jobs are due within the deferral limit (a lease), not the skew later.
func TestDeferredLeasesAreDueOnTheDatabaseClock(t *testing.T) {
	lib := deferFaketime(t)
	t.Run("ahead", func(t *testing.T) { deferOnSkewedClock(t, lib, "+10m", 600) })
	t.Run("behind", func(t *testing.T) { deferOnSkewedClock(t, lib, "-10m", -600) })
}

// deferOnSkewedClock runs TestDeferredLeasesAreDueOnTheDatabaseClock with
// the database's clock offset (libfaketime's FAKETIME) from this process's
// by about wantSkew seconds.
func deferOnSkewedClock(t *testing.T, lib, offset string, wantSkew float64) {
	ctx := context.Background()
	cluster, err := pgcluster.New(ctx, pgcluster.Config{Dir: filepath.Join(pgtest.TempDir(t), "pg"), Install: true,
		Settings: map[string]string{"fsync": "off"},
		Env:      []string{"LD_PRELOAD=" + lib, "FAKETIME=" + offset, "DONT_FAKE_MONOTONIC=1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	url := cluster.URL("postgres")
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	var skew float64
	if err := conn.QueryRow(ctx, `SELECT extract(epoch FROM clock_timestamp() - $1::timestamptz)`, time.Now()).Scan(&skew); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if skew < wantSkew-60 || skew > wantSkew+60 {
		t.Fatalf("the database's clock is %.0fs off this process's, want %+.0fs: libfaketime did not take", skew, wantSkew)
	}

	b := setupOn(t, url, "shared")
	roles := map[string]string{}
	for _, scope := range []string{"stripe", "github"} {
		role := fmt.Sprintf("webhook_consumer_defer_%s_%d", scope, os.Getpid())
		if _, err := queries.New(b.admin).CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role,
			Handlers: []string{"shared"}, ScopeProviders: []string{scope}, ScopeTypes: []string{"*"}}); err != nil {
			t.Fatal(err)
		}
		roles[scope] = role
		if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.consumers (handler, worker_id, seen_at, alive_until, db_role)
			VALUES ('shared', $1, now(), now() + interval '1 hour', $2)`, "w-"+scope, role); err != nil {
			t.Fatal(err)
		}
	}
	insert := func(provider string, n int) {
		t.Helper()
		if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			SELECT $1, 'hmac', 'evt_' || $1 || '_' || g, 'x.y', 'x', true FROM generate_series(1, $2::int) g`, provider, n); err != nil {
			t.Fatal(err)
		}
	}
	insert("stripe", 8) // the slow role's backlog, due first
	insert("github", 1) // the other role's job, behind it

	const lease = time.Minute // the deferral limit (inFlight.deferLimit)
	s := b.newStreamer(t, streamer.Config{BatchSize: 4, MinLeasedPerHandler: 2, LeaseDuration: lease})
	var firstDeferral []float64
	for round := 1; round <= 6; round++ {
		if _, err := s.ClaimOnce(ctx); err != nil {
			t.Fatalf("claim round %d: %v", round, err)
		}
		if round == 1 {
			// How far past the database's now() each deferred job is due.
			rows, err := b.admin.Query(ctx, `SELECT extract(epoch FROM next_attempt_at - now())::float8
				FROM webhook_ingress.jobs WHERE status = 'pending' AND provider = 'stripe' AND attempted_at IS NOT NULL ORDER BY id`)
			if err != nil {
				t.Fatal(err)
			}
			firstDeferral, err = pgx.CollectRows(rows, pgx.RowTo[float64])
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	var githubStatus string
	if err := b.admin.QueryRow(ctx, `SELECT status FROM webhook_ingress.jobs WHERE provider = 'github'`).Scan(&githubStatus); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	t.Logf("after 6 claims: github job %s; claimed %d, published %d, deferred %d; stripe jobs deferred by round 1 due in %v s (database clock)",
		githubStatus, st.Claimed, st.Published, st.Deferred, firstDeferral)
	notDeferred, tooLate := 0, 0
	for _, d := range firstDeferral {
		switch {
		case d <= 0:
			notDeferred++
		case d > lease.Seconds():
			tooLate++
		}
	}
	if len(firstDeferral) == 0 {
		t.Errorf("the first claim deferred no stripe job: want those beyond the floor deferred")
	}
	if notDeferred > 0 {
		t.Errorf("%d of %d deferred stripe jobs are due at once on the database's clock (due in %v s): the deferral was computed on the streamer's clock",
			notDeferred, len(firstDeferral), firstDeferral)
	}
	if tooLate > 0 {
		t.Errorf("%d of %d deferred stripe jobs are due more than a lease (%s) ahead on the database's clock (due in %v s): the deferral was computed on the streamer's clock",
			tooLate, len(firstDeferral), lease, firstDeferral)
	}
	if githubStatus != "leased" {
		t.Errorf("the other role's job is %s after 6 claims, want leased: the slow role's deferred backlog is leased and deferred again on every claim",
			githubStatus)
	}
}

// deferFaketime finds libfaketime, skipping the test when it is not
// installed.
func deferFaketime(t *testing.T) string {
	t.Helper()
	find := func() string {
		m, _ := filepath.Glob("/usr/lib/*/faketime/libfaketime.so.1")
		if len(m) == 0 {
			m, _ = filepath.Glob("/usr/lib/faketime/libfaketime.so.1")
		}
		if len(m) == 0 {
			return ""
		}
		return m[0]
	}
	if lib := find(); lib != "" {
		return lib
	}
	t.Skip("libfaketime is not installed (apt-get install libfaketime)")
	return ""
}
