-- 002_operator: the operator role behind `inlet events`, `inlet dlq`,
-- `inlet replay` and the admin HTTP API, and the 'replayed' attempt marker.
--
-- Operators read the whole log (bodies and headers included: they work inside
-- the data plane) and may put jobs back in the queue, but never change an
-- event. Runs inside one transaction under the migrator's advisory lock; the
-- role is cluster-wide, so it is created only when missing.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'webhook_operator') THEN
        CREATE ROLE webhook_operator NOLOGIN;
    END IF;
END
$$;

-- A replay leaves a row in the attempt history: who put the job back and when
-- (see the column comment below). 001 allowed only the four outcomes of a real
-- attempt.
ALTER TABLE webhook_ingress.job_attempts
    DROP CONSTRAINT job_attempts_outcome_check,
    ADD CONSTRAINT job_attempts_outcome_check
        CHECK (outcome IN ('completed', 'failed', 'dead_letter', 'lease_expired', 'replayed'));

COMMENT ON COLUMN webhook_ingress.job_attempts.outcome IS
    'completed, failed (will be retried), dead_letter (last attempt failed or the error was permanent), lease_expired (the consumer never reported; the reaper closed the attempt), replayed (not an attempt: an operator re-queued the job, or created it from the log; attempt is the attempt count before the replay, 0 for a created job, and worker_id the login role that replayed).';
COMMENT ON COLUMN webhook_ingress.jobs.attempt_count IS
    'Attempts started so far; incremented when a lease is taken. A replay sets it back to 0 so the handler gets max_attempts again; earlier attempts stay in job_attempts.';

GRANT USAGE ON SCHEMA webhook_ingress TO webhook_operator;

-- Operator: read everything (events whole, for show and re-verification).
GRANT SELECT ON webhook_ingress.events, webhook_ingress.jobs, webhook_ingress.job_attempts,
    webhook_ingress.subscriptions, webhook_ingress.schema_migrations
    TO webhook_operator;
-- Replay: create a handler's missing jobs from the log ...
GRANT INSERT (event_id, handler, provider, event_type, max_attempts)
    ON webhook_ingress.jobs TO webhook_operator;
-- ... and put existing ones back to pending: state columns only, never which
-- event or handler a job is for.
GRANT UPDATE (status, attempt_count, next_attempt_at, lease_holder_id, lease_expires_at, worker_id, last_error, last_error_class, updated_at, completed_at)
    ON webhook_ingress.jobs TO webhook_operator;
-- The 'replayed' history row; never an UPDATE or DELETE of history.
GRANT INSERT (job_id, attempt, worker_id, started_at, finished_at, outcome)
    ON webhook_ingress.job_attempts TO webhook_operator;

-- No role may change the log, whatever was granted elsewhere.
REVOKE UPDATE, DELETE, TRUNCATE ON webhook_ingress.events FROM webhook_operator;
