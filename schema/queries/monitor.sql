-- Queries of package monitor: queue gauges and provider arrivals. They run
-- as webhook_streamer (event metadata and jobs only) and read through the
-- partial indexes of jobs, never the finished jobs.

-- name: MonitorJobs :many
-- Open and dead-lettered jobs by handler and state, with every enabled
-- subscription's handler at 0.
SELECT handler, status, count(*) AS jobs FROM webhook_ingress.jobs WHERE status IN ('pending', 'failed') GROUP BY 1, 2
UNION ALL
SELECT handler, 'leased', count(*) FROM webhook_ingress.jobs WHERE status = 'leased' GROUP BY 1
UNION ALL
SELECT handler, 'dead_letter', count(*) FROM webhook_ingress.jobs WHERE status = 'dead_letter' GROUP BY 1
UNION ALL
SELECT DISTINCT handler, 'pending', 0 FROM webhook_ingress.subscriptions WHERE enabled;

-- name: MonitorLag :many
-- Per handler, how long its oldest undelivered due job (pending, failed with
-- its backoff over, or leased: running, or leased again and again while no
-- consumer takes it) has waited since it became due, in seconds (reviews
-- helper-101 and -102). Two arms, each through its partial index (idx_jobs_claimable,
-- idx_jobs_leased), never the finished jobs. A lease given back or reaped
-- keeps its job's due time (ReleaseJobs, ReleaseUnseenJobs,
-- ReapExpiredLeases, give_back_attempt), so a bus or consumer outage, or a
-- consumer's restart, does not reset it.
SELECT handler, extract(epoch FROM now() - min(due))::float8 AS lag_seconds
FROM (
    SELECT handler, next_attempt_at AS due FROM webhook_ingress.jobs
    WHERE status IN ('pending', 'failed') AND next_attempt_at <= now()
    UNION ALL
    SELECT handler, next_attempt_at FROM webhook_ingress.jobs
    WHERE lease_expires_at IS NOT NULL AND status = 'leased' AND next_attempt_at <= now()
) open
GROUP BY handler;

-- name: MonitorSources :many
-- Every source with an event, by skip scan over idx_events_provider_received_at.
WITH RECURSIVE p AS (
    (SELECT provider FROM webhook_ingress.events ORDER BY provider LIMIT 1)
    UNION ALL
    SELECT (SELECT e.provider FROM webhook_ingress.events e WHERE e.provider > p.provider ORDER BY e.provider LIMIT 1)
    FROM p
    WHERE p.provider IS NOT NULL
)
SELECT provider FROM p WHERE provider IS NOT NULL;

-- name: MonitorArrivals :many
-- The latest max_rows arrival times of source provider's webhooks, newest
-- first: signed deliveries only, not the events inlet backfill and
-- reconcile store from the provider's API (signature_verified false), which
-- say nothing of whether the provider still sends (review helper-101).
SELECT received_at FROM webhook_ingress.events
WHERE provider = sqlc.arg(provider)::text AND signature_verified
ORDER BY received_at DESC LIMIT sqlc.arg(max_rows)::bigint;

-- name: TryReporterLock :one
-- Take the monitor reporter's session lock if no other replica holds it (the
-- key keeps its old name, so replicas of every version elect one reporter):
-- of several streamers on one database only the holder logs and POSTs
-- source changes. Released when its connection ends.
SELECT pg_try_advisory_lock(hashtextextended('inlet:heartbeat-reporter', 0)) AS leading;

-- name: TryNamedLock :one
-- Take the session lock named key if no other replica holds it: one
-- replica of several runs the job the key names (inlet:reconcile: the
-- scheduled reconcile). Released when its connection ends.
SELECT pg_try_advisory_lock(hashtextextended(sqlc.arg(key)::text, 0)) AS leading;

-- name: MonitorReportedSilence :many
-- The silence last reported per source (045), with the last_seen and
-- threshold reported (065: NULL before it); a source without a row was not
-- reported silent.
SELECT source, silent, last_seen, threshold FROM webhook_ingress.source_alerts;

-- name: MonitorRefreshSilence :exec
-- Source source, reported silent and still silent, had arrivals since the
-- report (its "resumed" refused or not sent, then silent again): its
-- last_seen and threshold move to the latest judgement, without a new
-- report (reported_at stays), so a hold after retention waits for an
-- arrival newer than the latest one, not the first (review helper-174).
UPDATE webhook_ingress.source_alerts
SET last_seen = sqlc.narg(last_seen)::timestamptz, threshold = sqlc.narg(threshold)::interval
WHERE source = sqlc.arg(source)::text AND silent;

-- name: MonitorRecordSilence :exec
-- Source source's silence (silent) was reported, with its newest arrival
-- then (last_seen, NULL: none) and its threshold (NULL: none): the next
-- check compares with it, and holds a silent source too thinly recorded to
-- judge (retention dropped its arrivals) until one newer than last_seen.
INSERT INTO webhook_ingress.source_alerts (source, silent, reported_at, last_seen, threshold)
VALUES (sqlc.arg(source)::text, sqlc.arg(silent)::boolean, now(), sqlc.narg(last_seen)::timestamptz, sqlc.narg(threshold)::interval)
ON CONFLICT (source) DO UPDATE SET silent = excluded.silent, reported_at = excluded.reported_at,
    last_seen = excluded.last_seen, threshold = excluded.threshold;

-- name: MonitorEnsureSilenceRow :exec
-- A row for source source that says it was not reported silent (as no row
-- does), so that the claim of its first report (MonitorClaimSilence) has a
-- row to lock. Run on its own, committed before the claim's transaction
-- begins: an insert left uncommitted until the claim ends would make
-- another replica's insert of the same source wait for the whole POST
-- instead of skipping the row.
INSERT INTO webhook_ingress.source_alerts (source, silent) VALUES (sqlc.arg(source)::text, false)
ON CONFLICT (source) DO NOTHING;

-- name: MonitorClaimSilence :one
-- Claim the report of a change of source source: lock its row until the
-- report is recorded (MonitorRecordSilence in the same transaction) or
-- given up. No row when another replica's claim holds it (its alert POST in
-- flight: a leader deposed meanwhile): SKIP LOCKED, never a wait, and that
-- replica records it, or rolls back and the change is reported at the next
-- check. The row returned is the latest committed: a change another replica
-- reported meanwhile shows here (review helper-323). reported_at, the
-- instant of the report this change follows, names the alert (alert_id).
SELECT silent, reported_at FROM webhook_ingress.source_alerts
WHERE source = sqlc.arg(source)::text
FOR UPDATE SKIP LOCKED;

-- name: MonitorBoundAlertClaim :exec
-- Bound the transaction of an alert's claim to timeout_ms milliseconds
-- (the POST's timeout and a margin), whatever the role or database set:
-- idle_in_transaction_session_timeout counts the POST (the session is idle
-- in the transaction meanwhile), so a shorter one would end the claim
-- before the alert is recorded (sent again at every check), and none
-- would let a leader cut off by the network hold the row until TCP gives
-- up on it (2 h). transaction_timeout (PostgreSQL 17) likewise, where it
-- exists.
SELECT pg_catalog.set_config('idle_in_transaction_session_timeout', sqlc.arg(timeout_ms)::text, true) AS idle,
       (SELECT pg_catalog.set_config('transaction_timeout', sqlc.arg(timeout_ms)::text, true)
        WHERE pg_catalog.current_setting('transaction_timeout', true) IS NOT NULL) AS whole;
