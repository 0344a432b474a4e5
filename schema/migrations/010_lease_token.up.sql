-- 010_lease_token: the cheaper job protocol (claim, read, finish).
--
-- Before, a delivered job cost three updates of its row (claimed by a
-- streamer, taken by a consumer, completed) and a job_attempts row for every
-- attempt. Now:
--
-- * The claim's lease token (attempt_count, attempted_at) travels in the bus
--   reference; the consumer reads the event with a read-only SELECT fenced on
--   that token, so taking an attempt writes nothing.
-- * A successful attempt is kept on the job row itself: attempt_count,
--   worker_id (the consumer), completed_at, and completed_attempt_id, an id
--   drawn from job_attempts' own sequence, so failed and successful attempts
--   share one id space (the reporter's cursor; and a replay archives the
--   success into job_attempts under that same id). job_attempts keeps one row
--   per failed attempt, expired lease and replay.
-- * The view webhook_ingress.attempts shows every finished attempt, failed
--   and successful, in job_attempts' shape, for auditors and operators (the
--   streamer, which runs the reporter, reads the two tables instead).
-- * partition_status (retention's report and retention_log.attempts) counts
--   the successes kept on job rows too, so "attempts" keeps meaning every
--   finished attempt (and replay marker) of the period.
--
-- Additive only: services of the previous version keep working side by side
-- (their take still writes worker_id, their completion still writes a
-- history row), so a rolling upgrade needs no drain.

ALTER TABLE webhook_ingress.jobs ADD COLUMN completed_attempt_id bigint;
COMMENT ON COLUMN webhook_ingress.jobs.completed_attempt_id IS
    'Id of the successful attempt (from job_attempts'' id sequence): with attempt_count, worker_id and completed_at it records the success. NULL until the job completes; a replay moves it into job_attempts under this id.';
COMMENT ON COLUMN webhook_ingress.jobs.worker_id IS
    'The consumer of the current attempt: set when it completes the job (the successful attempt''s consumer) or extends a long lease; NULL while an attempt runs otherwise.';
COMMENT ON COLUMN webhook_ingress.jobs.attempted_at IS
    'When the current (or last) attempt was leased. With attempt_count it is the lease token carried in the bus reference: every outcome is fenced on both, since attempt numbers repeat after a replay.';
COMMENT ON COLUMN webhook_ingress.jobs.completed_at IS
    'When the successful attempt was recorded; NULL unless status is completed.';
COMMENT ON TABLE webhook_ingress.job_attempts IS
    'One row per failed attempt, expired lease and replay (outcome replayed), and one per successful attempt a replay archived. A successful attempt of the current run is on its job row (completed_attempt_id); the view attempts shows both.';

-- The reporter reads successes after its cursor by this id.
CREATE INDEX idx_jobs_completed_attempt ON webhook_ingress.jobs (completed_attempt_id)
    WHERE completed_attempt_id IS NOT NULL;
COMMENT ON INDEX webhook_ingress.idx_jobs_completed_attempt IS
    'Successful attempts by id, for the reporter''s cursor. Partial: unfinished jobs are not in it.';

GRANT UPDATE (completed_attempt_id) ON webhook_ingress.jobs TO webhook_worker, webhook_operator;
GRANT USAGE ON SEQUENCE webhook_ingress.job_attempts_id_seq TO webhook_worker;
GRANT INSERT (id) ON webhook_ingress.job_attempts TO webhook_operator;

CREATE VIEW webhook_ingress.attempts AS
SELECT a.id, a.job_id, a.event_received_at, a.attempt, a.worker_id, a.started_at, a.finished_at,
       a.outcome, a.error_class, a.error, a.duration_ms
FROM webhook_ingress.job_attempts a
UNION ALL
SELECT j.completed_attempt_id, j.id, j.event_received_at, j.attempt_count, j.worker_id,
       coalesce(j.attempted_at, j.completed_at), j.completed_at,
       'completed', NULL, NULL,
       extract(epoch FROM j.completed_at - coalesce(j.attempted_at, j.completed_at)) * 1000
FROM webhook_ingress.jobs j
WHERE j.completed_attempt_id IS NOT NULL;
COMMENT ON VIEW webhook_ingress.attempts IS
    'Every finished attempt: job_attempts'' rows and each job''s successful attempt (started_at is when it was leased). For auditors; the services read the tables.';
GRANT SELECT ON webhook_ingress.attempts TO webhook_auditor, webhook_operator;

-- Retention: a period's attempts are its job_attempts rows and the successes
-- on its job rows. Same signature, so its grants (none but the owner) stay.
CREATE OR REPLACE FUNCTION webhook_ingress.partition_status(p_start timestamptz)
    RETURNS TABLE (events bigint, min_event_id bigint, max_event_id bigint, jobs bigint, open_jobs bigint,
                   dead_letters bigint, attempts bigint, sealed_through bigint)
    LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS
$$
DECLARE
    successes bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM webhook_ingress.partitions() p WHERE p.period_start = p_start) THEN
        RAISE EXCEPTION 'no partition of webhook_ingress.events starts at %', p_start
            USING ERRCODE = 'undefined_table';
    END IF;
    EXECUTE format('SELECT count(*), min(id), max(id) FROM webhook_ingress.%I', webhook_ingress.partition_name('events', p_start))
        INTO events, min_event_id, max_event_id;
    EXECUTE format('SELECT count(*), count(*) FILTER (WHERE status IN (''pending'', ''leased'', ''failed'')), '
                   'count(*) FILTER (WHERE status = ''dead_letter''), count(completed_attempt_id) FROM webhook_ingress.%I',
                   webhook_ingress.partition_name('jobs', p_start))
        INTO jobs, open_jobs, dead_letters, successes;
    EXECUTE format('SELECT count(*) FROM webhook_ingress.%I', webhook_ingress.partition_name('job_attempts', p_start))
        INTO attempts;
    attempts := attempts + successes;
    SELECT coalesce(max(c.last_event_id), 0) INTO sealed_through FROM webhook_ingress.audit_checkpoints c;
    RETURN NEXT;
END
$$;
COMMENT ON COLUMN webhook_ingress.retention_log.attempts IS
    'Finished attempts and replay markers the period held: its job_attempts rows, and (from 010_lease_token) the successful attempts kept on its job rows.';

-- Consumer liveness -----------------------------------------------------------
-- Taking an attempt writes nothing, so an expired lease does not say whether
-- a consumer ran it. Each consumer service says every few seconds that it is
-- alive for its handlers; a streamer leases no jobs of a handler whose known
-- consumers have all gone quiet (an outage burns no attempts), and the reaper
-- counts an expired lease as an attempt only when a consumer of its handler
-- was alive after the lease began (it may have run the handler and died).
CREATE TABLE webhook_ingress.consumers (
    handler     text        NOT NULL,
    worker_id   text        NOT NULL,
    seen_at     timestamptz NOT NULL DEFAULT now(),
    alive_until timestamptz NOT NULL,
    CONSTRAINT consumers_pkey PRIMARY KEY (handler, worker_id)
);
COMMENT ON TABLE webhook_ingress.consumers IS
    'One row per (handler, consumer service): when it last said it was alive, and until when that holds. Written by consumers every few seconds; read by streamers (lease only for handlers with a live consumer, or none known) and the reaper.';
GRANT SELECT, INSERT, UPDATE, DELETE ON webhook_ingress.consumers TO webhook_worker;
GRANT SELECT ON webhook_ingress.consumers TO webhook_streamer, webhook_auditor, webhook_operator;

-- Leases by expiry, for the reaper and the streamers' in-flight count. Partial
-- on lease_expires_at IS NOT NULL, not on status = 'leased' (the same rows:
-- every statement that ends a lease clears lease_expires_at): the consumers'
-- FetchJobs and CompleteJobs find their jobs by primary key with the fence
-- status = 'leased', and an index whose predicate that fence implied let the
-- planner, under stale statistics, hash-join every lease instead of probing
-- the batch's rows (measured: the whole leased set read per batch).
DROP INDEX webhook_ingress.idx_jobs_leased;
CREATE INDEX idx_jobs_leased ON webhook_ingress.jobs (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;
COMMENT ON INDEX webhook_ingress.idx_jobs_leased IS
    'Leases by expiry (reaper, in-flight counts). Partial on lease_expires_at, which only a leased job has.';
