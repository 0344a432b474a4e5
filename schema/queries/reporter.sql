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

-- name: ReporterAttemptsInRuns :many
-- The finished attempts, oldest id first and at most batch_size, whose ids
-- fall in one of the runs lo[i]..hi[i] (the reporter's gaps: ids the cursor
-- passed while their transaction had not committed), looked for in both
-- places. One statement for every run, however many: per run and place one
-- index range scan (job_attempts' primary key, idx_jobs_completed_attempt)
-- limited to batch_size rows, so a run costs the same however long it is;
-- only then, for at most batch_size attempts, the join with jobs (per row,
-- by its key), so no round reads jobs beyond the rows it returns. The limit
-- per run is the statement's own, so the rows returned are the lowest ids of
-- all runs: fewer than batch_size, and every run was looked at in full;
-- batch_size, and every id up to the last one returned was.
SELECT id, job_id, attempt, outcome, error_class, started_at, finished_at, duration_ms, provider, event_type FROM (
    SELECT a.id, a.job_id, a.attempt, a.outcome, coalesce(a.error_class, '') AS error_class,
           webhook_ingress.finite_or_zero(a.started_at) AS started_at, webhook_ingress.finite_or_zero(a.finished_at) AS finished_at, coalesce(a.duration_ms, 0) AS duration_ms, j.provider, j.event_type
    FROM (
        SELECT a.id, a.job_id, a.event_received_at, a.attempt, a.outcome, a.error_class, a.started_at, a.finished_at, a.duration_ms
        FROM (SELECT (sqlc.arg(lo)::bigint[])[i] AS lo, (sqlc.arg(hi)::bigint[])[i] AS hi FROM generate_subscripts(sqlc.arg(lo)::bigint[], 1) AS i) run
        CROSS JOIN LATERAL (
            SELECT a.id, a.job_id, a.event_received_at, a.attempt, a.outcome, a.error_class, a.started_at, a.finished_at, a.duration_ms
            FROM webhook_ingress.job_attempts a
            WHERE a.id BETWEEN run.lo AND run.hi
            ORDER BY a.id
            LIMIT sqlc.arg(batch_size)::bigint) a
        ORDER BY a.id
        LIMIT sqlc.arg(batch_size)::bigint) a
    JOIN webhook_ingress.jobs j ON j.id = a.job_id AND j.event_received_at = a.event_received_at
    UNION ALL
    SELECT c.id, c.job_id, c.attempt, 'completed', '',
           webhook_ingress.finite_or_zero(coalesce(c.attempted_at, c.completed_at, c.updated_at)),
           webhook_ingress.finite_or_zero(coalesce(c.completed_at, c.updated_at)),
           coalesce(extract(epoch FROM webhook_ingress.finite_or_zero(c.completed_at)
                                      - webhook_ingress.finite_or_zero(coalesce(c.attempted_at, c.completed_at))) * 1000, 0)::float8,
           c.provider, c.event_type
    FROM (SELECT (sqlc.arg(lo)::bigint[])[i] AS lo, (sqlc.arg(hi)::bigint[])[i] AS hi FROM generate_subscripts(sqlc.arg(lo)::bigint[], 1) AS i) run
    CROSS JOIN LATERAL (
        SELECT j.completed_attempt_id AS id, j.id AS job_id, j.attempt_count AS attempt, j.attempted_at, j.completed_at, j.updated_at, j.provider, j.event_type
        FROM webhook_ingress.jobs j
        WHERE j.completed_attempt_id BETWEEN run.lo AND run.hi
        ORDER BY j.completed_attempt_id
        LIMIT sqlc.arg(batch_size)::bigint) c
) finished
ORDER BY 1
LIMIT sqlc.arg(batch_size)::bigint;

-- name: ReporterAdvanceAttemptIDs :one
-- Moves job_attempts' id sequence past the control plane's cursor when it is
-- behind it (the database was restored from a backup, or is new under the
-- same tenant token: the next attempts would draw ids the control plane
-- holds from the lost timeline), never lowering it; returns the last id
-- drawn before, 0 for none. webhook_streamer holds nothing on the sequence:
-- the function (072) is SECURITY DEFINER and takes the value only.
SELECT webhook_ingress.reporter_advance_attempt_ids(sqlc.arg(past)::bigint)::bigint AS drawn;
