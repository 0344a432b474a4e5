-- Queries of the control plane. Every one is by tenant ($1): the tenant is
-- the one the request's token selected, never one the request names.

-- name: InsertAttempts
-- A batch of one tenant's records; a record already held (a resend) is kept
-- as it was. Answers how many were new and the tenant's cursor (the highest
-- attempt id held, 0 for none) as it was before the batch: one statement,
-- one snapshot, so the cursor does not count the batch. A reporter that had
-- a higher id acknowledged learns from it that records were lost (this
-- database restored from a backup) and sends them again.
WITH before AS (
    SELECT coalesce(max(attempt_id), 0) AS cursor FROM control_plane.attempts WHERE tenant = $1
), stored AS (
    INSERT INTO control_plane.attempts (tenant, attempt_id, job, outcome, attempt, duration_ms, error_class,
                                        started_at, finished_at, provider, event_type)
    SELECT $1, r.attempt_id, r.job, r.outcome, r.attempt, r.duration_ms, nullif(r.error_class, ''),
           r.started_at, r.finished_at, nullif(r.provider, ''), nullif(r.event_type, '')
    FROM unnest($2::bigint[], $3::text[], $4::text[], $5::int[], $6::float8[], $7::text[],
                $8::timestamptz[], $9::timestamptz[], $10::text[], $11::text[])
         AS r (attempt_id, job, outcome, attempt, duration_ms, error_class, started_at, finished_at, provider, event_type)
    ON CONFLICT (tenant, attempt_id) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM stored), (SELECT cursor FROM before)

-- name: Cursor
-- The highest attempt id held for the tenant, 0 for none.
SELECT coalesce(max(attempt_id), 0) FROM control_plane.attempts WHERE tenant = $1

-- name: JobsByStatus
-- Jobs counted by the outcome of their latest reported attempt.
SELECT outcome, count(*)
FROM (SELECT DISTINCT ON (job) job, outcome
      FROM control_plane.attempts
      WHERE tenant = $1
      ORDER BY job, attempt_id DESC) latest
GROUP BY outcome
ORDER BY outcome

-- name: FailureClasses
-- Attempts that failed, by error class.
SELECT error_class, count(*)
FROM control_plane.attempts
WHERE tenant = $1 AND error_class IS NOT NULL
GROUP BY error_class
ORDER BY count(*) DESC, error_class

-- name: DurationPercentiles
-- Attempt count and the 50th, 90th and 99th percentile durations of real
-- attempts (replays are not attempts).
SELECT count(*),
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms), 0),
       coalesce(percentile_cont(0.9) WITHIN GROUP (ORDER BY duration_ms), 0),
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY duration_ms), 0),
       max(received_at)
FROM control_plane.attempts
WHERE tenant = $1 AND outcome <> 'replayed'
