package streamer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testlog"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/streamer"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

type testBundle struct {
	url    string
	admin  *pgxpool.Pool
	pool   *pgxpool.Pool // as webhook_streamer
	pubsub bus.PubSub
	// refuseListen makes the LISTEN connection's (re)connects fail, as while
	// the network to Postgres is cut.
	refuseListen atomic.Bool
}

func setup(t *testing.T, handlers ...string) *testBundle {
	t.Helper()
	return setupOn(t, pgtest.NewDatabase(t), handlers...)
}

// setupOn is setup on the migrated database at url.
func setupOn(t *testing.T, url string, handlers ...string) *testBundle {
	t.Helper()
	ctx := context.Background()
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
	for _, h := range handlers {
		if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ($1)`, h); err != nil {
			t.Fatal(err)
		}
	}
	ps := bus.NewGoChannel(slog.New(slog.DiscardHandler))
	t.Cleanup(func() { ps.Close() })
	return &testBundle{url: url, admin: admin, pool: pool, pubsub: ps}
}

// insertEvents stores n events in one statement (so in one transaction).
func (b *testBundle) insertEvents(t *testing.T, n int) {
	t.Helper()
	_, err := b.admin.Exec(context.Background(), `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_' || g || '_' || md5(random()::text), 'invoice.paid', 'x', true
		FROM generate_series(1, $1) g`, n)
	if err != nil {
		t.Fatal(err)
	}
}

func (b *testBundle) newStreamer(t *testing.T, cfg streamer.Config) *streamer.Streamer {
	t.Helper()
	cfg.Pool = b.pool
	if cfg.Publisher == nil {
		cfg.Publisher = b.pubsub
	}
	if cfg.MinLeasedPerHandler == 0 {
		// The tests' consumers mostly collect references and finish none:
		// no pace would let the streamer lease past its floor (the pace is
		// tested in tests/queuedlease_test.go, with real consumers).
		cfg.MinLeasedPerHandler = 1 << 20
	}
	// Its log is kept and printed only when the test fails.
	logs := &testlog.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("streamer %s log:\n%s", cfg.ID, logs.String())
		}
	})
	s, err := streamer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (b *testBundle) listenConnect(ctx context.Context) (*pgx.Conn, error) {
	if b.refuseListen.Load() {
		return nil, errors.New("connection refused (test)")
	}
	cfg, err := pgx.ParseConfig(b.url)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = "inlet-test-listen"
	return pgx.ConnectConfig(ctx, cfg)
}

// collector subscribes to handler topics and records every reference, and
// how many each message carried and whether its form is the one-reference
// message earlier consumers read.
type collector struct {
	mu     sync.Mutex
	refs   []bus.Ref
	sizes  []int
	single []bool
	got    chan bus.Ref
}

func (b *testBundle) collect(t *testing.T, handlers ...string) *collector {
	t.Helper()
	c := &collector{got: make(chan bus.Ref, 100000)}
	for _, h := range handlers {
		msgs, err := b.pubsub.Subscribe(context.Background(), bus.Topic(h))
		if err != nil {
			t.Fatal(err)
		}
		go func(msgs <-chan *message.Message) {
			for m := range msgs {
				refs, err := bus.ParseRefs(m)
				_, oldErr := bus.ParseMessage(m)
				m.Ack()
				if err != nil {
					t.Errorf("bad message: %v", err)
					continue
				}
				c.mu.Lock()
				c.refs = append(c.refs, refs...)
				c.sizes = append(c.sizes, len(refs))
				c.single = append(c.single, oldErr == nil)
				c.mu.Unlock()
				for _, r := range refs {
					c.got <- r
				}
			}
		}(msgs)
	}
	return c
}

func (c *collector) wait(t *testing.T, n int, within time.Duration) []bus.Ref {
	t.Helper()
	deadline := time.After(within)
	var out []bus.Ref
	for len(out) < n {
		select {
		case r := <-c.got:
			out = append(out, r)
		case <-deadline:
			t.Fatalf("got %d references within %s, want %d", len(out), within, n)
		}
	}
	return out
}

func (b *testBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.admin.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPublishesOneReferencePerJob(t *testing.T) {
	t.Parallel()
	b := setup(t, "billing", "audit")
	c := b.collect(t, "billing", "audit")
	b.insertEvents(t, 3)
	s := b.newStreamer(t, streamer.Config{PollInterval: 50 * time.Millisecond})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	refs := c.wait(t, 6, 10*time.Second)
	perHandler := map[string]int{}
	for _, r := range refs {
		perHandler[r.Handler]++
		if r.Attempt != 1 || r.Provider != "stripe" || r.EventType != "invoice.paid" || r.EventID == 0 {
			t.Errorf("reference %+v", r)
		}
	}
	if perHandler["billing"] != 3 || perHandler["audit"] != 3 {
		t.Fatalf("per handler = %v", perHandler)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'leased' AND attempt_count = 1 AND lease_holder_id = $1`, s.ID()); n != 6 {
		t.Fatalf("%d jobs leased by the streamer, want 6", n)
	}
}

// A claim's jobs of one handler travel in messages of at most
// RefsPerMessage references, split evenly; with 1, each in a message of its
// own that consumers from before batched messages read (ParseMessage).
func TestReferencesTravelInMessagesOfRefsPerMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		per   int
		sizes []int
	}{
		{per: 0, sizes: []int{25, 25, 25, 25}}, // the default, 32: 100 in four even messages, not 32+32+32+4
		{per: 40, sizes: []int{33, 33, 34}},
		{per: 1},
	} {
		t.Run(strconv.Itoa(tc.per), func(t *testing.T) {
			t.Parallel()
			b := setup(t, "billing")
			c := b.collect(t, "billing")
			b.insertEvents(t, 100)
			s := b.newStreamer(t, streamer.Config{RefsPerMessage: tc.per, BatchSize: 100})
			if n, err := s.ClaimOnce(context.Background()); err != nil || n != 100 {
				t.Fatalf("claim: %d, %v", n, err)
			}
			refs := c.wait(t, 100, 10*time.Second)
			seen := map[int64]bool{}
			for _, r := range refs {
				if seen[r.JobID] || r.Attempt != 1 || r.LeasedAt.IsZero() {
					t.Errorf("reference %+v (seen before: %v)", r, seen[r.JobID])
				}
				seen[r.JobID] = true
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if tc.per == 1 {
				if len(c.sizes) != 100 || slices.Contains(c.single, false) {
					t.Fatalf("%d messages, readable by earlier consumers: %v", len(c.sizes), c.single)
				}
				return
			}
			slices.Sort(c.sizes)
			if !slices.Equal(c.sizes, tc.sizes) || slices.Contains(c.single, true) {
				t.Fatalf("message sizes %v, want %v (single-reference form: %v)", c.sizes, tc.sizes, c.single)
			}
		})
	}
}

func TestTwoStreamersNeverLeaseAJobTwice(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	c := b.collect(t, "h")
	const jobs = 5000
	b.insertEvents(t, jobs)
	var streamers []*streamer.Streamer
	for i := 0; i < 2; i++ {
		s := b.newStreamer(t, streamer.Config{ID: fmt.Sprintf("s%d", i), BatchSize: 100, PollInterval: 20 * time.Millisecond, LeaseDuration: 10 * time.Minute})
		streamers = append(streamers, s)
	}
	for _, s := range streamers {
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	refs := c.wait(t, jobs, 60*time.Second)
	for _, s := range streamers {
		s.Stop()
	}
	seen := map[int64]bool{}
	for _, r := range refs {
		if seen[r.JobID] {
			t.Fatalf("job %d published twice", r.JobID)
		}
		seen[r.JobID] = true
	}
	// Nothing more arrives: the lease keeps the others off.
	select {
	case r := <-c.got:
		t.Fatalf("extra reference %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	s0, s1 := streamers[0].Stats(), streamers[1].Stats()
	if s0.Claimed+s1.Claimed != jobs || s0.Claimed == 0 || s1.Claimed == 0 {
		t.Fatalf("claimed %d + %d, want both to share %d", s0.Claimed, s1.Claimed, jobs)
	}
	t.Logf("streamer shares: %d / %d", s0.Claimed, s1.Claimed)
}

func TestReaperReturnsExpiredLeasesThenDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	ctx := context.Background()
	if _, err := b.admin.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET max_attempts = 2`); err != nil {
		t.Fatal(err)
	}
	c := b.collect(t, "h")
	b.insertEvents(t, 1)
	// A consumer of h is alive (it says so, as consumer services do) and
	// receives each attempt, then dies without an outcome: each lease
	// expires, and is recovered within the lease plus the reap interval.
	const lease, reap = time.Second, 100 * time.Millisecond
	alive := func() {
		t.Helper()
		if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.consumers (handler, worker_id, alive_until) VALUES ('h', 'quiet-consumer', now() + interval '1 hour')
			ON CONFLICT (handler, worker_id) DO UPDATE SET seen_at = now()`); err != nil {
			t.Fatal(err)
		}
	}
	alive()
	s := b.newStreamer(t, streamer.Config{LeaseDuration: lease, ReapInterval: reap, PollInterval: 50 * time.Millisecond})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	var refs []bus.Ref
	var got []time.Time
	for len(refs) < 2 {
		r := c.wait(t, 1, 15*time.Second)[0]
		alive() // seen after the lease began: it may have run the handler
		refs, got = append(refs, r), append(got, time.Now())
	}
	if refs[0].Attempt != 1 || refs[1].Attempt != 2 || refs[0].JobID != refs[1].JobID {
		t.Fatalf("references %+v, want attempts 1 then 2 of one job", refs)
	}
	// Slack for the poll and a loaded machine; the bound is lease + reap.
	if d := got[1].Sub(got[0]); d > lease+reap+time.Second {
		t.Errorf("expired lease recovered after %s, want within lease %s + reap interval %s", d, lease, reap)
	}
	testwait.Eventually(t, 10*time.Second, "the job dead-lettered with a reason after its last lease expired", func() (bool, string) {
		var status, class, reason string
		err := b.admin.QueryRow(ctx, `SELECT status, coalesce(last_error_class, ''), coalesce(last_error, '') FROM webhook_ingress.jobs`).Scan(&status, &class, &reason)
		return status == "dead_letter" && class == "lease_expired" && strings.HasPrefix(reason, "attempt 2 leased at ") && strings.Contains(reason, " without an outcome"),
			fmt.Sprintf("%s %s %q (%v)", status, class, reason, err)
	})
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.job_attempts WHERE outcome = 'lease_expired' AND error_class = 'lease_expired'
			AND error LIKE '% without an outcome%'`); n != 2 {
		t.Fatalf("%d lease_expired attempts in history, want 2", n)
	}
	select {
	case r := <-c.got:
		t.Fatalf("dead letter published again: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	if st := s.Stats(); st.Reaped != 1 || st.DeadLettered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A lease that expires while no consumer of its handler is known to be alive
// is no attempt (no handler can have run it): it goes back to pending without
// counting, however often, and never dead-letters.
func TestUntakenLeasesDoNotSpendAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	ctx := context.Background()
	if _, err := b.admin.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET max_attempts = 1`); err != nil {
		t.Fatal(err)
	}
	c := b.collect(t, "h")
	b.insertEvents(t, 1)
	s := b.newStreamer(t, streamer.Config{LeaseDuration: time.Second, ReapInterval: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	refs := c.wait(t, 3, 20*time.Second) // three leases, each expiring untaken
	for _, r := range refs {
		if r.Attempt != 1 {
			t.Fatalf("references %+v: an untaken lease counted as an attempt", refs)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'dead_letter'`); n != 0 {
		t.Fatal("a job no consumer ever took was dead-lettered")
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.job_attempts`); n != 0 {
		t.Fatalf("%d attempt rows for leases no consumer took", n)
	}
}

func TestNotifyWakesWithinMilliseconds(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	c := b.collect(t, "h")
	// Polling and follow-ups off: only the NOTIFY can deliver in time.
	s := b.newStreamer(t, streamer.Config{PollInterval: time.Hour, ListenConnect: b.listenConnect, FollowUp: -1})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitConnected(t, s, 0)
	// The claim at start is done, so it cannot take the first event.
	waitStats(t, s, 5*time.Second, "the claim at start", func(st streamer.Stats) bool { return st.Claims >= 1 })
	hinter := notify.NewHinter(b.admin, 0, nil)
	defer hinter.Stop()
	for i := 0; i < 3; i++ {
		woken := s.Stats().NotifyWakeups
		b.insertEvents(t, 1)
		start := time.Now()
		hinter.Hint()
		c.wait(t, 1, 2*time.Second)
		t.Logf("hint to reference: %s", time.Since(start))
		// Each hint's NOTIFY arrives before the next is sent: hints that
		// the hinter holds while one is in flight are sent as one.
		waitStats(t, s, 2*time.Second, "the hint's NOTIFY", func(st streamer.Stats) bool { return st.NotifyWakeups > woken })
	}
}

func waitConnected(t *testing.T, s *streamer.Streamer, reconnects int) {
	t.Helper()
	testwait.Eventually(t, 15*time.Second, fmt.Sprintf("listener connected with %d reconnects", reconnects), func() (bool, string) {
		up, n := s.Listener().Connected()
		return up && n >= reconnects, fmt.Sprintf("connected=%v reconnects=%d", up, n)
	})
}

func TestListenerKilledPollingCoversAndItReconnects(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	c := b.collect(t, "h")
	s := b.newStreamer(t, streamer.Config{PollInterval: 300 * time.Millisecond, ListenConnect: b.listenConnect})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitConnected(t, s, 0)
	b.refuseListen.Store(true)
	if n := b.count(t, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'inlet-test-listen' AND datname = current_database()`); n != 1 {
		t.Fatalf("terminated %d listener backends, want 1", n)
	}
	// Let the wake-ups already queued (Start's, the first connect's) run
	// first, so only a poll tick can find what is inserted next: they have
	// once a poll tick's wake-up has been taken and claimed on (the wake
	// channel holds one).
	p0, claimsAtTick := s.Stats().PollWakeups, int64(-1)
	waitStats(t, s, 5*time.Second, "a poll tick claimed on after the kill", func(st streamer.Stats) bool {
		if claimsAtTick < 0 && st.PollWakeups > p0 {
			claimsAtTick = st.Claims
		}
		return claimsAtTick >= 0 && st.Claims > claimsAtTick
	})
	polls := s.Stats().PollWakeups
	b.insertEvents(t, 1) // no hint, no listener: only polling can find it
	c.wait(t, 1, 5*time.Second)
	if up, _ := s.Listener().Connected(); up {
		t.Fatal("listener reconnected while connects were refused")
	}
	if s.Stats().PollWakeups == polls {
		t.Fatal("delivered without a poll wake-up")
	}
	b.refuseListen.Store(false)
	waitConnected(t, s, 1)
	// And NOTIFY works again on the new connection.
	s2wake := s.Stats().NotifyWakeups
	hinter := notify.NewHinter(b.admin, 0, nil)
	defer hinter.Stop()
	hinter.Hint()
	waitStats(t, s, 5*time.Second, "a NOTIFY wake-up after reconnecting", func(st streamer.Stats) bool { return st.NotifyWakeups > s2wake })
}

func TestPublishFailureGivesTheLeaseBack(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	closed := bus.NewGoChannel(slog.New(slog.DiscardHandler))
	closed.Close() // a real transport that refuses every publish
	b.insertEvents(t, 5)
	s := b.newStreamer(t, streamer.Config{Publisher: closed})
	n, err := s.ClaimOnce(context.Background())
	if !errors.Is(err, streamer.ErrPublish) || n != 5 {
		t.Fatalf("ClaimOnce = %d, %v; want 5 and ErrPublish", n, err)
	}
	if st := s.Stats(); st.PublishFailed != 5 || st.Published != 0 {
		t.Fatalf("stats %+v", st)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'pending' AND attempt_count = 0 AND lease_holder_id IS NULL`); n != 5 {
		t.Fatalf("%d jobs given back, want 5", n)
	}
}

// A handler whose consumers have all gone quiet (they said they were alive,
// and that ran out) gets no leases, so an outage burns no attempts; other
// handlers keep flowing; it is leased again once a consumer is back.
func TestHandlerWithoutALiveConsumerIsNotLeased(t *testing.T) {
	t.Parallel()
	b := setup(t, "down", "up")
	ctx := context.Background()
	if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.consumers (handler, worker_id, seen_at, alive_until)
		VALUES ('down', 'gone', now() - interval '1 hour', now() - interval '1 hour'),
		       ('up', 'here', now(), now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	c := b.collect(t, "down", "up")
	b.insertEvents(t, 30)
	s := b.newStreamer(t, streamer.Config{LeasedRecount: 10 * time.Millisecond})
	for range 3 {
		if _, err := s.ClaimOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range c.wait(t, 30, 5*time.Second) {
		if r.Handler != "up" {
			t.Fatalf("job %d of handler %q leased while its consumers are quiet", r.JobID, r.Handler)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'down' AND status = 'pending' AND attempt_count = 0`); n != 30 {
		t.Fatalf("%d of the quiet handler's 30 jobs untouched", n)
	}
	// A consumer comes back.
	if _, err := b.admin.Exec(ctx, `UPDATE webhook_ingress.consumers SET seen_at = now(), alive_until = now() + interval '1 hour' WHERE handler = 'down'`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	leased := 0
	for leased < 30 && time.Now().Before(deadline) {
		n, err := s.ClaimOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leased += n
	}
	if leased != 30 {
		t.Fatalf("%d of the handler's 30 jobs leased after its consumer came back", leased)
	}
}

// A handler whose consumers lag gets no more leases once it has
// MaxLeasedPerHandler in flight; other handlers keep flowing.
func TestMaxLeasedPerHandlerStopsLeasingAhead(t *testing.T) {
	t.Parallel()
	b := setup(t, "slow", "fast")
	ctx := context.Background()
	if _, err := b.admin.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET provider_pattern = CASE handler WHEN 'slow' THEN 'slow' ELSE 'stripe' END`); err != nil {
		t.Fatal(err)
	}
	_, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		SELECT 'slow', 'stripe', 'evt_slow_' || g, 'x', 'x', true FROM generate_series(1, 300) g`)
	if err != nil {
		t.Fatal(err)
	}
	b.insertEvents(t, 40) // provider stripe: only "fast" matches
	s := b.newStreamer(t, streamer.Config{BatchSize: 25, MaxLeasedPerHandler: 50})
	for i := 0; i < 20; i++ { // nobody consumes: the claims pile up
		if _, err := s.ClaimOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	slow := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'slow' AND status = 'leased'`)
	fast := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'fast' AND status = 'leased'`)
	if slow < 50 || slow >= 50+25 {
		t.Fatalf("slow handler has %d leased, want the cap of 50 (plus at most one batch)", slow)
	}
	if fast != 40 {
		t.Fatalf("fast handler has %d of its 40 jobs leased: the slow one's cap held it back", fast)
	}
}

// After a round that leased jobs the streamer looks again FollowUp later, so
// an event stored just after is delivered with no NOTIFY and no poll; a
// round that finds nothing ends the follow-ups.
func TestFollowUpClaimsBetweenWakeUps(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	c := b.collect(t, "h")
	s := b.newStreamer(t, streamer.Config{PollInterval: time.Hour, FollowUp: 300 * time.Millisecond})
	if err := s.Start(context.Background()); err != nil { // Start claims once
		t.Fatal(err)
	}
	defer s.Stop()
	b.insertEvents(t, 1)
	s.Wake()
	c.wait(t, 1, 2*time.Second)
	claims := s.Stats().Claims
	b.insertEvents(t, 1) // no wake-up: only the follow-up can deliver it
	c.wait(t, 1, 2*time.Second)
	// The follow-up after that one finds nothing; then no more rounds.
	// Claims counts a claim as its statement starts: the window after it
	// lets the statement finish before the next insert (it would find it).
	waitStats(t, s, 5*time.Second, "the follow-up that finds nothing", func(st streamer.Stats) bool { return st.Claims >= claims+2 })
	time.Sleep(500 * time.Millisecond)
	b.insertEvents(t, 1)
	select {
	case r := <-c.got:
		t.Fatalf("job %d delivered with no wake-up and no follow-up due", r.JobID)
	case <-time.After(time.Second):
	}
	s.Wake()
	c.wait(t, 1, 2*time.Second)
}

func TestFollowUpsGoOnForAWhileAfterTheLastJob(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	c := b.collect(t, "h")
	s := b.newStreamer(t, streamer.Config{PollInterval: time.Hour, FollowUp: 20 * time.Millisecond, FollowUpFor: 1500 * time.Millisecond})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	b.insertEvents(t, 1)
	s.Wake()
	c.wait(t, 1, 2*time.Second)
	// Several empty follow-ups later, still within FollowUpFor: found.
	claims := s.Stats().Claims
	waitStats(t, s, time.Second, "three empty follow-ups", func(st streamer.Stats) bool { return st.Claims >= claims+3 })
	b.insertEvents(t, 1)
	c.wait(t, 1, time.Second)
	// Past FollowUpFor with nothing found: the follow-ups have stopped. (A
	// window, with a second's slack: stopping is what is under test.)
	time.Sleep(2500 * time.Millisecond)
	b.insertEvents(t, 1)
	select {
	case r := <-c.got:
		t.Fatalf("job %d delivered with no wake-up and no follow-up due", r.JobID)
	case <-time.After(time.Second):
	}
	s.Wake()
	c.wait(t, 1, 2*time.Second)
}

// Stop waits for a claim round in progress to finish and publish. Were the
// round cancelled instead, the server could still run the claim it had
// received and commit leases that nobody publishes (they would wait a whole
// lease for the reaper). Here the round waits on a table lock held by the
// test, and Stop must wait with it.
func TestStopWaitsForTheClaimRoundInProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	c := b.collect(t, "h")
	ctx := context.Background()
	b.insertEvents(t, 3)
	tx, err := b.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE webhook_ingress.jobs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	s := b.newStreamer(t, streamer.Config{PollInterval: time.Hour, FollowUp: -1})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	testwait.Eventually(t, 10*time.Second, "the claim round waiting on the lock", func() (bool, string) {
		var waiting int
		err := b.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND usename = current_user`).Scan(&waiting)
		return err == nil && waiting > 0, fmt.Sprintf("%d sessions waiting on a lock (%v)", waiting, err)
	})
	stopped := make(chan struct{})
	go func() {
		s.Stop()
		close(stopped)
	}()
	testwait.Consistently(t, 300*time.Millisecond, "Stop waiting for the claim round", func() (bool, string) {
		select {
		case <-stopped:
			return false, "Stop returned while its claim round waited on the lock"
		default:
			return true, "stopping"
		}
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return within 10s of the lock's release")
	}
	refs := c.wait(t, 3, 5*time.Second)
	var leased int
	if err := b.admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'leased'`).Scan(&leased); err != nil || leased != 3 {
		t.Fatalf("%d jobs leased (%v), want the 3 published: %+v", leased, err, refs)
	}
}

// Claims between two poll ticks lease jobs of events received within
// RecentWindow only, from the partitions covering that time
// (023_protocol_window); the first claim after a tick (and a claim a
// PollInterval after the last full one) covers every partition, so a job of
// an older event (a retry, a replay, a catch-up) waits at most a poll
// interval longer and is never left behind.
func TestJobsOfOldEventsWaitForTheClaimOverEveryPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, "h")
	c := b.collect(t, "h")
	insert := func(ago string) {
		t.Helper()
		if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, raw_body, signature_verified, received_at)
			VALUES ('stripe', 'stripe', 'evt_' || md5(random()::text), 'invoice.paid', 'x', true, now() - $1::interval)`, ago); err != nil {
			t.Fatal(err)
		}
	}

	// Step by step: the first claim covers every partition, the next one
	// (within a PollInterval) the last hour only.
	s := b.newStreamer(t, streamer.Config{ID: "stepwise", PollInterval: time.Hour})
	if n, err := s.ClaimOnce(ctx); err != nil || n != 0 {
		t.Fatalf("first claim: %d, %v", n, err)
	}
	insert("30 days") // before every period partition: the default partition
	insert("2 hours")
	insert("1 minute")
	if n, err := s.ClaimOnce(ctx); err != nil || n != 1 {
		t.Fatalf("claim within the hour: leased %d, %v; want the job of the event received a minute ago", n, err)
	}
	if st := s.Stats(); st.Claims != 2 || st.FullClaims != 1 {
		t.Fatalf("stats %+v: want 2 claims, 1 of them over every partition", st)
	}
	if got := c.wait(t, 1, 10*time.Second); got[0].EventReceivedAt.Before(time.Now().Add(-streamer.RecentWindow)) {
		t.Fatalf("the claim within the hour leased the job of an event received at %s", got[0].EventReceivedAt)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'pending'`); n != 2 {
		t.Fatalf("%d jobs pending after the claim within the hour, want the 2 of older events", n)
	}

	// A backlog of older jobs (a replay, a catch-up of a new subscription)
	// is not paced by the poll tick: while claims over every partition come
	// back full, the next one covers every partition too.
	for range 25 {
		insert("10 days")
	}
	backlog := b.newStreamer(t, streamer.Config{ID: "backlog", PollInterval: time.Hour, BatchSize: 10})
	for i, want := range []int{10, 10, 7, 0} { // the 25, and the 2 of older events left before
		if n, err := backlog.ClaimOnce(ctx); err != nil || n != want {
			t.Fatalf("claim %d of the backlog: leased %d, %v; want %d", i+1, n, err, want)
		}
	}
	if st := backlog.Stats(); st.FullClaims != 3 {
		t.Fatalf("stats %+v: want the three claims that leased the backlog over every partition, then one within the hour", st)
	}
	c.wait(t, 27, 10*time.Second)
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'pending'`); n != 0 {
		t.Fatalf("%d jobs pending after the backlog, want none", n)
	}

	// Running: a poll tick's claim covers every partition.
	insert("30 days")
	insert("2 hours")
	r := b.newStreamer(t, streamer.Config{ID: "running", PollInterval: 200 * time.Millisecond, ListenConnect: b.listenConnect})
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	for _, ref := range c.wait(t, 2, 10*time.Second) {
		if time.Since(ref.EventReceivedAt) < streamer.RecentWindow {
			t.Errorf("reference %+v: want the jobs of the two older events", ref)
		}
	}
	testwait.Eventually(t, 10*time.Second, "a claim over every partition after the first", func() (bool, string) {
		st := r.Stats()
		return st.FullClaims >= 2, fmt.Sprintf("stats %+v", st)
	})
	// Once more while it runs: an old event's job arrives (its insert's
	// NOTIFY wakes a claim within the hour, which leaves it), and the next
	// tick leases it.
	insert("3 days")
	if got := c.wait(t, 1, 10*time.Second); time.Since(got[0].EventReceivedAt) < 3*24*time.Hour-time.Minute {
		t.Fatalf("reference %+v: want the job of the event received 3 days ago", got[0])
	}
}
