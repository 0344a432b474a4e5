package admin_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/admin"
)

// TestDLQHoldingAgreesWithTheClaim: an ordered handler whose config changed
// (its old patterns' subscription disabled, as Register leaves it) with a
// dead-lettered head of a key. What `inlet dlq list` says the dead letter
// holds back is what the streamer's claim holds back, and the live (enabled)
// subscription's order policy decides both. Before 027_order_policy_enabled
// the leftover disabled row decided too: the listing said HOLDS BACK 1 while
// the claim leased that job (old skip, live block), or the other way round.
func TestDLQHoldingAgreesWithTheClaim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		old, live string // order policies: the disabled subscription's, the enabled one's
		held      bool
	}{
		{old: "skip", live: "block", held: true},
		{old: "block", live: "skip", held: false},
	} {
		t.Run(tc.old+" then "+tc.live, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			// The old config, on invoice.*, disabled when the patterns changed.
			b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, order_key, order_policy, enabled)
				VALUES ('billing', 'stripe', 'invoice.*', 3, 'header:X-Entity', $1, false)`, tc.old)
			// The live config, on *.
			b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, order_key, order_policy)
				VALUES ('billing', 'stripe', '*', 3, 'header:X-Entity', $1)`, tc.live)
			old := time.Now().Add(-time.Minute)
			e1 := b.insert(t, event{source: "stripe", id: "evt_1", eventType: "invoice.paid", body: []byte("{}"),
				headers: http.Header{"X-Entity": {"cus_a"}}, receivedAt: old})
			e2 := b.insert(t, event{source: "stripe", id: "evt_2", eventType: "invoice.paid", body: []byte("{}"),
				headers: http.Header{"X-Entity": {"cus_a"}}, receivedAt: old.Add(time.Second)})
			j1, j2 := b.jobID(t, e1, "billing"), b.jobID(t, e2, "billing")
			b.deadLetter(t, j1, 3, "permanent")

			page, err := admin.ListDeadLetters(ctx, b.op, admin.DeadLetterFilter{Handler: "billing"})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.DeadLetters) != 1 || page.DeadLetters[0].JobID != j1 {
				t.Fatalf("dead letters %+v, want job %d only", page.DeadLetters, j1)
			}
			holding := page.DeadLetters[0].Holding

			// The claim as the streamer runs it, rolled back.
			tx, err := b.super.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, "SET LOCAL ROLE webhook_streamer"); err != nil {
				t.Fatal(err)
			}
			rows, _ := tx.Query(ctx, `SELECT id FROM webhook_ingress.claim_jobs('{}'::text[], 10, 'test', interval '1 minute', NULL::interval)`)
			leased, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
			claimHeld := !slices.Contains(leased, j2)

			if (holding > 0) != claimHeld {
				t.Fatalf("DLQ says dead letter %d holds back %d job(s), but the claim leased %v (job %d is the later one of its key): they disagree",
					j1, holding, leased, j2)
			}
			if claimHeld != tc.held {
				t.Fatalf("job %d held back %t (DLQ holding %d, claim leased %v), want %t: the live subscription says %s",
					j2, claimHeld, holding, leased, tc.held, tc.live)
			}
		})
	}
}
