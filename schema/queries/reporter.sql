-- Queries of the metadata reporter (package reporter), run as
-- webhook_streamer. They read attempt metadata only: never job_attempts.error,
-- jobs.last_error, or anything of events.
--
-- A finished attempt is in one of two places (010_lease_token), under one id
-- space (job_attempts' sequence): a job_attempts row (failed, dead_letter,
-- lease_expired, replayed, and a success a replay archived), or the job row
-- of a completed job (completed_attempt_id, attempt_count, attempted_at,
-- completed_at). Both are read in one statement, so one snapshot: a replay
-- moves a success from the job row to job_attempts under the same id in one
-- transaction, and a read sees it in exactly one of the two. The streamer
-- does not read the view webhook_ingress.attempts (not granted); the tables
-- let each side use its own index for the cursor.
--
-- A success's started_at is when its lease was taken (attempted_at, the
-- database's clock) and its finished_at completed_at; updated_at stands in
-- only for a row completed by hand without them, so a NULL never stops the
-- reporter. Nor does a time that is not finite (a row a consumer outside the
-- SDK completed with 'infinity'): finite_or_zero (050) reads it as the zero
-- time, which the reporter skips as an invalid record, with the ids after it
-- still reported; read as is, it failed every read from that cursor on.

-- name: ReporterAttemptsAfter :many
-- Up to batch_size finished attempts with an id above the cursor after_id,
-- oldest id first, with their job's provider and event type (sent only when
-- the operator opts in). Each side is limited before the merge, so each reads
-- at most batch_size rows by its index (job_attempts' primary key,
-- idx_jobs_completed_attempt).
SELECT id, job_id, attempt, outcome, error_class, started_at, finished_at, duration_ms, provider, event_type FROM (
    (SELECT a.id, a.job_id, a.attempt, a.outcome, coalesce(a.error_class, '') AS error_class,
            webhook_ingress.finite_or_zero(a.started_at) AS started_at, webhook_ingress.finite_or_zero(a.finished_at) AS finished_at, coalesce(a.duration_ms, 0) AS duration_ms, j.provider, j.event_type
     FROM webhook_ingress.job_attempts a
     JOIN webhook_ingress.jobs j ON j.id = a.job_id AND j.event_received_at = a.event_received_at
     WHERE a.id > sqlc.arg(after_id)
     ORDER BY a.id
     LIMIT sqlc.arg(batch_size)::bigint)
    UNION ALL
    (SELECT j.completed_attempt_id, j.id, j.attempt_count, 'completed', '',
            webhook_ingress.finite_or_zero(coalesce(j.attempted_at, j.completed_at, j.updated_at)),
            webhook_ingress.finite_or_zero(coalesce(j.completed_at, j.updated_at)),
            coalesce(extract(epoch FROM webhook_ingress.finite_or_zero(j.completed_at)
                                       - webhook_ingress.finite_or_zero(coalesce(j.attempted_at, j.completed_at))) * 1000, 0)::float8,
            j.provider, j.event_type
     FROM webhook_ingress.jobs j
     WHERE j.completed_attempt_id > sqlc.arg(after_id)
     ORDER BY j.completed_attempt_id
     LIMIT sqlc.arg(batch_size)::bigint)
) finished
ORDER BY 1
LIMIT sqlc.arg(batch_size)::bigint;

-- name: ReporterAttemptsByID :many
-- The attempts among ids that are visible now: ids the cursor passed while
-- their transaction had not yet committed (a failure's history row, or a
-- completion of the job row), looked for in both places.
SELECT id, job_id, attempt, outcome, error_class, started_at, finished_at, duration_ms, provider, event_type FROM (
    SELECT a.id, a.job_id, a.attempt, a.outcome, coalesce(a.error_class, '') AS error_class,
           webhook_ingress.finite_or_zero(a.started_at) AS started_at, webhook_ingress.finite_or_zero(a.finished_at) AS finished_at, coalesce(a.duration_ms, 0) AS duration_ms, j.provider, j.event_type
    FROM webhook_ingress.job_attempts a
    JOIN webhook_ingress.jobs j ON j.id = a.job_id AND j.event_received_at = a.event_received_at
    WHERE a.id = ANY(sqlc.arg(ids)::bigint[])
    UNION ALL
    SELECT j.completed_attempt_id, j.id, j.attempt_count, 'completed', '',
           webhook_ingress.finite_or_zero(coalesce(j.attempted_at, j.completed_at, j.updated_at)),
           webhook_ingress.finite_or_zero(coalesce(j.completed_at, j.updated_at)),
           coalesce(extract(epoch FROM webhook_ingress.finite_or_zero(j.completed_at)
                                      - webhook_ingress.finite_or_zero(coalesce(j.attempted_at, j.completed_at))) * 1000, 0)::float8,
           j.provider, j.event_type
    FROM webhook_ingress.jobs j
    WHERE j.completed_attempt_id = ANY(sqlc.arg(ids)::bigint[])
) finished
ORDER BY 1;
