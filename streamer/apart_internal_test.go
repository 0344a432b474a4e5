package streamer

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// apartBundle is a database with an ordered handler "ordered" (key
// data.object.id) and an unordered one "free", and a streamer on it.
func apartBundle(t *testing.T, cfg Config) (*pgxpool.Pool, *Streamer, bus.PubSub) {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	pool, err := database.Open(ctx, url, database.Options{Role: "webhook_streamer"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, order_key) VALUES ('ordered', 'data.object.id'), ('free', NULL)`); err != nil {
		t.Fatal(err)
	}
	ps := bus.NewGoChannel(slog.New(slog.DiscardHandler))
	t.Cleanup(func() { ps.Close() })
	cfg.Pool, cfg.Publisher, cfg.Logger = pool, ps, slog.New(slog.DiscardHandler)
	if cfg.MinLeasedPerHandler == 0 {
		cfg.MinLeasedPerHandler = 1 << 20 // its consumers finish nothing: no pace (see newStreamer)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return admin, s, ps
}

// events stores n events, each of its own key.
func events(t *testing.T, admin *pgxpool.Pool, n int) {
	t.Helper()
	if _, err := admin.Exec(context.Background(), `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, payload, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_' || g || '_' || md5(random()::text), 'invoice.paid', convert_to(b, 'UTF8'), b::jsonb, true
		FROM generate_series(1, $1) g, LATERAL (SELECT '{"data":{"object":{"id":"k' || g || '_' || md5(random()::text) || '"}}}' AS b) p`, n); err != nil {
		t.Fatal(err)
	}
}

// refs waits for n references on handler's topic.
func refs(t *testing.T, ps bus.PubSub, handler string, n int, within time.Duration) {
	t.Helper()
	msgs, err := ps.Subscribe(context.Background(), bus.Topic(handler))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(within)
	got := 0
	for got < n {
		select {
		case m := <-msgs:
			rs, err := bus.ParseRefs(m)
			m.Ack()
			if err != nil {
				t.Fatal(err)
			}
			got += len(rs)
		case <-deadline:
			t.Fatalf("%s: %d references within %s, want %d", handler, got, within, n)
		}
	}
}

// An ordered handler is claimed apart, in a loop of its own: while its claim
// is slow (here held; in life, a backlog its order holds back, which each of
// its claims walks past: 40,000 held jobs took a claim 120-134 ms), the
// other handlers' jobs are leased and published all the same, whether they
// are claimed with the rest or, limited, in the limited handlers' loop. Not
// parallel: it sets apartClaimStarting.
func TestSlowClaimOfAnOrderedHandlerDoesNotHoldUpTheOthers(t *testing.T) {
	for _, limited := range []bool{false, true} {
		t.Run(map[bool]string{false: "unlimited", true: "limited"}[limited], func(t *testing.T) {
			admin, s, ps := apartBundle(t, Config{ID: "s1", LeaseDuration: time.Minute, PollInterval: time.Hour})
			if limited {
				if _, err := admin.Exec(context.Background(), `INSERT INTO webhook_ingress.handler_limits (handler, max_in_flight) VALUES ('free', 1000)`); err != nil {
					t.Fatal(err)
				}
			}
			release := make(chan struct{})
			var releaseOnce sync.Once
			t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
			held := make(chan struct{}, 1)
			apartClaimStarting = func(h string) {
				if h == "ordered" {
					select {
					case held <- struct{}{}:
					default:
					}
					<-release
				}
			}
			t.Cleanup(func() { apartClaimStarting = func(string) {} })
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			<-held // the ordered handler's claim has started, and waits
			events(t, admin, 50)
			s.Wake() // as NOTIFY would
			refs(t, ps, "free", 50, 30*time.Second)
			releaseOnce.Do(func() { close(release) })
			refs(t, ps, "ordered", 50, 30*time.Second)
			s.Stop()
		})
	}
}

// A handler whose claims apart come back short after more than
// slowApartClaim twice in a row (a backlog its order holds back, walked on
// every claim) is spaced out: not claimed again before nine times its
// claim's time, so walking it costs the database at most a tenth of its
// time. Once is not enough (a cold plan, a busy machine), and a full claim
// is claimed again at once. ClaimOnce is never spaced out. Not parallel: it
// sets apartClaimStarting.
func TestSlowShortClaimsSpaceOutTheirHandler(t *testing.T) {
	admin, s, _ := apartBundle(t, Config{ID: "s1", LeaseDuration: time.Minute, PollInterval: time.Hour, BatchSize: 4})
	calls := 0
	apartClaimStarting = func(h string) {
		if h == "ordered" {
			calls++
			time.Sleep(2 * slowApartClaim) // on the claim's clock, as a walk past a held backlog
		}
	}
	t.Cleanup(func() { apartClaimStarting = func(string) {} })
	ctx := context.Background()
	events(t, admin, 6)
	pace := newApartPace()
	n, more, err := s.claimApart(ctx, nil, s.apart[1], pace)
	if err != nil || n != 4 || !more {
		t.Fatalf("first claim: %d leased, more %v, %v; want 4 (a full batch), more", n, more, err)
	}
	if at, ok := pace.next["ordered"]; ok {
		t.Fatalf("a full batch spaced its handler out until %s", at)
	}
	n, more, err = s.claimApart(ctx, nil, s.apart[1], pace)
	if err != nil || n != 2 || more {
		t.Fatalf("second claim: %d leased, more %v, %v; want 2, no more", n, more, err)
	}
	if at, ok := pace.next["ordered"]; ok {
		t.Fatalf("one slow short claim spaced its handler out until %s", at)
	}
	before := time.Now()
	if n, _, err := s.claimApart(ctx, nil, s.apart[1], pace); err != nil || n != 0 {
		t.Fatalf("third claim: %d leased, %v; want none", n, err)
	}
	if at := pace.next["ordered"]; at.Sub(before) < 9*2*slowApartClaim {
		t.Fatalf("a second slow short claim in a row spaced its handler out until %s after it began, want at least %s", at.Sub(before), 9*2*slowApartClaim)
	}
	events(t, admin, 1)
	if n, _, err := s.claimApart(ctx, nil, s.apart[1], pace); err != nil || n != 0 || calls != 3 {
		t.Fatalf("claim while spaced out: %d leased (%v), %d claims of the handler; want none, 3", n, err, calls)
	}
	if n, err := s.ClaimOnce(ctx); err != nil || n != 5 {
		t.Fatalf("ClaimOnce (not spaced): %d leased, %v; want 5 (a batch of free's 7, and the new ordered job)", n, err)
	}
}

// A limited ordered handler (claimed by ClaimLimitedJobs, in the ordered
// loop) is spaced out as an ordered one is: its claims walk a held-back
// backlog too. Not parallel: it sets apartClaimStarting.
func TestSlowShortClaimsSpaceOutALimitedOrderedHandler(t *testing.T) {
	admin, s, _ := apartBundle(t, Config{ID: "s1", LeaseDuration: time.Minute, PollInterval: time.Hour})
	ctx := context.Background()
	if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.handler_limits (handler, max_in_flight) VALUES ('ordered', 1000)`); err != nil {
		t.Fatal(err)
	}
	calls := 0
	apartClaimStarting = func(h string) {
		if h == "ordered" {
			calls++
			time.Sleep(2 * slowApartClaim)
		}
	}
	t.Cleanup(func() { apartClaimStarting = func(string) {} })
	pace := newApartPace()
	for range 3 {
		if _, _, err := s.claimApart(ctx, nil, s.apart[1], pace); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := pace.next["ordered"]; !ok || calls != 2 {
		t.Fatalf("after two slow short claims: spaced out %v, %d claims of three rounds; want spaced out after 2", ok, calls)
	}
}

// A claim of an ordered handler that fails after it may have committed
// gives back this streamer's leases of the handler newer than those it
// published, as a limited handler's does: left to the reaper they would
// hold their keys for a whole lease and spend an attempt though no handler
// saw them. The leases it published stay.
func TestFailedOrderedClaimGivesBackUnseenLeases(t *testing.T) {
	admin, s, _ := apartBundle(t, Config{ID: "s1", LeaseDuration: time.Minute, PollInterval: time.Hour, BatchSize: 3})
	ctx := context.Background()
	events(t, admin, 9)
	if n, _, err := s.claimApart(ctx, nil, s.apart[1], nil); err != nil || n != 3 {
		t.Fatalf("first claim leased %d (%v), want 3", n, err)
	}
	// What a claim whose answer never reached s1 committed: leases in its name.
	unseen, err := queries.New(s.cfg.Pool).ClaimHandlerJobs(ctx, queries.ClaimHandlerJobsParams{
		Handler: "ordered", BatchSize: 3, LeaseHolder: "s1", LeaseFor: time.Minute})
	if err != nil || len(unseen) != 3 {
		t.Fatalf("claim as s1 leased %d (%v), want 3", len(unseen), err)
	}
	// The next claim fails.
	if _, err := admin.Exec(ctx, `REVOKE EXECUTE ON FUNCTION webhook_ingress.claim_handler_jobs(text, bigint, text, interval) FROM webhook_streamer`); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.claimApart(ctx, nil, s.apart[1], nil); err != nil || n != 0 {
		t.Fatalf("failing claim leased %d (%v), want 0", n, err)
	}
	var ids []int64
	for _, j := range unseen {
		ids = append(ids, j.ID)
	}
	var given, leased int
	if err := admin.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM webhook_ingress.jobs WHERE id = ANY($1) AND status = 'pending' AND attempt_count = 0),
		(SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'ordered' AND status = 'leased')`, ids).Scan(&given, &leased); err != nil {
		t.Fatal(err)
	}
	if given != 3 || leased != 3 {
		t.Fatalf("%d of the 3 unseen leases given back (pending, attempt not counted), %d leased; want 3 and the 3 published", given, leased)
	}
}

// A ClaimJobs that fails after it may have committed gives back this
// streamer's leases newer than those it published, of the handlers it did
// not pass over; the leases it published stay, and so do the leases the
// loops apart took meanwhile of the handlers it passed over.
func TestFailedClaimGivesBackUnseenLeases(t *testing.T) {
	admin, s, _ := apartBundle(t, Config{ID: "s1", LeaseDuration: time.Minute, PollInterval: time.Hour, BatchSize: 3})
	ctx := context.Background()
	events(t, admin, 9)
	if n, err := s.claimMain(ctx); err != nil || n != 3 {
		t.Fatalf("first claim leased %d (%v), want free's 3", n, err)
	}
	// What a claim whose answer never reached s1 committed: leases in its name.
	unseen, err := queries.New(s.cfg.Pool).ClaimJobs(ctx, queries.ClaimJobsParams{
		FullHandlers: []string{"ordered"}, BatchSize: 3, LeaseHolder: "s1", LeaseFor: time.Minute})
	if err != nil || len(unseen) != 3 {
		t.Fatalf("claim as s1 leased %d (%v), want 3", len(unseen), err)
	}
	if n, _, err := s.claimApart(ctx, nil, s.apart[1], nil); err != nil || n != 3 {
		t.Fatalf("claim of the ordered handler leased %d (%v), want 3", n, err)
	}
	// The next ClaimJobs fails.
	if _, err := admin.Exec(ctx, `REVOKE EXECUTE ON FUNCTION webhook_ingress.claim_jobs(text[], bigint, text, interval, interval) FROM webhook_streamer`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.claimMain(ctx); err == nil || n != 0 {
		t.Fatalf("failing claim leased %d (%v), want 0 and its error", n, err)
	}
	var ids []int64
	for _, j := range unseen {
		ids = append(ids, j.ID)
	}
	var given, free, ordered int
	if err := admin.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM webhook_ingress.jobs WHERE id = ANY($1) AND status = 'pending' AND attempt_count = 0),
		(SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'free' AND status = 'leased'),
		(SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'ordered' AND status = 'leased')`, ids).Scan(&given, &free, &ordered); err != nil {
		t.Fatal(err)
	}
	if given != 3 || free != 3 || ordered != 3 {
		t.Fatalf("%d of the 3 unseen leases given back, %d of free's and %d of ordered's leased; want 3, the 3 published and the 3 the loop apart took", given, free, ordered)
	}
}

// leasedNow returns handler's jobs leased now and not yet extended, with
// their lease times.
func leasedNow(t *testing.T, s *Streamer, handler string) map[int64]time.Time {
	t.Helper()
	rows, err := s.cfg.Pool.Query(context.Background(), `SELECT id, attempted_at FROM webhook_ingress.jobs
		WHERE handler = $1 AND status = 'leased' AND worker_id IS NULL`, handler)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[int64]time.Time{}
	for rows.Next() {
		var id int64
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			t.Fatal(err)
		}
		got[id] = at
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// recountNext makes s's next claim read the handler lists again.
func recountNext(s *Streamer) {
	s.inFlight.mu.Lock()
	s.inFlight.counted = time.Time{}
	s.inFlight.mu.Unlock()
}

// A handler that becomes ordered (a consumer adds order_key to its
// subscription) while the claim loop has published leases of its keyed
// jobs, which run in consumers (not yet extended: worker_id stays NULL until
// the first extension). The ordered loop's first claim of it fails: its
// give-back keeps the leases any loop of this process published (the mark is
// per handler, from every claim). Before, the ordered loop had no mark for it
// and gave them all back, and the next claim leased the same keys' jobs
// again while the first ran: a key ran twice at once.
func TestGiveBackKeepsLeasesPublishedBeforeAHandlerBecameOrdered(t *testing.T) {
	admin, s, _ := apartBundle(t, Config{ID: "s1", LeaseDuration: time.Minute, PollInterval: time.Hour, BatchSize: 10, LeasedRecount: time.Hour})
	ctx := context.Background()
	if _, err := s.claimMain(ctx); err != nil { // lists: ordered = [ordered]
		t.Fatal(err)
	}
	// A consumer now orders "free" by key; its new jobs are keyed.
	if _, err := admin.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET order_key = 'data.object.id' WHERE handler = 'free'`); err != nil {
		t.Fatal(err)
	}
	events(t, admin, 3)
	// The claim loop, its lists a recount old, leases and publishes them.
	if n, err := s.claimMain(ctx); err != nil || n != 3 {
		t.Fatalf("claim leased %d (%v), want free's 3", n, err)
	}
	published := leasedNow(t, s, "free")
	if len(published) != 3 {
		t.Fatalf("free: %d leased, want 3", len(published))
	}
	recountNext(s) // the next recount sees free ordered
	if _, err := admin.Exec(ctx, `REVOKE EXECUTE ON FUNCTION webhook_ingress.claim_handler_jobs(text, bigint, text, interval) FROM webhook_streamer`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.claimApart(ctx, nil, s.apart[1], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `GRANT EXECUTE ON FUNCTION webhook_ingress.claim_handler_jobs(text, bigint, text, interval) TO webhook_streamer`); err != nil {
		t.Fatal(err)
	}
	still := leasedNow(t, s, "free")
	if _, _, err := s.claimApart(ctx, nil, s.apart[1], nil); err != nil {
		t.Fatal(err)
	}
	again := 0
	for id, at := range leasedNow(t, s, "free") {
		if p, ok := published[id]; ok && !p.Equal(at) {
			again++
		}
	}
	if len(still) != 3 || again != 0 {
		t.Fatalf("after the ordered loop's failed first claim of free: %d of its 3 published, running leases still held; %d of those jobs leased again under a new lease while the first runs; want 3 and 0",
			len(still), again)
	}
}

// A handler that stops being ordered (order_key removed) moves from the
// ordered loop to the claim loop, whose ClaimJobs then fails: its give-back
// keeps the ordered loop's published, running leases of that handler. Before,
// it gave back what was newer than the claim loop's own newest lease, those
// among them, and its keyed jobs (still claimed in key order) ran twice at
// once.
func TestGiveBackKeepsLeasesPublishedBeforeAHandlerLeftOrdered(t *testing.T) {
	admin, s, _ := apartBundle(t, Config{ID: "s1", LeaseDuration: time.Minute, PollInterval: time.Hour, BatchSize: 10, LeasedRecount: time.Hour})
	ctx := context.Background()
	events(t, admin, 3)
	if n, err := s.claimMain(ctx); err != nil || n != 3 { // free's 3: mainLeasedAt
		t.Fatalf("claim leased %d (%v), want free's 3", n, err)
	}
	if n, _, err := s.claimApart(ctx, nil, s.apart[1], nil); err != nil || n != 3 {
		t.Fatalf("ordered claim leased %d (%v), want 3", n, err)
	}
	published := leasedNow(t, s, "ordered")
	if _, err := admin.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET order_key = NULL WHERE handler = 'ordered'`); err != nil {
		t.Fatal(err)
	}
	recountNext(s)
	if _, err := admin.Exec(ctx, `REVOKE EXECUTE ON FUNCTION webhook_ingress.claim_jobs(text[], bigint, text, interval, interval) FROM webhook_streamer`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.claimMain(ctx); err == nil {
		t.Fatal("claim: want its error")
	}
	still := leasedNow(t, s, "ordered")
	if len(published) != 3 || len(still) != 3 {
		t.Fatalf("after a failed ClaimJobs: %d of the ordered loop's %d published, running leases still held; want all", len(still), len(published))
	}
}

// A streamer restarted under the same ID (Config.ID is public: a pod name)
// whose first claim of an ordered handler fails gives nothing back: it has
// seen no lease of the handler, and the leases its previous process
// published run in consumers. Before, it gave them all back and the next
// claim leased the same keys' jobs again while they ran.
func TestGiveBackAfterARestartLeavesThePreviousProcessLeases(t *testing.T) {
	admin, s, ps := apartBundle(t, Config{ID: "s1", LeaseDuration: time.Minute, PollInterval: time.Hour, BatchSize: 3})
	ctx := context.Background()
	events(t, admin, 3)
	if n, _, err := s.claimApart(ctx, nil, s.apart[1], nil); err != nil || n != 3 {
		t.Fatalf("ordered claim leased %d (%v), want 3", n, err)
	}
	// The process restarts under the same ID.
	s2, err := New(Config{ID: "s1", Pool: s.cfg.Pool, Publisher: ps, Logger: slog.New(slog.DiscardHandler),
		LeaseDuration: time.Minute, PollInterval: time.Hour, BatchSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `REVOKE EXECUTE ON FUNCTION webhook_ingress.claim_handler_jobs(text, bigint, text, interval) FROM webhook_streamer`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s2.claimApart(ctx, nil, s2.apart[1], nil); err != nil {
		t.Fatal(err)
	}
	if still := leasedNow(t, s, "ordered"); len(still) != 3 {
		t.Fatalf("after the restarted streamer's failed first ordered claim: %d of the 3 published, running leases still held; want 3", len(still))
	}
}
