package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The sealer's incremental frontier gives the roots tlog computes from its
// stored hashes, for every tree size.
func TestFrontierMatchesTlog(t *testing.T) {
	t.Parallel()
	var stored []tlog.Hash
	reader := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = stored[x]
		}
		return out, nil
	})
	var f []tlog.Hash
	for n := int64(0); n < 300; n++ {
		leaf := skipLeaf(n + 1)
		hs, err := tlog.StoredHashesForRecordHash(n, leaf, reader)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, hs...)
		f = frontierAppend(f, n, leaf)
		want, err := tlog.TreeHash(n+1, reader)
		if err != nil {
			t.Fatal(err)
		}
		if got := frontierRoot(f); got != want {
			t.Fatalf("size %d: frontier root %x, tlog %x", n+1, got[:], want[:])
		}
	}
}

type bundle struct {
	url    string
	owner  *pgxpool.Pool // superuser: the database owner who tampers
	writer *pgxpool.Pool // webhook_ingress_writer
	sealer *Sealer       // as webhook_sealer
	sealDB *pgxpool.Pool
	audit  *pgxpool.Pool // webhook_auditor
}

func openAs(t *testing.T, url, role string) *pgxpool.Pool {
	t.Helper()
	p, err := database.Open(context.Background(), url, database.Options{Role: role, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func setup(t *testing.T, cfg Config) *bundle {
	t.Helper()
	url := pgtest.NewDatabase(t)
	b := &bundle{url: url, owner: openAs(t, url, ""), writer: openAs(t, url, "webhook_ingress_writer"),
		sealDB: openAs(t, url, "webhook_sealer"), audit: openAs(t, url, "webhook_auditor")}
	cfg.DB = b.sealDB
	if cfg.Grace == 0 {
		cfg.Grace = time.Millisecond
	}
	s, err := NewSealer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.sealer = s
	return b
}

var extID atomic.Int64

func (b *bundle) insert(t testing.TB, ctx context.Context) {
	t.Helper()
	n := extID.Add(1)
	_, err := b.writer.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", fmt.Sprintf("evt_%d", n), "invoice.paid",
		map[string][]string{"Stripe-Signature": {fmt.Sprintf("t=%d,v1=00", n)}}, []byte(fmt.Sprintf(`{"id":"evt_%d"}`, n)), true, 0, "/webhooks/stripe", "", false, nil, 0)
	if err != nil {
		t.Errorf("insert event: %v", err)
	}
}

// rolledBack allocates an id and rolls back: a permanent gap.
func (b *bundle) rolledBack(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", "evt_rolled_back", "x", "{}", []byte("{}"), true, 0, "", "", false, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) owns(t *testing.T, sql ...string) {
	t.Helper()
	for _, q := range sql {
		if _, err := b.owner.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func (b *bundle) seal(t *testing.T) []Checkpoint {
	t.Helper()
	time.Sleep(5 * time.Millisecond) // past the test's 1ms grace
	cps, err := b.sealer.Seal(context.Background())
	if err != nil {
		t.Fatalf("seal: %v", err)
	}
	return cps
}

func (b *bundle) verify(t *testing.T, opts VerifyOptions) Report {
	t.Helper()
	rep, err := Verify(context.Background(), b.audit, opts)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return rep
}

func TestSealThenVerifyIntact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 10})
	if _, err := b.sealer.SealOnce(ctx); !errors.Is(err, ErrNothingToSeal) {
		t.Fatalf("SealOnce on an empty log: %v, want ErrNothingToSeal", err)
	}
	for range 12 {
		b.insert(t, ctx)
	}
	b.rolledBack(t) // id 13
	for range 12 {
		b.insert(t, ctx)
	}
	cps := b.seal(t)
	if len(cps) != 3 || cps[2].LastEventID != 25 || cps[2].TreeSize != 25 {
		t.Fatalf("checkpoints %+v: want 3 covering ids 1..25", cps)
	}
	if got := cps[1].SkippedIDs; len(got) != 1 || got[0] != 13 {
		t.Fatalf("checkpoint 2 skipped %v, want [13]", got)
	}
	if _, err := b.sealer.SealOnce(ctx); !errors.Is(err, ErrNothingToSeal) {
		t.Fatalf("SealOnce when caught up: %v, want ErrNothingToSeal", err)
	}
	b.insert(t, ctx)
	rep := b.verify(t, VerifyOptions{Head: cps[1].HashHex()})
	if !rep.OK || rep.Checkpoints != 3 || rep.SealedThrough != 25 || rep.Events != 25 || rep.Unsealed != 1 || rep.Head != cps[2].HashHex() {
		t.Fatalf("verify: %+v", rep)
	}
	if cps2 := b.seal(t); len(cps2) != 1 || cps2[0].FirstEventID != 26 {
		t.Fatalf("next seal: %+v", cps2)
	}
	if rep := b.verify(t, VerifyOptions{}); !rep.OK || rep.Unsealed != 0 {
		t.Fatalf("verify after the next seal: %+v", rep)
	}
}

const (
	disableEvents = `ALTER TABLE webhook_ingress.events DISABLE TRIGGER events_append_only_row`
	enableEvents  = `ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row`
	disableCps    = `ALTER TABLE webhook_ingress.audit_checkpoints DISABLE TRIGGER audit_checkpoints_append_only_row`
	enableCps     = `ALTER TABLE webhook_ingress.audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_append_only_row`
)

// The owner, triggers disabled, changes the log; verify names the first problem.
func TestVerifyFindsTampering(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		tamper []string
		kind   ProblemKind
		event  int64
		seq    int64
	}{
		{"body rewritten", []string{disableEvents, `UPDATE webhook_ingress.events SET raw_body = '{"id":"forged"}' WHERE id = 7`, enableEvents}, AlteredEvent, 7, 1},
		{"headers rewritten", []string{disableEvents, `UPDATE webhook_ingress.events SET headers = '{}' WHERE id = 12`, enableEvents}, AlteredEvent, 12, 2},
		{"type rewritten", []string{disableEvents, `UPDATE webhook_ingress.events SET event_type = 'refund' WHERE id = 3`, enableEvents}, AlteredEvent, 3, 1},
		{"signature_verified flipped", []string{disableEvents, `UPDATE webhook_ingress.events SET signature_verified = NOT signature_verified WHERE id = 5`, enableEvents}, AlteredEvent, 5, 1},
		{"request_uri rewritten", []string{disableEvents, `UPDATE webhook_ingress.events SET request_uri = '/webhooks/other' WHERE id = 6`, enableEvents}, AlteredEvent, 6, 1},
		{"two altered: the first is Problem", []string{disableEvents, `UPDATE webhook_ingress.events SET provider = 'x' WHERE id IN (9, 15)`, enableEvents}, AlteredEvent, 9, 1},
		{"event deleted", []string{disableEvents, `DELETE FROM webhook_ingress.events WHERE id = 14`, enableEvents}, MissingEvent, 14, 2},
		{"inserted at a skipped id", []string{`INSERT INTO webhook_ingress.events (id, provider, scheme, external_event_id, raw_body, signature_verified)
			OVERRIDING SYSTEM VALUE VALUES (11, 'stripe', 'stripe', 'evt_late', '\x7b7d', true)`}, OutOfOrderEvent, 11, 2},
		{"inserted below the log", []string{`INSERT INTO webhook_ingress.events (id, provider, scheme, external_event_id, raw_body, signature_verified)
			OVERRIDING SYSTEM VALUE VALUES (0, 'stripe', 'stripe', 'evt_zero', '\x7b7d', true)`}, OutOfOrderEvent, 0, 1},
		{"checkpoint root rewritten", []string{disableCps, `UPDATE webhook_ingress.audit_checkpoints SET root_hash = sha256('x') WHERE seq = 2`, enableCps}, BrokenChain, 0, 2},
		{"checkpoint range widened", []string{disableCps, `UPDATE webhook_ingress.audit_checkpoints SET skipped_ids = '{}' WHERE seq = 2`, enableCps}, BrokenChain, 0, 2},
		{"checkpoint removed", []string{disableCps, `DELETE FROM webhook_ingress.audit_checkpoints WHERE seq = 1`, enableCps}, BrokenChain, 0, 1},
		// A v1 checkpoint's hash does not cover a range: nulling it must not
		// pass as one sealed before 032.
		{"checkpoint received range nulled", []string{disableCps,
			`UPDATE webhook_ingress.audit_checkpoints SET min_received_at = NULL, max_received_at = NULL WHERE seq = 2`, enableCps}, BrokenChain, 0, 2},
		{"checkpoint received range widened", []string{disableCps,
			`UPDATE webhook_ingress.audit_checkpoints SET min_received_at = min_received_at - interval '1 year' WHERE seq = 1`, enableCps}, BrokenChain, 0, 1},
		{"checkpoint received range half nulled", []string{disableCps, `ALTER TABLE webhook_ingress.audit_checkpoints DROP CONSTRAINT audit_checkpoints_received_range`,
			`UPDATE webhook_ingress.audit_checkpoints SET max_received_at = NULL WHERE seq = 2`, enableCps}, BrokenChain, 0, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, Config{MaxLeaves: 10})
			for range 10 {
				b.insert(t, ctx)
			}
			b.rolledBack(t) // id 11
			for range 9 {
				b.insert(t, ctx)
			}
			if cps := b.seal(t); len(cps) != 2 {
				t.Fatalf("sealed %d checkpoints, want 2", len(cps))
			}
			if rep := b.verify(t, VerifyOptions{}); !rep.OK {
				t.Fatalf("before tampering: %+v", rep.Problem)
			}
			b.owns(t, c.tamper...)
			rep := b.verify(t, VerifyOptions{})
			if rep.OK || rep.Problem == nil {
				t.Fatalf("verify after tampering: OK, want %s", c.kind)
			}
			p := rep.Problem
			t.Logf("problem: %s", p.Reason)
			if p.Kind != c.kind || p.EventID != c.event || p.Checkpoint != c.seq {
				t.Fatalf("problem %+v, want %s of event %d in checkpoint %d", p, c.kind, c.event, c.seq)
			}
		})
	}
}

// Every altered, missing and out-of-order event is reported, with the
// counters of a full pass, up to MaxProblems (the rest counted, the cut
// said); a broken chain stops the pass there and says so.
func TestVerifyReportsEveryProblem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 10})
	for range 10 {
		b.insert(t, ctx)
	}
	b.rolledBack(t) // id 11
	for range 9 {
		b.insert(t, ctx)
	}
	if cps := b.seal(t); len(cps) != 2 {
		t.Fatalf("sealed %d checkpoints, want 2", len(cps))
	}
	b.insert(t, ctx) // id 21, not sealed
	b.owns(t, disableEvents,
		`UPDATE webhook_ingress.events SET event_type = 'refund' WHERE id = 3`,
		`UPDATE webhook_ingress.events SET raw_body = '{"id":"forged"}' WHERE id IN (12, 21)`, // 21 unsealed: its generated body_sha256 follows; nothing to tell,
		`DELETE FROM webhook_ingress.events WHERE id = 17`,
		enableEvents,
		`INSERT INTO webhook_ingress.events (id, provider, scheme, external_event_id, raw_body, signature_verified)
			OVERRIDING SYSTEM VALUE VALUES (11, 'stripe', 'stripe', 'evt_late', '\x7b7d', true)`)
	type found struct {
		kind  ProblemKind
		event int64
		seq   int64
	}
	want := []found{{AlteredEvent, 3, 1}, {OutOfOrderEvent, 11, 2}, {AlteredEvent, 12, 2}, {MissingEvent, 17, 2}}
	rep := b.verify(t, VerifyOptions{})
	var got []found
	for _, p := range rep.Problems {
		got = append(got, found{p.Kind, p.EventID, p.Checkpoint})
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("problems %v, want %v", got, want)
	}
	if rep.OK || rep.ProblemsFound != 4 || rep.ProblemsTruncated || rep.ChainBroken || rep.Problem == nil || rep.Problem.EventID != 3 ||
		rep.Checkpoints != 2 || rep.SealedThrough != 20 || rep.Events != 20 || rep.Unsealed != 1 {
		t.Fatalf("report %+v", rep)
	}

	rep = b.verify(t, VerifyOptions{MaxProblems: 2})
	if len(rep.Problems) != 2 || rep.ProblemsFound != 4 || !rep.ProblemsTruncated || rep.Events != 20 || rep.Checkpoints != 2 {
		t.Fatalf("with MaxProblems 2: %+v", rep)
	}

	b.owns(t, disableCps, `UPDATE webhook_ingress.audit_checkpoints SET root_hash = sha256('x') WHERE seq = 2`, enableCps)
	rep = b.verify(t, VerifyOptions{})
	if rep.OK || !rep.ChainBroken || rep.ProblemsFound != 2 || rep.Problems[0].EventID != 3 || rep.Problems[1].Kind != BrokenChain ||
		rep.Checkpoints != 1 || rep.SealedThrough != 10 || rep.Events != 10 {
		t.Fatalf("after breaking checkpoint 2: %+v", rep)
	}
}

// Dropping the newest checkpoint leaves a valid shorter chain; the head kept
// outside the database shows it.
func TestVerifyHeadFindsRemovedTail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 5})
	for range 10 {
		b.insert(t, ctx)
	}
	cps := b.seal(t)
	head := cps[len(cps)-1].HashHex()
	b.owns(t, disableCps, `DELETE FROM webhook_ingress.audit_checkpoints WHERE seq = 2`, enableCps)
	if rep := b.verify(t, VerifyOptions{}); !rep.OK {
		t.Fatalf("without --head: %+v", rep.Problem)
	}
	rep := b.verify(t, VerifyOptions{Head: head})
	if rep.OK || rep.Problem.Kind != BrokenChain {
		t.Fatalf("with the kept head: %+v, want broken_chain", rep)
	}
}

// The horizon: young events wait, and so does a gap whose next event is
// young; a gap after an old event is sealed as skipped.
func TestSealStopsAtTheHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{Grace: time.Minute})
	old := func(ext string) {
		b.owns(t, fmt.Sprintf(`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
			VALUES ('stripe', 'stripe', '%s', '\x7b7d', true, now() - interval '1 hour')`, ext))
	}
	old("evt_old_1")
	old("evt_old_2")
	b.rolledBack(t) // id 3: a gap, judged by the event after it
	b.insert(t, ctx)
	cp, err := b.sealer.SealOnce(ctx)
	if err != nil || cp.FirstEventID != 1 || cp.LastEventID != 2 {
		t.Fatalf("seal: %+v, %v: want ids 1..2 (the gap before a young event waits)", cp, err)
	}
	if _, err := b.sealer.SealOnce(ctx); !errors.Is(err, ErrNothingToSeal) {
		t.Fatalf("second seal: %v, want ErrNothingToSeal", err)
	}
	b.rolledBack(t)  // id 5
	old("evt_old_3") // id 6, old: but id 4 is young, so nothing moves
	if _, err := b.sealer.SealOnce(ctx); !errors.Is(err, ErrNothingToSeal) {
		t.Fatalf("seal behind a young event: %v, want ErrNothingToSeal", err)
	}
	if rep := b.verify(t, VerifyOptions{}); !rep.OK || rep.SealedThrough != 2 || rep.Unsealed != 2 {
		t.Fatalf("verify: %+v", rep)
	}
}

// inFlight starts a writer transaction that inserts event ext (drawing the
// next id) and leaves it open; the test commits or rolls it back.
func (b *bundle) inFlight(t *testing.T, ext string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := b.writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", ext, "x",
		map[string][]string{}, []byte(`{}`), true, 0, "", "", false, nil, 0); err != nil {
		t.Fatal(err)
	}
	return tx
}

// restart replaces the sealer with a new one of the same config: what it
// knew of inserts in flight is lost, as in a crash between passes.
func (b *bundle) restart(t *testing.T) {
	t.Helper()
	s, err := NewSealer(b.sealer.cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.sealer = s
}

// sealed is the checkpoints of one pass as "first..last skipped [ids]".
func sealed(cps []Checkpoint) string {
	out := ""
	for _, cp := range cps {
		out += fmt.Sprintf("%d..%d skipped %v; ", cp.FirstEventID, cp.LastEventID, cp.SkippedIDs)
	}
	return out
}

// An insert that stays in flight longer than Grace while a later id commits
// (a group-commit batch past its timeout, a backfill, a wait on a key lock):
// its id is not sealed as skipped, also by a sealer restarted meanwhile, and
// is sealed as its event once it commits.
func TestSealWaitsForASlowInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const grace = 200 * time.Millisecond
	b := setup(t, Config{Grace: grace})
	b.insert(t, ctx) // id 1
	slow := b.inFlight(t, "evt_slow")
	b.insert(t, ctx)  // id 3
	time.Sleep(grace) // ids 1 and 3 past the grace: only the insert in flight holds id 2 back
	if got := sealed(b.seal(t)); got != "1..1 skipped []; " {
		t.Fatalf("seal with id 2 in flight: %s want 1..1", got)
	}
	b.restart(t)
	if cps := b.seal(t); len(cps) != 0 {
		t.Fatalf("seal after a restart with id 2 in flight: %s want nothing", sealed(cps))
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sealed(b.seal(t)); got != "2..3 skipped []; " {
		t.Fatalf("seal once id 2 committed: %s want 2..3 with nothing skipped", got)
	}
	if rep := b.verify(t, VerifyOptions{}); !rep.OK || rep.SealedThrough != 3 || rep.Events != 3 || rep.Unsealed != 0 {
		t.Fatalf("verify: %+v", rep)
	}
}

// An insert that aborts leaves a gap that is sealed as skipped as soon as no
// transaction that could hold it is running, even while later inserts are
// in flight; a sealer restarted meanwhile waits for those too.
func TestSealSkipsAnAbortedInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const grace = 200 * time.Millisecond
	b := setup(t, Config{Grace: grace})
	b.insert(t, ctx) // id 1
	aborts := b.inFlight(t, "evt_aborts")
	b.insert(t, ctx) // id 3
	time.Sleep(grace)
	if got := sealed(b.seal(t)); got != "1..1 skipped []; " {
		t.Fatalf("seal with id 2 in flight: %s want 1..1", got)
	}
	later := b.inFlight(t, "evt_later") // id 4, began after the sealer saw the gap
	if err := aborts.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sealed(b.seal(t)); got != "2..3 skipped [2]; " {
		t.Fatalf("seal once id 2 rolled back: %s want 2..3 skipping 2", got)
	}

	b.rolledBack(t)  // id 5
	b.insert(t, ctx) // id 6
	time.Sleep(grace)
	b.restart(t)
	if cps := b.seal(t); len(cps) != 0 {
		t.Fatalf("seal after a restart with id 4 in flight: %s want nothing", sealed(cps))
	}
	if err := later.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sealed(b.seal(t)); got != "4..6 skipped [5]; " {
		t.Fatalf("seal once id 4 committed: %s want 4..6 skipping 5", got)
	}
	if rep := b.verify(t, VerifyOptions{}); !rep.OK || rep.SealedThrough != 6 || rep.Events != 4 || rep.Unsealed != 0 {
		t.Fatalf("verify: %+v", rep)
	}
}

// An insert waiting in the events_dedupe trigger for another transaction's
// claim on its key has drawn its id (and holds no transaction id yet): its id
// is not sealed as skipped while it waits, nor after, until it ends.
func TestSealWaitsForAnInsertWaitingOnItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const grace = 200 * time.Millisecond
	b := setup(t, Config{Grace: grace})
	first := b.inFlight(t, "evt_key") // id 1
	waiter, err := b.writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inserted, done := make(chan error, 1), make(chan struct{})
	t.Cleanup(func() { // the waiter's connection is the goroutine's until it returns
		first.Rollback(context.Background())
		<-done
		waiter.Rollback(context.Background())
	})
	go func() {
		defer close(done)
		_, err := waiter.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", "evt_key", "x",
			map[string][]string{}, []byte(`{}`), true, 0, "", "", false, nil, 0) // id 2, waits for id 1's key
		inserted <- err
	}()
	testwait.Eventually(t, 10*time.Second, "the second insert of evt_key waiting on a lock", func() (bool, string) {
		var waiting []string
		if err := b.owner.QueryRow(ctx, `SELECT coalesce(array_agg(wait_event || ', transaction id ' || coalesce(backend_xid::text, 'none')), '{}')
			FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return len(waiting) == 1, fmt.Sprintf("waiting on a lock: %q", waiting)
	})
	if err := first.Rollback(ctx); err != nil { // id 1 aborts; id 2 claims the key
		t.Fatal(err)
	}
	if err := <-inserted; err != nil {
		t.Fatal(err)
	}
	b.insert(t, ctx) // id 3
	time.Sleep(grace)
	if cps := b.seal(t); len(cps) != 0 {
		t.Fatalf("seal with id 2 in flight: %s want nothing", sealed(cps))
	}
	if err := waiter.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sealed(b.seal(t)); got != "1..3 skipped [1]; " {
		t.Fatalf("seal once id 2 committed: %s want 1..3 skipping 1", got)
	}
	if rep := b.verify(t, VerifyOptions{}); !rep.OK || rep.SealedThrough != 3 || rep.Events != 2 {
		t.Fatalf("verify: %+v", rep)
	}
}

func TestSealerIsExclusive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{})
	b.insert(t, ctx)
	tx, err := b.owner.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", sealLockKey); err != nil {
		t.Fatal(err)
	}
	if _, err := b.sealer.SealOnce(ctx); !errors.Is(err, ErrBusy) {
		t.Fatalf("SealOnce while another sealer holds the lock: %v, want ErrBusy", err)
	}
}

// Ingress keeps flowing while a seal transaction is open, and everything
// inserted meanwhile verifies once sealed.
func TestSealDoesNotBlockIngress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A grace well above an insert's duration (under -race too): the rule the
	// horizon relies on.
	const grace = 500 * time.Millisecond
	b := setup(t, Config{MaxLeaves: 50, Interval: 20 * time.Millisecond, Grace: grace})
	var inserted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				b.insert(t, ctx)
				inserted.Add(1)
			}
		})
	}
	testwait.Eventually(t, 30*time.Second, "20 inserts", func() (bool, string) {
		n := inserted.Load()
		return n >= 20, fmt.Sprintf("%d inserts", n)
	})
	time.Sleep(grace) // something to seal: inserts older than the grace

	// Inside a seal transaction (events read, checkpoint not yet written):
	// at least 20 more inserts must complete.
	var during int64
	b.sealer.beforeInsert = func() {
		start := inserted.Load()
		testwait.Eventually(t, 30*time.Second, "20 inserts during the seal transaction", func() (bool, string) {
			during = inserted.Load() - start
			return during >= 20, fmt.Sprintf("%d inserts", during)
		})
	}
	if _, err := b.sealer.SealOnce(ctx); err != nil {
		t.Fatal(err)
	}
	b.sealer.beforeInsert = nil
	if during < 20 {
		t.Fatalf("only %d inserts completed during a seal, want 20", during)
	}

	// And the background sealer alongside the writers, for two checkpoints.
	checkpoints := func() int {
		var n int
		if err := b.owner.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.audit_checkpoints`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := checkpoints()
	if err := b.sealer.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "two checkpoints by the background sealer while writers run", func() (bool, string) {
		n := checkpoints()
		return n >= before+2, fmt.Sprintf("%d checkpoints, %d before it started", n, before)
	})
	close(stop)
	wg.Wait()
	b.sealer.Stop()
	time.Sleep(grace + 100*time.Millisecond) // every insert older than the grace: all sealable
	cps := b.seal(t)
	var maxID int64
	if err := b.owner.QueryRow(ctx, `SELECT max(id) FROM webhook_ingress.events`).Scan(&maxID); err != nil {
		t.Fatal(err)
	}
	rep := b.verify(t, VerifyOptions{})
	if !rep.OK || rep.SealedThrough != maxID || rep.Unsealed != 0 {
		t.Fatalf("verify after %d inserts (%d checkpoints in the last pass): %+v", inserted.Load(), len(cps), rep)
	}
	t.Logf("%d events, %d checkpoints", rep.Events, rep.Checkpoints)
}

func isPermissionDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

func TestPrivileges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{})
	b.insert(t, ctx)
	b.seal(t)
	cases := []struct {
		pool  *pgxpool.Pool
		role  string
		sql   string
		allow bool
	}{
		{b.sealDB, "webhook_sealer", `SELECT raw_body FROM webhook_ingress.events`, false},
		{b.sealDB, "webhook_sealer", `SELECT * FROM webhook_ingress.events`, false},
		{b.sealDB, "webhook_sealer", `SELECT id, provider, external_event_id, event_type, received_at, headers, body_sha256 FROM webhook_ingress.events`, true},
		{b.sealDB, "webhook_sealer", `UPDATE webhook_ingress.audit_checkpoints SET created_at = now()`, false},
		{b.sealDB, "webhook_sealer", `DELETE FROM webhook_ingress.audit_checkpoints`, false},
		{b.sealDB, "webhook_sealer", `TRUNCATE webhook_ingress.audit_checkpoints`, false},
		{b.sealDB, "webhook_sealer", `UPDATE webhook_ingress.events SET event_type = 'x'`, false},
		{b.sealDB, "webhook_sealer", `SELECT * FROM webhook_ingress.jobs`, false},
		{b.audit, "webhook_auditor", `SELECT * FROM webhook_ingress.audit_checkpoints`, true},
		{b.audit, "webhook_auditor", `INSERT INTO webhook_ingress.audit_checkpoints SELECT * FROM webhook_ingress.audit_checkpoints`, false},
		{b.writer, "webhook_ingress_writer", `SELECT seq FROM webhook_ingress.audit_checkpoints`, false},
		{b.owner, "owner", `UPDATE webhook_ingress.audit_checkpoints SET created_at = now()`, false}, // the trigger
		{b.owner, "owner", `TRUNCATE webhook_ingress.audit_checkpoints`, false},
	}
	for _, c := range cases {
		_, err := c.pool.Exec(ctx, c.sql)
		switch {
		case c.allow && err != nil:
			t.Errorf("%s may run %q, but: %v", c.role, c.sql, err)
		case !c.allow && err == nil:
			t.Errorf("%s must not run %q, but it succeeded", c.role, c.sql)
		case !c.allow && !isPermissionDenied(err):
			t.Errorf("%s %q: want permission denied (42501), got %v", c.role, c.sql, err)
		}
	}
}

// forgePrune appends, as the owner, a retention_log row claiming that event
// id was dropped with the period [start, end), as drop_partition would.
func (b *bundle) forgePrune(t *testing.T, start, end time.Time, id int64) {
	t.Helper()
	if _, err := b.owner.Exec(context.Background(), `INSERT INTO webhook_ingress.retention_log
		(period_start, period_end, events, jobs, attempts, event_ids, sealed_through)
		VALUES ($1, $2, 1, 0, 0, ARRAY[int8range($3, $3, '[]')], (SELECT max(last_event_id) FROM webhook_ingress.audit_checkpoints))`,
		start, end, id); err != nil {
		t.Fatalf("forge retention_log row for event %d: %v", id, err)
	}
}

// The owner deletes a sealed event from a partition that is still there
// (triggers disabled) and appends a retention_log row naming its id: verify
// reports it missing, the kept head or not, whatever period the row claims.
func TestVerifyFindsAForgedPrune(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		period func(received, partStart, partEnd time.Time) (time.Time, time.Time)
	}{
		{"an old period with no events, apart from its checkpoint", func(received, _, _ time.Time) (time.Time, time.Time) {
			start := received.AddDate(0, 0, -400).Truncate(24 * time.Hour)
			return start, start.AddDate(0, 0, 7)
		}},
		{"its own live period, which still has events", func(_, partStart, partEnd time.Time) (time.Time, time.Time) {
			return partStart, partEnd
		}},
		{"a sliver of its live period holding it alone", func(received, _, _ time.Time) (time.Time, time.Time) {
			return received, received.Add(time.Microsecond)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, Config{MaxLeaves: 10})
			for range 20 {
				b.insert(t, ctx)
			}
			cps := b.seal(t)
			if len(cps) != 2 {
				t.Fatalf("sealed %d checkpoints, want 2", len(cps))
			}
			var received, partStart, partEnd time.Time
			if err := b.owner.QueryRow(ctx, `SELECT e.received_at, p.period_start, p.period_end
				FROM webhook_ingress.events e, webhook_ingress.partitions() p
				WHERE e.id = 14 AND e.received_at >= p.period_start AND e.received_at < p.period_end`).Scan(&received, &partStart, &partEnd); err != nil {
				t.Fatalf("event 14's partition: %v", err)
			}
			b.owns(t, disableEvents, `DELETE FROM webhook_ingress.events WHERE id = 14`, enableEvents)
			start, end := c.period(received, partStart, partEnd)
			b.forgePrune(t, start, end, 14)
			rep := b.verify(t, VerifyOptions{Head: cps[1].HashHex()})
			if rep.OK || rep.ProblemsFound != 1 || rep.Pruned != 0 || rep.ChainBroken {
				t.Fatalf("verify after deleting event 14 and logging it pruned with [%s, %s): %+v, want event 14 missing",
					start, end, rep)
			}
			p := rep.Problem
			t.Logf("problem: %s", p.Reason)
			if p.Kind != MissingEvent || p.EventID != 14 || p.Checkpoint != 2 {
				t.Fatalf("problem %+v, want missing_event of event 14 in checkpoint 2", p)
			}
		})
	}
}

// migratedTo031 is a new database at migration 031, the schema before the
// checkpoints' received_at range, as Migrate leaves it (schema.MigrateTo is
// for the schema module's own tests only): its URL and an owner connection.
func migratedTo031(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewEmptyDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE SCHEMA webhook_ingress;
		CREATE TABLE webhook_ingress.schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:31] {
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		}); err != nil {
			t.Fatalf("migration %03d_%s: %v", m.Version, m.Name, err)
		}
	}
	return url, conn
}

// sealV1 seals what a sealer of 031 would, as it would: checkpoints without
// a received_at range, hashed in the v1 form, of v1 event leaves (no
// occurred_at), written with 031's columns, of the events read as it read
// them (no audit_events_to_seal before 078). As the owner: this sealer's
// query reads occurred_at, which webhook_sealer may read only since 075.
func (b *bundle) sealV1(t *testing.T) []Checkpoint {
	t.Helper()
	ctx := context.Background()
	time.Sleep(5 * time.Millisecond) // past the test's 1ms grace
	b.sealer.leaf, b.sealer.read = eventLeafV1, readEventsAs031
	defer func() { b.sealer.leaf, b.sealer.read = nil, nil }()
	var out []Checkpoint
	for {
		var cp Checkpoint
		err := pgx.BeginFunc(ctx, b.owner, func(tx pgx.Tx) error {
			var now time.Time
			if err := tx.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
				return err
			}
			settled, err := b.sealer.probe(ctx, tx)
			if err != nil {
				return err
			}
			prev, err := lastCheckpoint(ctx, tx)
			if err != nil {
				return err
			}
			if cp, _, err = b.sealer.nextCheckpoint(ctx, tx, prev, now, settled); err != nil {
				return err
			}
			cp.MinReceivedAt, cp.MaxReceivedAt = nil, nil
			cp.Hash = checkpointHash(cp)
			_, err = tx.Exec(ctx, `INSERT INTO webhook_ingress.audit_checkpoints
				(seq, first_event_id, last_event_id, tree_size, root_hash, prev_hash, skipped_ids, leaf_hashes, frontier, created_at, hash)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
				cp.Seq, cp.FirstEventID, cp.LastEventID, cp.TreeSize, cp.Root[:], cp.Prev[:], cp.SkippedIDs,
				joinHashes(cp.leaves), joinHashes(cp.frontier), cp.CreatedAt, cp.Hash[:])
			return err
		})
		if errors.Is(err, ErrNothingToSeal) {
			return out
		}
		if err != nil {
			t.Fatalf("seal as 031 did: %v", err)
		}
		out = append(out, cp)
	}
}

// readEventsAs031 reads the events to seal from the table, as every sealer
// before 078 did.
func readEventsAs031(ctx context.Context, tx pgx.Tx, first int64, limit int) ([]Event, error) {
	rows, err := tx.Query(ctx, `SELECT id, provider, external_event_id, event_type, received_at, body_sha256,
		sha256(convert_to(headers::text, 'UTF8')), scheme, request_uri, signature_verified, coalesce(secret_index, -1)::int, occurred_at
		FROM webhook_ingress.events WHERE id >= $1 ORDER BY id LIMIT $2`, first, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		err := r.Scan(&e.ID, &e.Provider, &e.ExternalEventID, &e.EventType, &e.ReceivedAt, &e.BodySHA256, &e.HeadersSHA256,
			&e.Scheme, &e.RequestURI, &e.SignatureVerified, &e.SecretIndex, &e.OccurredAt)
		return e, err
	})
}

// Checkpoints sealed at 031 (v1: no received_at range) still verify after
// 032 and the checkpoints sealed after it (v2), and the kept head is still
// in the chain. A prune of an id of a v1 checkpoint is checked only against
// the emptiness of its period; one of a v2 checkpoint also against its range.
func TestUpgradeTo032KeepsV1Checkpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := migratedTo031(t)
	b := &bundle{url: url, owner: openAs(t, url, ""), writer: openAs(t, url, "webhook_ingress_writer"),
		sealDB: openAs(t, url, "webhook_sealer"), audit: openAs(t, url, "webhook_auditor")}
	s, err := NewSealer(Config{DB: b.sealDB, Grace: time.Millisecond, MaxLeaves: 10})
	if err != nil {
		t.Fatal(err)
	}
	b.sealer = s
	for range 10 {
		b.insert(t, ctx)
	}
	b.rolledBack(t) // id 11
	for range 9 {
		b.insert(t, ctx)
	}
	v1 := b.sealV1(t)
	if len(v1) != 2 || v1[1].LastEventID != 20 {
		t.Fatalf("sealed at 031: %s want 1..10 and 11..20", sealed(v1))
	}
	// This version's sealer before inlet migrate: there is no
	// audit_events_to_seal yet (078), and the error says what to run.
	b.insert(t, ctx)
	time.Sleep(5 * time.Millisecond)
	if cps, err := b.sealer.Seal(ctx); err == nil || len(cps) != 0 || !strings.Contains(err.Error(), "migration 078") || !strings.Contains(err.Error(), "run inlet migrate") {
		t.Fatalf("seal before inlet migrate: %d checkpoints, %v; want none and an error naming migration 078", len(cps), err)
	}

	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatalf("migrate to 032: %v", err)
	}
	for range 9 {
		b.insert(t, ctx)
	}
	v2 := b.seal(t)
	if len(v2) != 1 || v2[0].FirstEventID != 21 || v2[0].MinReceivedAt == nil || v2[0].MaxReceivedAt.Before(*v2[0].MinReceivedAt) {
		t.Fatalf("sealed at 032: %+v, want one checkpoint of ids 21..30 with a received_at range", v2)
	}
	var ranges string
	if err := b.owner.QueryRow(ctx, `SELECT string_agg(seq || ':' || (min_received_at IS NOT NULL AND max_received_at IS NOT NULL), ' ' ORDER BY seq)
		FROM webhook_ingress.audit_checkpoints`).Scan(&ranges); err != nil {
		t.Fatal(err)
	}
	if ranges != "1:false 2:false 3:true" {
		t.Fatalf("checkpoints with a received_at range: %s, want only 3", ranges)
	}
	rep := b.verify(t, VerifyOptions{Head: v1[1].HashHex()})
	if !rep.OK || rep.Checkpoints != 3 || rep.SealedThrough != 30 || rep.Events != 29 || rep.Head != v2[0].HashHex() {
		t.Fatalf("verify after the upgrade: %+v", rep)
	}

	// Forged prunes: events 5 (v1) and 25 (v2) claimed by an old period with
	// no events, 6 (v1) by its own live period.
	var partStart, partEnd time.Time
	if err := b.owner.QueryRow(ctx, `SELECT p.period_start, p.period_end FROM webhook_ingress.events e, webhook_ingress.partitions() p
		WHERE e.id = 6 AND e.received_at >= p.period_start AND e.received_at < p.period_end`).Scan(&partStart, &partEnd); err != nil {
		t.Fatal(err)
	}
	b.owns(t, disableEvents, `DELETE FROM webhook_ingress.events WHERE id IN (5, 6, 25)`, enableEvents)
	old := partStart.AddDate(0, 0, -400)
	b.forgePrune(t, old, old.AddDate(0, 0, 7), 5)
	b.forgePrune(t, partStart, partEnd, 6)
	b.forgePrune(t, old, old.AddDate(0, 0, 7), 25)
	rep = b.verify(t, VerifyOptions{Head: v2[0].HashHex()})
	type found struct {
		kind  ProblemKind
		event int64
		seq   int64
	}
	var got []found
	for _, p := range rep.Problems {
		t.Logf("problem: %s", p.Reason)
		got = append(got, found{p.Kind, p.EventID, p.Checkpoint})
	}
	// 5 passes as pruned: a v1 checkpoint says nothing of when its events
	// were received (the limit the package doc names).
	if want := []found{{MissingEvent, 6, 1}, {MissingEvent, 25, 3}}; fmt.Sprint(got) != fmt.Sprint(want) || rep.Pruned != 1 || rep.ChainBroken {
		t.Fatalf("problems %v, pruned %d: want %v, event 5 pruned", got, rep.Pruned, want)
	}
}
