package schema_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestOrderPolicyComesFromEnabledSubscriptions dead-letters the head of an
// ordered handler's key, changes the handler's config as consumers.Register
// does (its statements: UpsertSubscription, then DisableOtherSubscriptions)
// or switches the handler off as `inlet subscriptions disable` does, and
// checks that every claim (claim_jobs' walk and its claim by handler,
// ClaimLimitedJobs; as webhook_streamer) and the DLQ listing (as
// webhook_operator and webhook_auditor) agree on whether the dead letter
// holds its key's later job back, and that the live (enabled) config
// decides. Before 027_order_policy_enabled a disabled subscription left by a
// config change decided too: skip on invoice.* then block on * had the
// claims lease the later job while the listing said it was held.
func TestOrderPolicyComesFromEnabledSubscriptions(t *testing.T) {
	t.Parallel()
	type config struct {
		policy   string
		patterns []string // event type patterns of provider stripe
	}
	cases := []struct {
		name string
		// configs are registered in turn, the events stored after the first.
		configs []config
		off     bool // then every subscription of the handler switched off
		held    bool
	}{
		{name: "block", configs: []config{{"block", []string{"*"}}}, held: true},
		{name: "skip", configs: []config{{"skip", []string{"*"}}}, held: false},
		{name: "skip on invoice.* then block on *", configs: []config{{"skip", []string{"invoice.*"}}, {"block", []string{"*"}}}, held: true},
		{name: "block on invoice.* then skip on *", configs: []config{{"block", []string{"invoice.*"}}, {"skip", []string{"*"}}}, held: false},
		{name: "skip then block, same pattern", configs: []config{{"skip", []string{"*"}}, {"block", []string{"*"}}}, held: true},
		// Switched off: its jobs already created still run, under the
		// policy its rows said.
		{name: "block, switched off", configs: []config{{"block", []string{"*"}}}, off: true, held: true},
		{name: "skip, switched off", configs: []config{{"skip", []string{"*"}}}, off: true, held: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.NewPool(t)
			q := queries.New(pool)
			register := func(c config) {
				t.Helper()
				key := "data.object.id"
				providers := make([]string, len(c.patterns))
				for i, p := range c.patterns {
					providers[i] = "stripe"
					if _, err := q.UpsertSubscription(ctx, queries.UpsertSubscriptionParams{Handler: "o", ProviderPattern: "stripe",
						EventTypePattern: p, MaxAttempts: 3, OrderKey: &key, OrderPolicy: c.policy}); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := q.DisableOtherSubscriptions(ctx, queries.DisableOtherSubscriptionsParams{Handler: "o",
					Column2: providers, Column3: c.patterns}); err != nil {
					t.Fatal(err)
				}
			}
			exec := func(sql string, args ...any) {
				t.Helper()
				if _, err := pool.Exec(ctx, sql, args...); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			event := func(id string, minute int) int64 {
				t.Helper()
				body := `{"id":"` + id + `","data":{"object":{"id":"cus_a"}}}`
				exec(`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, payload, occurred_at, signature_verified)
					VALUES ('stripe', 'stripe', $1, 'invoice.paid', convert_to($2, 'UTF8'), $2::jsonb, '2026-01-01'::timestamptz + make_interval(mins => $3), true)`,
					id, body, minute)
				var job int64
				if err := pool.QueryRow(ctx, `SELECT j.id FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
					WHERE e.external_event_id = $1 AND j.handler = 'o' AND j.order_key = 'cus_a'`, id).Scan(&job); err != nil {
					t.Fatalf("job of %s: %v", id, err)
				}
				return job
			}

			register(tc.configs[0])
			head, later := event("e1", 1), event("e2", 2)
			exec(`UPDATE webhook_ingress.jobs SET status = 'dead_letter', attempt_count = 3, last_error_class = 'permanent' WHERE id = $1`, head)
			for _, c := range tc.configs[1:] {
				register(c)
			}
			if tc.off {
				if n, err := q.AdminSetSubscriptionsEnabled(ctx, queries.AdminSetSubscriptionsEnabledParams{Handler: "o", Enabled: false}); err != nil || n == 0 {
					t.Fatalf("switch handler o off: %d rows, %v", n, err)
				}
			}
			claims := map[string]func(q *queries.Queries) ([]int64, error){
				"walk": func(q *queries.Queries) ([]int64, error) {
					rows, err := q.ClaimJobs(ctx, queries.ClaimJobsParams{LeaseHolder: "test", LeaseFor: time.Minute, FullHandlers: []string{}, BatchSize: 100})
					return ids(rows, func(r queries.ClaimJobsRow) int64 { return r.ID }), err
				},
				"by handler": func(q *queries.Queries) ([]int64, error) {
					rows, err := q.ClaimJobs(ctx, queries.ClaimJobsParams{LeaseHolder: "test", LeaseFor: time.Minute, FullHandlers: []string{"other"}, BatchSize: 100})
					return ids(rows, func(r queries.ClaimJobsRow) int64 { return r.ID }), err
				},
				"limited": func(q *queries.Queries) ([]int64, error) {
					rows, err := q.ClaimLimitedJobs(ctx, queries.ClaimLimitedJobsParams{Handler: "o", LeaseHolder: "test", LeaseFor: time.Minute, BatchSize: 100})
					return ids(rows, func(r queries.ClaimLimitedJobsRow) int64 { return r.ID }), err
				},
			}
			for path, claim := range claims {
				// ClaimLimitedJobs claims a handler with a limits row (no
				// limit here), which the other claims pass over (061).
				if path == "limited" {
					exec(`INSERT INTO webhook_ingress.handler_limits (handler) VALUES ('o')`)
				} else {
					exec(`DELETE FROM webhook_ingress.handler_limits WHERE handler = 'o'`)
				}
				if err := asRole(t, pool, "webhook_streamer", func(tx pgx.Tx) error {
					leased, err := claim(queries.New(tx))
					if err != nil {
						return err
					}
					if got := !slices.Contains(leased, later); got != tc.held {
						t.Errorf("claim (%s) leased %v: later job %d held back %t, want %t", path, leased, later, got, tc.held)
					}
					return nil
				}); err != nil {
					t.Fatalf("claim (%s) as webhook_streamer: %v", path, err)
				}
			}
			want := int64(0)
			if tc.held {
				want = 1
			}
			for _, role := range []string{"webhook_operator", "webhook_auditor"} {
				if err := asRole(t, pool, role, func(tx pgx.Tx) error {
					page, err := queries.New(tx).AdminListDeadLetters(ctx, queries.AdminListDeadLettersParams{Handler: "o", PageSize: 10})
					if err != nil {
						return err
					}
					if len(page) != 1 || page[0].ID != head || page[0].Holding != want {
						var got []int64
						for _, d := range page {
							got = append(got, d.ID, d.Holding)
						}
						t.Errorf("DLQ as %s: (dead letter, holding) %v, want (%d, %d)", role, got, head, want)
					}
					return nil
				}); err != nil {
					t.Fatalf("DLQ as %s: %v", role, err)
				}
			}
		})
	}
}
