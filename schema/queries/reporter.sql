-- Queries of the metadata reporter (package reporter), run as
-- webhook_streamer. They read attempt metadata only: never job_attempts.error,
-- jobs.last_error, or anything of events.

-- name: ReporterAttemptsAfter
-- Up to $2 finished attempts with an id above the cursor $1, oldest id first,
-- with their job's provider and event type (sent only when the operator opts
-- in).
SELECT a.id, a.job_id, a.attempt, a.outcome, coalesce(a.error_class, ''),
       a.started_at, a.finished_at, coalesce(a.duration_ms, 0), j.provider, j.event_type
FROM webhook_ingress.job_attempts a
JOIN webhook_ingress.jobs j ON j.id = a.job_id AND j.event_received_at = a.event_received_at
WHERE a.id > $1
ORDER BY a.id
LIMIT $2

-- name: ReporterAttemptsByID
-- The attempts among ids $1 that are visible now: ids the cursor passed while
-- their transaction had not yet committed.
SELECT a.id, a.job_id, a.attempt, a.outcome, coalesce(a.error_class, ''),
       a.started_at, a.finished_at, coalesce(a.duration_ms, 0), j.provider, j.event_type
FROM webhook_ingress.job_attempts a
JOIN webhook_ingress.jobs j ON j.id = a.job_id AND j.event_received_at = a.event_received_at
WHERE a.id = ANY($1::bigint[])
ORDER BY a.id
