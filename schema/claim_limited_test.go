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

const claimLimitedFunc = "webhook_ingress.claim_limited_jobs(text, bigint, text, interval)"

// Only webhook_streamer may execute claim_limited_jobs (033), and it can
// run the streamer's claim with it; PUBLIC holds nothing.
func TestClaimLimitedJobsExecutableByStreamerOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	perConsumer := newConsumerRole(t, pool, "h")
	for _, role := range append(slices.Clone(matrixRoles), perConsumer) {
		var may bool
		if err := pool.QueryRow(ctx, `SELECT has_function_privilege($1, $2, 'EXECUTE')`, role, claimLimitedFunc).Scan(&may); err != nil {
			t.Fatal(err)
		}
		if want := role == "webhook_streamer"; may != want {
			t.Errorf("%s may execute claim_limited_jobs: %v, want %v", role, may, want)
		}
	}
	var public bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_proc p, aclexplode(p.proacl) a
		WHERE p.oid = $1::regprocedure AND a.grantee = 0)`, claimLimitedFunc).Scan(&public); err != nil || public {
		t.Errorf("PUBLIC holds a privilege on claim_limited_jobs: %v, %v", public, err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, order_key) VALUES ('lim', 'stripe', 'data.object.id')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.handler_limits (handler, rate_per_second, burst, tokens, max_in_flight) VALUES ('lim', 10, 10, 10, 5)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_' || n, ('{"data":{"object":{"id":"k' || n || '"}}}')::bytea, true FROM generate_series(1, 3) n`); err != nil {
		t.Fatal(err)
	}
	err := asRole(t, pool, "webhook_streamer", func(tx pgx.Tx) error {
		if err := queries.New(tx).LockHandlerLimits(ctx, "lim"); err != nil {
			return err
		}
		rows, err := queries.New(tx).ClaimLimitedJobs(ctx, queries.ClaimLimitedJobsParams{Handler: "lim", BatchSize: 100, LeaseHolder: "s", LeaseFor: time.Minute})
		if err == nil && len(rows) != 3 {
			t.Errorf("streamer's limited claim leased %d jobs, want 3", len(rows))
		}
		return err
	})
	if err != nil {
		t.Fatalf("limited claim as webhook_streamer: %v", err)
	}
}

// With a quota of 0 (max_in_flight reached: one job leased first) the old statement still
// refilled the bucket: tokens to now, refilled_at now.
func TestClaimLimitedRefillsTheBucketWhenTheQuotaIsZero(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, sql := range []string{
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('lim', 'stripe')`,
		`INSERT INTO webhook_ingress.handler_limits (handler, rate_per_second, burst, tokens, refilled_at, max_in_flight) VALUES ('lim', 1, 100, 0, now() - interval '10 seconds', 1)`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 SELECT 'stripe', 'stripe', 'evt_' || n, '{}', true FROM generate_series(1, 3) n`,
		`UPDATE webhook_ingress.jobs SET status = 'leased', lease_holder_id = 'x', lease_expires_at = now() + interval '1 minute', attempt_count = 1
		 WHERE id = (SELECT min(id) FROM webhook_ingress.jobs WHERE handler = 'lim')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := queries.New(tx).LockHandlerLimits(ctx, "lim"); err != nil {
		t.Fatal(err)
	}
	rows, err := queries.New(tx).ClaimLimitedJobs(ctx, queries.ClaimLimitedJobsParams{Handler: "lim", BatchSize: 100, LeaseHolder: "s", LeaseFor: time.Minute})
	if err != nil || len(rows) != 0 {
		t.Fatalf("claim: %v, %d leased, want none", err, len(rows))
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var tokens float64
	var age time.Duration
	if err := pool.QueryRow(ctx, `SELECT tokens, now() - refilled_at FROM webhook_ingress.handler_limits WHERE handler = 'lim'`).Scan(&tokens, &age); err != nil {
		t.Fatal(err)
	}
	if tokens < 9.5 || age > 5*time.Second {
		t.Fatalf("after a claim with quota 0: tokens %.2f, refilled %v ago; want ~10 tokens refilled now", tokens, age)
	}
}

// claim_jobs (both its walk and its claim by handler) and
// claim_handler_jobs pass over a handler with a limits row whatever the
// streamer names, leaving it to claim_limited_jobs (061): a streamer's list
// of limited handlers is a recount old, and a consumer registering limits in
// between had a batch leased whatever the limits said
// (streamer TestLimitsRegisteredBetweenRecountsHold). Other handlers' jobs
// are leased as before.
func TestClaimsPassOverALimitedHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, q := range []string{
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('lim', 'stripe'), ('free', 'stripe')`,
		`INSERT INTO webhook_ingress.handler_limits (handler, max_in_flight) VALUES ('lim', 1)`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 SELECT 'stripe', 'stripe', 'evt_' || i, '{}', true FROM generate_series(1, 5) i`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	claims := map[string]func(q *queries.Queries) ([]string, error){
		"walk": func(q *queries.Queries) ([]string, error) {
			rows, err := q.ClaimJobs(ctx, queries.ClaimJobsParams{LeaseHolder: "t", LeaseFor: time.Minute, FullHandlers: []string{}, BatchSize: 100})
			return handlersOf(rows, func(r queries.ClaimJobsRow) string { return r.Handler }), err
		},
		"by handler": func(q *queries.Queries) ([]string, error) {
			rows, err := q.ClaimJobs(ctx, queries.ClaimJobsParams{LeaseHolder: "t", LeaseFor: time.Minute, FullHandlers: []string{"other"}, BatchSize: 100})
			return handlersOf(rows, func(r queries.ClaimJobsRow) string { return r.Handler }), err
		},
		"handler apart": func(q *queries.Queries) ([]string, error) {
			var got []string
			for _, h := range []string{"lim", "free"} {
				rows, err := q.ClaimHandlerJobs(ctx, queries.ClaimHandlerJobsParams{Handler: h, LeaseHolder: "t", LeaseFor: time.Minute, BatchSize: 100})
				if err != nil {
					return nil, err
				}
				got = append(got, handlersOf(rows, func(r queries.ClaimHandlerJobsRow) string { return r.Handler })...)
			}
			return got, nil
		},
	}
	for path, claim := range claims {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, err := claim(queries.New(tx))
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatalf("claim (%s): %v", path, err)
		}
		if n := len(got); n != 5 || slices.Contains(got, "lim") {
			t.Errorf("claim (%s) leased jobs of %v; want free's 5 and none of lim's (limited: claim_limited_jobs's)", path, got)
		}
	}
}

func handlersOf[R any](rows []R, handler func(R) string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, handler(r))
	}
	return out
}
