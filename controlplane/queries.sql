-- Queries of the control plane. Every one is by tenant ($1): the tenant is
-- the one the request's token selected, never one the request names.

-- name: InsertAttempts
-- A batch of one tenant's records; a record already held (a resend) is kept
-- as it was. Answers how many were new; the tenant's cursor (the highest
-- attempt id held, 0 for none) and highest arrival number held (0 for none)
-- as they were before the batch: one statement, one snapshot, so they do not
-- count the batch; and the highest arrival number held after it. Every
-- record of the batch is numbered from the tenant's counter (a record
-- already held leaves its number unused), whose row lock, held until the
-- report commits, keeps a tenant's numbers in the order its reports commit:
-- a backup that holds a report's records holds every earlier report's. A
-- reporter that had a higher attempt id or arrival number acknowledged
-- learns that records were lost (this database restored from a backup) and
-- sends them again; the arrival number also falls when the records lost
-- were stored under ids below the cursor (attempts that committed late).
WITH before AS (
    SELECT coalesce(max(attempt_id), 0) AS cursor, coalesce(max(arrival), 0) AS arrival
    FROM control_plane.attempts WHERE tenant = $1
), numbered AS (
    INSERT INTO control_plane.arrivals AS a (tenant, last)
    SELECT $1, cardinality($2::bigint[]) WHERE cardinality($2::bigint[]) > 0
    ON CONFLICT (tenant) DO UPDATE SET last = a.last + excluded.last
    RETURNING a.last - cardinality($2::bigint[]) AS base
), stored AS (
    INSERT INTO control_plane.attempts (tenant, attempt_id, job, outcome, attempt, duration_ms, error_class,
                                        started_at, finished_at, provider, event_type, arrival)
    SELECT $1, r.attempt_id, r.job, r.outcome, r.attempt, r.duration_ms, nullif(r.error_class, ''),
           r.started_at, r.finished_at, nullif(r.provider, ''), nullif(r.event_type, ''), n.base + r.ord
    FROM unnest($2::bigint[], $3::text[], $4::text[], $5::int[], $6::float8[], $7::text[],
                $8::timestamptz[], $9::timestamptz[], $10::text[], $11::text[]) WITH ORDINALITY
         AS r (attempt_id, job, outcome, attempt, duration_ms, error_class, started_at, finished_at, provider, event_type, ord)
    CROSS JOIN numbered n
    ON CONFLICT (tenant, attempt_id) DO NOTHING
    RETURNING arrival
)
SELECT (SELECT count(*) FROM stored), b.cursor, b.arrival, greatest(b.arrival, (SELECT max(arrival) FROM stored))
FROM before b

-- name: Cursor
-- The highest attempt id held for the tenant, where its reporter resumes,
-- and its highest arrival number held (InsertAttempts); 0 for none.
SELECT coalesce(max(attempt_id), 0), coalesce(max(arrival), 0) FROM control_plane.attempts WHERE tenant = $1

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

-- name: LockHolders
-- The sessions, other than this one, holding a lock on a table or index of
-- schema control_plane: read after a migration's wait for one failed (so
-- the one that held it may be gone). A role without pg_read_all_stats sees
-- no state or transaction start of other roles' sessions; those stay empty
-- then.
SELECT l.pid::int,
       coalesce(a.application_name, '')::text,
       coalesce(a.usename::text, '')::text,
       coalesce(a.state, '')::text,
       coalesce(extract(epoch FROM clock_timestamp() - a.xact_start), -1)::float8,
       string_agg(DISTINCT l.mode, ',' ORDER BY l.mode)::text
FROM pg_catalog.pg_locks l
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.granted
  AND l.pid <> pg_catalog.pg_backend_pid()
  AND l.locktype = 'relation'
  AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
  AND l.relation IN (SELECT c.oid FROM pg_catalog.pg_class c
                     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'control_plane')
GROUP BY l.pid, a.application_name, a.usename, a.state, a.xact_start
ORDER BY a.xact_start NULLS LAST, l.pid
LIMIT 5;
