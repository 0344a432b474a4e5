package streamer_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/streamer"
)

// ordered subscribes handler "ordered" with order_key data.object.id and
// policy, and "free" (unordered) to every event.
func (b *testBundle) ordered(t *testing.T, policy string) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, order_key, order_policy) VALUES ('ordered', 'data.object.id', $1), ('free', NULL, 'block')`, policy); err != nil {
		t.Fatal(err)
	}
}

// event stores an event of entity key (none: "") that occurred at base+min
// minutes, with its parsed payload, under external id id.
func (b *testBundle) event(t *testing.T, id, key string, base time.Time, min int) {
	t.Helper()
	body := `{"id":"` + id + `","data":{"object":{}}}`
	if key != "" {
		body = `{"id":"` + id + `","data":{"object":{"id":"` + key + `"}}}`
	}
	if _, err := b.admin.Exec(context.Background(), `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, payload, occurred_at, signature_verified)
		VALUES ('stripe', 'stripe', $1, 'customer.subscription.updated', convert_to($2, 'UTF8'), $2::jsonb, $3, true)`,
		id, body, base.Add(time.Duration(min)*time.Minute)); err != nil {
		t.Fatal(err)
	}
}

// leaseRound claims once and returns the external ids of the ordered
// handler's jobs leased in it, sorted.
func (b *testBundle) leaseRound(t *testing.T, s *streamer.Streamer) []string {
	t.Helper()
	ctx := context.Background()
	var mark time.Time // on the database's clock, as attempted_at
	if err := b.admin.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&mark); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimOnce(ctx); err != nil {
		t.Fatal(err)
	}
	rows, _ := b.admin.Query(ctx, `SELECT e.external_event_id FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.handler = 'ordered' AND j.status = 'leased' AND j.attempted_at >= $1 ORDER BY 1`, mark)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// finish sets the ordered handler's job of event id to status (as a
// consumer's outcome would).
func (b *testBundle) finish(t *testing.T, id, status string) {
	t.Helper()
	if _, err := b.admin.Exec(context.Background(), `UPDATE webhook_ingress.jobs j SET status = $2, lease_expires_at = NULL,
		next_attempt_at = CASE WHEN $2 = 'failed' THEN now() + interval '1 hour' ELSE j.next_attempt_at END
		FROM webhook_ingress.events e WHERE e.id = j.event_id AND j.handler = 'ordered' AND e.external_event_id = $1`, id, status); err != nil {
		t.Fatal(err)
	}
}

// Per entity: jobs of one key run one at a time in the order their events
// occurred (not the order they arrived), each key on its own; a key whose
// head is failing holds back that key only; an event without the key is in
// the keyless lane; an unordered handler of the same events is not held.
func TestOrderKeyRunsEachEntityInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ordered(t, "block")
	base := time.Now().Add(-time.Hour)
	// Arrival order differs from occurrence order.
	b.event(t, "a3", "sub_A", base, 3)
	b.event(t, "a1", "sub_A", base, 1)
	b.event(t, "b1", "sub_B", base, 1)
	b.event(t, "a2", "sub_A", base, 2)
	b.event(t, "b2", "sub_B", base, 2)
	b.event(t, "x", "", base, 0) // no data.object.id: keyless lane
	s := b.newStreamer(t, streamer.Config{LeaseDuration: time.Minute})

	if got := b.leaseRound(t, s); !slices.Equal(got, []string{"a1", "b1", "x"}) {
		t.Fatalf("first round leased %v, want each key's earliest (a1, b1) and the keyless x", got)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'free' AND status = 'leased'`); n != 6 {
		t.Fatalf("the unordered handler has %d of its 6 jobs leased", n)
	}
	if got := b.leaseRound(t, s); len(got) != 0 {
		t.Fatalf("leased %v while every key's head runs", got)
	}
	b.finish(t, "a1", "completed")
	b.finish(t, "b1", "failed") // B's head waits for its retry: B holds, A goes on
	if got := b.leaseRound(t, s); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("after a1 completed and b1 failed, leased %v, want a2", got)
	}
	b.finish(t, "a2", "completed")
	if got := b.leaseRound(t, s); !slices.Equal(got, []string{"a3"}) {
		t.Fatalf("leased %v, want a3", got)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.handler = 'ordered' AND e.external_event_id = 'b2' AND j.attempt_count = 0`); n != 1 {
		t.Fatalf("b2 ran while b1 waits for its retry")
	}
}

// A dead-lettered head: under block its key waits until it is replayed;
// under skip the key goes on.
func TestOrderKeyDeadLetterPolicy(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"block", "skip"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.ordered(t, policy)
			base := time.Now().Add(-time.Hour)
			b.event(t, "k1", "sub_K", base, 1)
			b.event(t, "k2", "sub_K", base, 2)
			s := b.newStreamer(t, streamer.Config{LeaseDuration: time.Minute})
			if got := b.leaseRound(t, s); !slices.Equal(got, []string{"k1"}) {
				t.Fatalf("leased %v, want k1", got)
			}
			b.finish(t, "k1", "dead_letter")
			// The DLQ says what the dead letter holds back: k2 under block.
			page, err := admin.ListDeadLetters(context.Background(), b.admin, admin.DeadLetterFilter{Handler: "ordered"})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int64{"block": 1, "skip": 0}[policy]
			if len(page.DeadLetters) != 1 || page.DeadLetters[0].OrderKey == nil || *page.DeadLetters[0].OrderKey != "sub_K" || page.DeadLetters[0].Holding != want {
				t.Fatalf("dead letters %+v, want k1 of key sub_K holding %d", page.DeadLetters, want)
			}
			got := b.leaseRound(t, s)
			if policy == "skip" {
				if !slices.Equal(got, []string{"k2"}) {
					t.Fatalf("skip: leased %v after the head dead-lettered, want k2", got)
				}
				return
			}
			if len(got) != 0 {
				t.Fatalf("block: leased %v behind a dead-lettered head", got)
			}
			// An operator replays the head: it runs first, then k2.
			if _, err := b.admin.Exec(context.Background(), `UPDATE webhook_ingress.jobs j SET status = 'pending', attempt_count = 0, next_attempt_at = now()
				FROM webhook_ingress.events e WHERE e.id = j.event_id AND j.handler = 'ordered' AND e.external_event_id = 'k1'`); err != nil {
				t.Fatal(err)
			}
			if got := b.leaseRound(t, s); !slices.Equal(got, []string{"k1"}) {
				t.Fatalf("block: after the replay leased %v, want the head k1 again", got)
			}
			b.finish(t, "k1", "completed")
			if got := b.leaseRound(t, s); !slices.Equal(got, []string{"k2"}) {
				t.Fatalf("block: leased %v after the replayed head completed, want k2", got)
			}
		})
	}
}

// Two streamers claiming side by side never lease two jobs of one key at
// once, whatever the interleaving.
func TestOrderKeyHoldsAcrossStreamers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ordered(t, "block")
	base := time.Now().Add(-time.Hour)
	for i := range 40 {
		b.event(t, fmt.Sprintf("e%02d", i), fmt.Sprintf("key%d", i%4), base, i)
	}
	ss := []*streamer.Streamer{
		b.newStreamer(t, streamer.Config{ID: "s0", LeaseDuration: time.Minute}),
		b.newStreamer(t, streamer.Config{ID: "s1", LeaseDuration: time.Minute}),
	}
	ctx := context.Background()
	for round := range 10 {
		done := make(chan error, 2)
		for _, s := range ss {
			go func() { _, err := s.ClaimOnce(ctx); done <- err }()
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		rows, _ := b.admin.Query(ctx, `SELECT order_key || '=' || count(*) FROM webhook_ingress.jobs
			WHERE handler = 'ordered' AND status = 'leased' GROUP BY order_key HAVING count(*) > 1`)
		perKey, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if len(perKey) > 0 {
			t.Fatalf("round %d: keys leased more than once at a time: %s", round, strings.Join(perKey, ", "))
		}
		// The consumers finish what was leased, in the keys' order.
		if _, err := b.admin.Exec(ctx, `UPDATE webhook_ingress.jobs SET status = 'completed', lease_expires_at = NULL WHERE handler = 'ordered' AND status = 'leased'`); err != nil {
			t.Fatal(err)
		}
	}
	// Each key's jobs were leased in the order their events occurred.
	rows, _ := b.admin.Query(ctx, `SELECT order_key, array_agg(attempted_at ORDER BY order_at) = array_agg(attempted_at ORDER BY attempted_at)
		FROM webhook_ingress.jobs WHERE handler = 'ordered' GROUP BY order_key`)
	for rows.Next() {
		var key string
		var inOrder bool
		if err := rows.Scan(&key, &inOrder); err != nil {
			t.Fatal(err)
		}
		if !inOrder {
			t.Errorf("key %s leased out of order", key)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'ordered' AND status = 'completed'`); n != 40 {
		t.Fatalf("%d of 40 completed after 10 rounds of 4 keys", n)
	}
}

// An event that occurred before its key's running job but arrived after it
// was leased (a provider's late or retried delivery) waits until the running
// job is done: a key's jobs never run two at a time. Through each claim: the
// walk of every handler's due jobs, the claim by handler (another handler
// held back), and ClaimLimitedJobs (the ordered handler limited).
func TestOrderKeyLateEarlierEventWaitsForTheRunningJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		limited string // the handler given a handler_limits row, claimed apart
	}{
		{name: "walk"},
		{name: "by handler", limited: "free"},
		{name: "limited", limited: "ordered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.ordered(t, "block")
			if tc.limited != "" {
				b.limits(t, tc.limited, "max_in_flight = 10")
			}
			base := time.Now().Add(-time.Hour)
			b.event(t, "a2", "sub_A", base, 2)
			s := b.newStreamer(t, streamer.Config{LeaseDuration: time.Minute})
			if got := b.leaseRound(t, s); !slices.Equal(got, []string{"a2"}) {
				t.Fatalf("first round leased %v, want a2", got)
			}
			b.event(t, "a1", "sub_A", base, 1) // occurred before a2, arrives while a2 runs
			b.event(t, "b1", "sub_B", base, 1)
			if got := b.leaseRound(t, s); !slices.Equal(got, []string{"b1"}) {
				t.Fatalf("while a2 runs leased %v, want b1 only (a1 waits for a2)", got)
			}
			if got := b.leaseRound(t, s); len(got) != 0 {
				t.Fatalf("while a2 runs leased %v, want nothing", got)
			}
			b.finish(t, "a2", "completed")
			if got := b.leaseRound(t, s); !slices.Equal(got, []string{"a1"}) {
				t.Fatalf("after a2 completed leased %v, want a1", got)
			}
		})
	}
}

// An ordered handler is claimed in a loop of its own, which follows up as
// the claim loop does (FollowUp): a steady stream of its jobs, and a key's
// next job, due when its head completes, are leased without waiting for a
// NOTIFY or the poll.
func TestOrderedHandlerFollowUps(t *testing.T) {
	t.Parallel()
	for _, tc := range []string{"stream", "key chain"} {
		t.Run(tc, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if _, err := b.admin.Exec(context.Background(), `INSERT INTO webhook_ingress.subscriptions (handler, order_key, order_policy) VALUES ('ordered', 'data.object.id', 'block')`); err != nil {
				t.Fatal(err)
			}
			c := b.collect(t, "ordered")
			base := time.Now().Add(-time.Hour)
			b.event(t, "a1", "sub_A", base, 1)
			if tc == "key chain" {
				b.event(t, "a2", "sub_A", base, 2)
			}
			const poll = 30 * time.Second
			s := b.newStreamer(t, streamer.Config{LeaseDuration: time.Minute, PollInterval: poll, FollowUpFor: 5 * time.Second})
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer s.Stop()
			c.wait(t, 1, 5*time.Second) // a1, on Start's wake-up
			if tc == "key chain" {
				b.finish(t, "a1", "completed") // its consumer is done: a2 is due
			} else {
				b.event(t, "b1", "sub_B", base, 1) // the stream goes on, no NOTIFY
			}
			c.wait(t, 1, poll/3) // before the poll: the follow-ups found it
		})
	}
}

// A limited handler is claimed in a loop of its own, apart from the ordered
// handlers: while every claim of an ordered handler fails (here a database
// without 031's claim_handler_jobs), it goes on at its rate (20/s), not at
// the failing claim's backoff.
func TestLimitedHandlerGoesOnWhileOrderedClaimsFail(t *testing.T) {
	t.Parallel()
	b := setup(t, "lim")
	b.ordered(t, "block")
	b.limits(t, "lim", "rate_per_second = 20, burst = 1, tokens = 1, refilled_at = now()")
	if _, err := b.admin.Exec(context.Background(), `DROP FUNCTION webhook_ingress.claim_handler_jobs(text, bigint, text, interval)`); err != nil {
		t.Fatal(err)
	}
	c := b.collect(t, "lim")
	b.insertEvents(t, 60)
	s := b.newStreamer(t, streamer.Config{LeaseDuration: time.Minute, PollInterval: 200 * time.Millisecond})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	// At 20/s its 60 jobs take 3 s (under a loaded machine's race detector
	// up to ~15 s). Paced by the failing claim's backoff (up to 5 s a round,
	// one job each, burst 1) as before, they took about 5 minutes: 5 came in
	// the first 3 s.
	c.wait(t, 60, time.Minute)
}
