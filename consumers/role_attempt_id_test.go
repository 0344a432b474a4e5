package consumers_test

import (
	"context"
	"testing"

	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestConsumerRoleCannotForgeAnotherTeamsAttemptID: a consumer role cannot
// set its job's completed_attempt_id to anything but the id its completion
// draws (053).
//
// Regression test (review helper-110; fixed by 053: the text describes the
// behaviour before the fix). A per-consumer role (inlet roles create-consumer) holds UPDATE on
// jobs.completed_attempt_id (011_consumer_roles.up.sql:137-139, needed only
// because complete_jobs runs as the caller and sets it to
// nextval('job_attempts_id_seq')). Nothing checks the value written, so a
// compromised or buggy team consumer can give its own completed job the
// attempt id of ANOTHER team's attempt. Attempt ids are one id space for
// job_attempts rows and completions (010_lease_token, schema/queries/
// reporter.sql): the attempts view auditors read then shows two attempts
// under the other team's id, and the metadata reporter, whose control-plane
// idempotency key is that id ("those held already are stored once"), keeps
// only one of them — another team's attempt history is shadowed by a role
// that is supposed to reach only its own handlers' rows. (Writing a huge id
// similarly drags the reporter's cursor past every other team's later
// attempts.)
//
// Expected (DESIGN.md least privilege: "a consumer's own role reaches only
// its own handlers' jobs"; operations.md "one compromised or buggy consumer
// can touch only its own handlers"): the role cannot set completed_attempt_id
// to anything but a fresh id from the sequence; the forged UPDATE is refused.
func TestConsumerRoleCannotForgeAnotherTeamsAttemptID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.Admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('billing', 'stripe'), ('shipping', 'stripe')`); err != nil {
		t.Fatal(err)
	}
	cfg := consumerRolePool(t, b, "billing") // team A's role
	ev := b.InsertEvent(t, consumertest.EventParams{Provider: "stripe", EventType: "invoice.paid", ExternalID: "evt_forge"})
	mine, theirs := b.JobID(t, ev, "billing"), b.JobID(t, ev, "shipping")

	// Team B's job has a failed attempt on record; team A's job completed.
	var theirAttemptID int64
	if err := b.Admin.QueryRow(ctx, `
INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome, error_class, error)
SELECT id, event_received_at, 1, 'team-b', now(), now(), 'failed', 'handler_error', 'b failed' FROM webhook_ingress.jobs WHERE id = $1
RETURNING id`, theirs).Scan(&theirAttemptID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admin.Exec(ctx, `UPDATE webhook_ingress.jobs SET status = 'completed', attempt_count = 1, completed_at = now(),
  completed_attempt_id = nextval('webhook_ingress.job_attempts_id_seq'), worker_id = 'team-a' WHERE id = $1`, mine); err != nil {
		t.Fatal(err)
	}

	// As team A's role: give its own completion team B's attempt id.
	tag, err := cfg.Pool.Exec(ctx, `UPDATE webhook_ingress.jobs SET completed_attempt_id = $1 WHERE id = $2`, theirAttemptID, mine)
	if err == nil && tag.RowsAffected() == 1 {
		var n int
		var jobs []int64
		_ = b.Admin.QueryRow(ctx, `SELECT count(*), array_agg(job_id ORDER BY job_id) FROM webhook_ingress.attempts WHERE id = $1`, theirAttemptID).Scan(&n, &jobs)
		t.Fatalf("team A's consumer role rewrote its job's completed_attempt_id to team B's attempt id %d: "+
			"the attempts view now lists %d attempts under that id (jobs %v, team B's job is %d)", theirAttemptID, n, jobs, theirs)
	}
}
