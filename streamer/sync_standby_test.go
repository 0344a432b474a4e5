package streamer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testlog"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/streamer"
)

// syncStandbyWalsenders lists pg_stat_replication as "name (state): priority
// p, sync_state", and how many walsenders of name are streaming with a
// synchronous priority.
func syncStandbyWalsenders(ctx context.Context, conn *pgx.Conn, name string) (string, int, error) {
	rows, err := conn.Query(ctx, `SELECT application_name, state, sync_priority, sync_state
		FROM pg_stat_replication ORDER BY application_name`)
	if err != nil {
		return "", 0, err
	}
	defer rows.Close()
	var out []string
	n := 0
	for rows.Next() {
		var app, state, sync string
		var prio int
		if err := rows.Scan(&app, &state, &prio, &sync); err != nil {
			return "", 0, err
		}
		out = append(out, fmt.Sprintf("%s (%s): priority %d, %s", app, state, prio, sync))
		if app == name && state == "streaming" && prio > 0 {
			n++
		}
	}
	return strings.Join(out, "; "), n, rows.Err()
}

// TestReplicationStreamIsNeverASynchronousStandby (review helper-315, fixed).
// Defect: with streamer.wake: replication, the streamer's logical walsender
// is a synchronous-standby candidate like any other walsender. Under
// synchronous_standby_names = '*' (the setting the project's own HA run,
// tests/chaos_test.go TestChaosStandbyPromoted, uses with wake:
// replication, and that docs/operations.md cites: "nothing acknowledged is
// lost only with the standby synchronous (synchronous_standby_names), as in
// the run") the stream is picked as THE synchronous standby whenever the
// physical standby is away (or simply connected after the streamer: ties
// go to the lower walsender slot). A commit is then acknowledged once the
// streamer, which stores nothing, reports the WAL flushed: ingress answers
// 200 for an event that exists only on the primary, and a failover loses it
// (DESIGN invariant: "Kill any process at any moment (… Postgres): no
// acknowledged event is lost"). It also puts the streamer's 1 s status
// cadence (statusInterval) into every commit's latency.
// Root cause: streamer/replication.go ConnectReplication / Replication.open
// stream with an application_name that '*' matches, and nothing checks
// synchronous_standby_names; the docs never warn to name the standbys.
// Setup: a primary (wal_level logical) with a physical standby, synchronous_
// standby_names = '*' (the standby is 'sync'); a streamer on wake:
// replication starts; the standby stops; an event is inserted as ingress
// would (synchronous_commit on); the primary dies; the standby is started
// and promoted.
// Expected: with the only real standby down the commit is not acknowledged
// (it waits, as it does without the streamer), or Start refuses the
// configuration with ErrReplicationSetup.
// Observed: pg_stat_replication "inlet-streamer-replication (streaming):
// priority 1, sync" once the standby stopped; the INSERT returned OK after
// ~0.9 s; after the failover the acknowledged event is missing (0 rows).
// In a first run with the streamer started before the standby, the
// streamer stayed 'sync' and the running standby only 'potential'.
// Suggested fix: on open (and on the 30 s publication re-check) read SHOW
// synchronous_standby_names on the replication connection and refuse to
// stream (ErrReplicationSetup, polling covers) while it matches the
// stream's application_name ('*' or the name); document naming the
// physical standbys explicitly with wake: replication, and do so in the
// chaos run.
func TestReplicationStreamIsNeverASynchronousStandby(t *testing.T) {
	ctx := context.Background()
	dir := pgtest.TempDir(t)
	settings := map[string]string{"wal_level": "logical", "max_wal_senders": "10", "max_replication_slots": "10", "max_connections": "100"}
	primary, err := pgcluster.New(ctx, pgcluster.Config{Dir: filepath.Join(dir, "primary"), Install: true, Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	if err := primary.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	pconn, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pconn.Close(context.Background()) }()
	if _, err := schema.Migrate(ctx, pconn); err != nil {
		t.Fatal(err)
	}

	// A synchronous physical standby, as the docs ask for.
	standby, err := primary.NewStandby(ctx, filepath.Join(dir, "standby"), settings)
	if err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`} {
		if _, err := pconn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, 30*time.Second, "the physical standby synchronous", func() (bool, string) {
		states, n, err := syncStandbyWalsenders(ctx, pconn, "walreceiver")
		return err == nil && n == 1 && strings.Contains(states, "walreceiver (streaming): priority 1, sync"), fmt.Sprint(states, err)
	})

	b := setupOn(t, primary.URL("postgres"), "h")
	replURL := primary.URL("postgres") + "&replication=database"
	s := b.newStreamer(t, streamer.Config{PollInterval: time.Second, SlotName: "sync_standby_test",
		ReplicationConnect: func(ctx context.Context) (*pgconn.PgConn, error) { return streamer.ConnectReplication(ctx, replURL) }})
	if err := s.Start(ctx); err != nil {
		if errors.Is(err, streamer.ErrReplicationSetup) {
			t.Logf("Start refused the configuration: %v", err)
			return
		}
		t.Fatal(err)
	}
	defer s.Stop()
	waitReplicationConnected(t, s, 0)
	states, _, _ := syncStandbyWalsenders(ctx, pconn, "")
	t.Logf("with the streamer: %s", states)

	// The standby goes away (a restart, a network cut). Now no server but
	// the primary has what commits.
	if err := standby.Stop(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "the standby's walsender gone", func() (bool, string) {
		states, n, err := syncStandbyWalsenders(ctx, pconn, "walreceiver")
		return err == nil && n == 0 && !strings.Contains(states, "walreceiver"), fmt.Sprint(states, err)
	})
	// Not required (a fix may keep the stream out of synchronous
	// replication): look for up to 10 s at what the stream is rated, once
	// it has reported a flush position.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if states, _, _ = syncStandbyWalsenders(ctx, pconn, ""); strings.Contains(states, "sync") && !strings.Contains(states, "async") {
			break
		}
	}
	t.Logf("standby stopped: %s", states)

	// An event stored as ingress stores it: synchronous_commit on, 200 only
	// after COMMIT returns.
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = b.admin.Exec(ictx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_sync_standby', 'invoice.paid', 'x', true)`)
	took := time.Since(start)
	if err != nil {
		t.Logf("the commit was not acknowledged with the synchronous standby down (%v after %s): as expected", err, took)
		return
	}
	t.Logf("commit acknowledged after %s with the only physical standby stopped", took)

	// The primary dies; the standby (which never got the event) is promoted.
	s.Stop()
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	sconn, err := pgx.Connect(ctx, standby.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sconn.Close(context.Background()) }()
	var n int
	if err := sconn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = 'evt_sync_standby'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("an event whose commit was acknowledged after %s (synchronous_commit on, synchronous_standby_names '*') "+
			"is missing after failover to the standby: %d rows. The acknowledgement came from the streamer's logical "+
			"walsender acting as the synchronous standby (%s), not from a standby that stores the WAL", took, n, states)
	}
}

// A stream that is up ends once a reload makes synchronous_standby_names
// match it (the 30 s re-check, with the publication's), logged at error as
// Start would refuse it, and polling covers: before, a streamer started
// under named standbys became a synchronous standby candidate the moment an
// operator changed the setting to '*' (review helper-315).
func TestReplicationStreamEndsWhenSynchronousStandbyNamesComesToMatchIt(t *testing.T) {
	ctx := context.Background()
	dir := pgtest.TempDir(t)
	settings := map[string]string{"wal_level": "logical", "max_wal_senders": "10", "max_replication_slots": "10", "max_connections": "100"}
	primary, err := pgcluster.New(ctx, pgcluster.Config{Dir: filepath.Join(dir, "primary"), Install: true, Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	if err := primary.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	pconn, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pconn.Close(context.Background()) }()
	if _, err := schema.Migrate(ctx, pconn); err != nil {
		t.Fatal(err)
	}
	b := setupOn(t, primary.URL("postgres"), "h")
	replURL := primary.URL("postgres") + "&replication=database"
	logs := &testlog.Buffer{}
	s, err := streamer.New(streamer.Config{Pool: b.pool, Publisher: b.pubsub, MinLeasedPerHandler: 1 << 20,
		PollInterval: time.Second, SlotName: "sync_standby_reload",
		Logger:             slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		ReplicationConnect: func(ctx context.Context) (*pgconn.PgConn, error) { return streamer.ConnectReplication(ctx, replURL) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatalf("Start with synchronous_standby_names empty: %v", err)
	}
	defer s.Stop()
	waitReplicationConnected(t, s, 0)

	// '*' with no standby connected: the stream is the only candidate, so
	// it is chosen at once, and a commit waits only until the re-check ends
	// it. Nothing is committed here meanwhile.
	for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`} {
		if _, err := pconn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, 120*time.Second, "the stream ended and said why", func() (bool, string) {
		l := logs.String()
		return strings.Contains(l, "level=ERROR") && strings.Contains(l, "matches the replication stream's application_name"), l[max(0, len(l)-2000):]
	})
	testwait.Eventually(t, 30*time.Second, "no stream of the streamer left", func() (bool, string) {
		states, _, err := syncStandbyWalsenders(ctx, pconn, "")
		return err == nil && !strings.Contains(states, "inlet-streamer-replication (streaming)"), fmt.Sprint(states, err)
	})
}
