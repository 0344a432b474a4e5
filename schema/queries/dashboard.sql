-- Queries of the operator dashboard (package dashboard, served on the admin
-- listener), run as webhook_operator in read-only transactions. Everything
-- else the dashboard shows (events, dead letters, replay) goes through package
-- admin and its queries. Times are passed in by the caller, so one page agrees
-- with itself and tests can fix the clock.

-- name: DashboardEventRates :many
-- Events per source per bucket: `buckets` buckets of bucket_seconds seconds
-- from since, for every source of sources and every other source with an
-- event in the window, zero filled (one row per source and bucket, buckets in order). The range on
-- received_at prunes the events partitions to the window.
WITH buckets AS (
    SELECT b, (sqlc.arg(since)::timestamptz + b * sqlc.arg(bucket_seconds)::integer * interval '1 second')::timestamptz AS starts_at
    FROM generate_series(0, sqlc.arg(buckets)::integer - 1) AS b
), counts AS (
    SELECT provider,
           floor(extract(epoch FROM received_at - sqlc.arg(since)::timestamptz) / sqlc.arg(bucket_seconds)::integer)::integer AS b,
           count(*) AS n
    FROM webhook_ingress.events
    WHERE received_at >= sqlc.arg(since)::timestamptz
      AND received_at < sqlc.arg(since)::timestamptz + sqlc.arg(buckets)::integer * sqlc.arg(bucket_seconds)::integer * interval '1 second'
    GROUP BY 1, 2
), sources AS (
    SELECT unnest(sqlc.arg(sources)::text[]) AS provider
    UNION
    SELECT provider FROM counts
)
SELECT s.provider::text AS provider, bk.starts_at, coalesce(c.n, 0) AS events
FROM sources s
CROSS JOIN buckets bk
LEFT JOIN counts c ON c.provider = s.provider AND c.b = bk.b
ORDER BY s.provider, bk.b;

-- name: DashboardLastSeen :many
-- When each source of sources last received an event (seen false: never);
-- what the dashboard shows when no silence detector is configured. max() per
-- source reads the (provider, event_type, received_at) index. (seen and a
-- coalesced last_seen rather than a NULL: sqlc cannot type a nullable
-- computed column.)
SELECT s.provider::text AS provider, (l.last_seen IS NOT NULL)::boolean AS seen,
       coalesce(l.last_seen, 'epoch')::timestamptz AS last_seen
FROM unnest(sqlc.arg(sources)::text[]) WITH ORDINALITY AS s(provider, n)
CROSS JOIN LATERAL (SELECT max(e.received_at) AS last_seen FROM webhook_ingress.events e WHERE e.provider = s.provider) l
ORDER BY s.n;

-- name: DashboardHandlers :many
-- Per handler (every handler with a subscription, an unfinished job or an
-- attempt since failures_since): its unfinished jobs by status; the lag, now
-- minus the due time of its oldest due pending or failed job (has_lag false:
-- none due; a flag rather than a NULL, which sqlc cannot type); and the
-- attempts that finished since failures_since, all of them and the failures:
-- failed, dead-lettered, and the leases the reaper closed as lease_expired.
-- The reaper records an expired lease as an attempt only when a consumer that
-- could have run it was alive (ReapExpiredLeases): the handler ran and never
-- reported (its consumer crashed, hung or was killed in it), so it failed;
-- left out, a poison event that kills its consumer on every try showed 0%
-- while its jobs dead-lettered (review helper-253). Replay markers are not
-- attempts and are left out.
-- A finished attempt is counted where it is kept (010_lease_token): a job's
-- successful attempt on its job row (completed_attempt_id, completed_at),
-- everything else in job_attempts: failures and expired leases, and the
-- 'completed' rows there, successes a replay archived or a service of the
-- previous version wrote (those have no completed_attempt_id), so each
-- attempt is counted once. job_attempts is read by its finished_at index
-- (006); jobs has no index on completed_at (one would cost every completion
-- another index write), so the success part reads jobs whole, as the
-- attempts part read job_attempts whole when every success had a row there.
WITH jobs AS (
    SELECT handler,
           count(*) FILTER (WHERE status = 'pending')     AS pending,
           count(*) FILTER (WHERE status = 'leased')      AS leased,
           count(*) FILTER (WHERE status = 'failed')      AS failed,
           count(*) FILTER (WHERE status = 'dead_letter') AS dead_letter,
           min(next_attempt_at) FILTER (WHERE status IN ('pending', 'failed', 'leased') AND next_attempt_at <= sqlc.arg(now)::timestamptz) AS oldest_due
    FROM webhook_ingress.jobs
    WHERE status IN ('pending', 'leased', 'failed', 'dead_letter')
    GROUP BY handler
), finished AS (
    SELECT j.handler, a.outcome
    FROM webhook_ingress.job_attempts a
    JOIN webhook_ingress.jobs j ON j.id = a.job_id AND j.event_received_at = a.event_received_at
    WHERE a.finished_at >= sqlc.arg(failures_since)::timestamptz
      AND a.outcome <> 'replayed'
    UNION ALL
    SELECT handler, 'completed'
    FROM webhook_ingress.jobs
    WHERE completed_attempt_id IS NOT NULL
      AND completed_at >= sqlc.arg(failures_since)::timestamptz
), attempts AS (
    SELECT handler,
           count(*) AS total,
           count(*) FILTER (WHERE outcome IN ('failed', 'dead_letter', 'lease_expired')) AS failures
    FROM finished
    GROUP BY handler
), handlers AS (
    SELECT handler FROM webhook_ingress.subscriptions
    UNION
    SELECT handler FROM jobs
    UNION
    SELECT handler FROM attempts
)
SELECT h.handler,
       coalesce(j.pending, 0) AS pending, coalesce(j.leased, 0) AS leased, coalesce(j.failed, 0) AS failed,
       coalesce(j.dead_letter, 0) AS dead_letter,
       (j.oldest_due IS NOT NULL)::boolean AS has_lag,
       coalesce(extract(epoch FROM sqlc.arg(now)::timestamptz - j.oldest_due), 0)::float8 AS lag_seconds,
       coalesce(a.total, 0) AS attempts, coalesce(a.failures, 0) AS failures
FROM handlers h
LEFT JOIN jobs j ON j.handler = h.handler
LEFT JOIN attempts a ON a.handler = h.handler
ORDER BY h.handler;
