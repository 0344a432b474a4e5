-- Queries on webhook_ingress.event_types (013_event_types): every (source,
-- event type) seen, and the events that created no job (unrouted).

-- name: FoldEventTypes :one
-- Fold the arrivals appended by ingest since the last fold into event_types,
-- at most max_types_per_source named types per source (the rest in '_other'). Serialized by
-- the function's advisory lock; returns the rows written.
SELECT webhook_ingress.fold_event_types(sqlc.arg(max_types_per_source)::integer) AS folded;

-- name: MonitorEventTypes :many
-- Every type row, for the streamer's metric and new-type alerts (as
-- webhook_streamer). Bounded: at most the cap + 1 rows per source.
-- subscribed: an enabled subscription matches the type (049, filters
-- aside); is_changed: reported before, and subscribed has moved since.
SELECT provider, event_type, first_seen, events, unrouted_events, routed, (alerted_at IS NULL)::boolean AS is_new,
       (event_type <> '_other' AND webhook_ingress.type_subscribed(provider, event_type))::boolean AS subscribed,
       (alerted_at IS NOT NULL AND event_type <> '_other'
        AND webhook_ingress.type_subscribed(provider, event_type) IS DISTINCT FROM alerted_routed)::boolean AS is_changed
FROM webhook_ingress.event_types
ORDER BY provider, event_type;

-- name: MonitorEventTypeAlerted :exec
-- The log line and alert of (provider, event_type), new or changed, went
-- out, when a subscription matched it or not (routed). alerted_at is the
-- first report's; reported_at (081) moves with every report, so the next
-- one's alert_id differs (MonitorClaimEventType).
UPDATE webhook_ingress.event_types SET alerted_at = coalesce(alerted_at, now()), alerted_routed = sqlc.narg(routed)::boolean,
    reported_at = now()
WHERE provider = sqlc.arg(provider)::text AND event_type = sqlc.arg(event_type)::text;

-- name: MonitorClaimEventType :one
-- Claim the report of (provider, event_type), new or changed: lock its row
-- until the report is recorded (MonitorEventTypeAlerted in the same
-- transaction) or given up, with the columns of MonitorEventTypes as they
-- are now. No row when another replica's claim holds it (its alert POST in
-- flight: a leader deposed meanwhile): SKIP LOCKED, never a wait, and that
-- replica records it, or rolls back and the type is reported at the next
-- check. The row returned is the latest committed: a report another
-- replica recorded meanwhile shows here (review helper-323). A fold that
-- adds to the row waits for the claim (at most its bound,
-- MonitorBoundAlertClaim). reported_at, the instant the report this one
-- follows was recorded (alerted_at for a row not reported since 081),
-- names an unrouted alert (alert_id): it moves only when a report is
-- recorded (review helper-334).
SELECT provider, event_type, first_seen, events, unrouted_events, routed, coalesce(reported_at, alerted_at) AS reported_at,
       (alerted_at IS NULL)::boolean AS is_new,
       (event_type <> '_other' AND webhook_ingress.type_subscribed(provider, event_type))::boolean AS subscribed,
       (alerted_at IS NOT NULL AND event_type <> '_other'
        AND webhook_ingress.type_subscribed(provider, event_type) IS DISTINCT FROM alerted_routed)::boolean AS is_changed
FROM webhook_ingress.event_types
WHERE provider = sqlc.arg(provider)::text AND event_type = sqlc.arg(event_type)::text
FOR UPDATE SKIP LOCKED;

-- name: AdminEventTypes :many
-- Every type seen, unrouted first (the latest event created no job), then
-- not known (seen only before 013), then routed; with the handlers whose
-- enabled subscriptions match it now (a handler subscribed after unrouted
-- events arrived can catch them up: inlet replay --handler H --unrouted).
SELECT t.provider, t.event_type, t.first_seen, t.last_seen, t.events, t.unrouted_events, t.routed,
       coalesce((SELECT array_agg(DISTINCT s.handler ORDER BY s.handler)
                 FROM webhook_ingress.subscriptions s
                 WHERE s.enabled AND t.provider LIKE s.provider_like AND t.event_type LIKE s.event_type_like), '{}')::text[] AS handlers
FROM webhook_ingress.event_types t
ORDER BY CASE WHEN t.routed = false THEN 0 WHEN t.routed IS NULL THEN 1 ELSE 2 END,
         t.unrouted_events DESC, t.provider, t.event_type;

-- name: AdminCountUnroutedJobs :one
-- Events that created no job when they arrived (a job another handler's
-- catch-up created, marked by its 'replayed' row of attempt 0 written with
-- it, does not count: every handler subscribed later catches them up) and no
-- job of handler handler yet (of the types event_types counts as
-- unrouted, from their first unrouted event on; '_other' stands for the
-- source's types past the cap, and for a type that got a named row later,
-- when the cap was raised, its events from before that row's first_seen) and that an enabled subscription of handler
-- handler matches, filtered by provider provider, event_type_like event type LIKE pattern, since since
-- and until until on received_at: the jobs inlet replay --unrouted creates.
WITH t AS (
    SELECT provider, event_type, first_unrouted_at FROM webhook_ingress.event_types
    WHERE unrouted_events > 0 AND (sqlc.arg(provider)::text = '' OR provider = sqlc.arg(provider))
), e AS (
    SELECT e.id, e.received_at, e.provider, e.event_type, e.occurred_at, e.payload, e.headers
    FROM t JOIN webhook_ingress.events e
      ON e.provider = t.provider AND e.event_type = t.event_type AND e.received_at >= t.first_unrouted_at
    WHERE t.event_type <> '_other'
    UNION ALL
    SELECT e.id, e.received_at, e.provider, e.event_type, e.occurred_at, e.payload, e.headers
    FROM t JOIN webhook_ingress.events e ON e.provider = t.provider AND e.received_at >= t.first_unrouted_at
    WHERE t.event_type = '_other'
      AND NOT EXISTS (SELECT 1 FROM webhook_ingress.event_types n
                      WHERE n.provider = e.provider AND n.event_type = e.event_type AND n.event_type <> '_other'
                        AND e.received_at >= n.first_seen)
)
SELECT count(*)
FROM e
WHERE (sqlc.arg(event_type_like)::text = '' OR e.event_type LIKE sqlc.arg(event_type_like))
  AND (sqlc.narg(since)::timestamptz IS NULL OR e.received_at >= sqlc.narg(since))
  AND (sqlc.narg(until)::timestamptz IS NULL OR e.received_at < sqlc.narg(until))
  AND NOT EXISTS (SELECT 1 FROM webhook_ingress.jobs j WHERE j.event_id = e.id AND j.event_received_at = e.received_at
                  AND NOT EXISTS (SELECT 1 FROM webhook_ingress.job_attempts a
                                  WHERE a.job_id = j.id AND a.event_received_at = j.event_received_at AND a.attempt = 0
                                    AND a.outcome = 'replayed' AND a.started_at = j.created_at))
  AND NOT EXISTS (SELECT 1 FROM webhook_ingress.jobs j
                  WHERE j.event_id = e.id AND j.event_received_at = e.received_at AND j.handler = sqlc.arg(handler))
  AND EXISTS (SELECT 1 FROM webhook_ingress.subscriptions s
              WHERE s.handler = sqlc.arg(handler) AND s.enabled AND s.filter IS NULL
                AND e.provider LIKE s.provider_like AND e.event_type LIKE s.event_type_like);

-- name: AdminCreateUnroutedJobs :one
-- Create the next batch_size jobs of AdminCountUnroutedJobs after event id after_id, as
-- AdminCreateMissingJobs does (pending, due now, the largest max_attempts of
-- the handler's matching patterns, a 'replayed' history row naming the login
-- role). Returns how many were created and the last event id looked at.
WITH t AS (
    SELECT provider, event_type, first_unrouted_at FROM webhook_ingress.event_types
    WHERE unrouted_events > 0 AND (sqlc.arg(provider)::text = '' OR provider = sqlc.arg(provider))
), e AS (
    SELECT e.id, e.received_at, e.provider, e.event_type, e.occurred_at, e.payload, e.headers
    FROM t JOIN webhook_ingress.events e
      ON e.provider = t.provider AND e.event_type = t.event_type AND e.received_at >= t.first_unrouted_at
    WHERE t.event_type <> '_other' AND e.id > sqlc.arg(after_id)
    UNION ALL
    SELECT e.id, e.received_at, e.provider, e.event_type, e.occurred_at, e.payload, e.headers
    FROM t JOIN webhook_ingress.events e ON e.provider = t.provider AND e.received_at >= t.first_unrouted_at
    WHERE t.event_type = '_other' AND e.id > sqlc.arg(after_id)
      AND NOT EXISTS (SELECT 1 FROM webhook_ingress.event_types n
                      WHERE n.provider = e.provider AND n.event_type = e.event_type AND n.event_type <> '_other'
                        AND e.received_at >= n.first_seen)
), batch AS (
    SELECT e.id, e.received_at, e.provider, e.event_type, m.max_attempts, m.order_key,
           CASE WHEN m.order_key IS NOT NULL THEN coalesce(e.occurred_at, e.received_at) END AS order_at
    FROM e
    CROSS JOIN LATERAL (
        SELECT max(s.max_attempts) AS max_attempts, max(webhook_ingress.order_key_of(s.order_key, e.payload, e.headers)) AS order_key
        FROM webhook_ingress.subscriptions s
        WHERE s.handler = sqlc.arg(handler) AND s.enabled AND s.filter IS NULL
          AND e.provider LIKE s.provider_like AND e.event_type LIKE s.event_type_like
    ) m
    WHERE m.max_attempts IS NOT NULL
      AND (sqlc.arg(event_type_like)::text = '' OR e.event_type LIKE sqlc.arg(event_type_like))
      AND (sqlc.narg(since)::timestamptz IS NULL OR e.received_at >= sqlc.narg(since))
      AND (sqlc.narg(until)::timestamptz IS NULL OR e.received_at < sqlc.narg(until))
      AND NOT EXISTS (SELECT 1 FROM webhook_ingress.jobs j WHERE j.event_id = e.id AND j.event_received_at = e.received_at
                      AND NOT EXISTS (SELECT 1 FROM webhook_ingress.job_attempts a
                                      WHERE a.job_id = j.id AND a.event_received_at = j.event_received_at AND a.attempt = 0
                                        AND a.outcome = 'replayed' AND a.started_at = j.created_at))
    ORDER BY e.id
    LIMIT sqlc.arg(batch_size)::bigint
), created AS (
    INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts, order_key, order_at)
    SELECT id, received_at, sqlc.arg(handler), provider, event_type, max_attempts, order_key, order_at FROM batch
    ON CONFLICT (event_id, handler, event_received_at) DO NOTHING
    RETURNING id, event_received_at
), marked AS (
    INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome)
    SELECT id, event_received_at, 0, session_user::text, now(), now(), 'replayed' FROM created
)
SELECT (SELECT count(*) FROM created) AS created, coalesce((SELECT max(id) FROM batch), 0)::bigint AS last_event_id;

-- name: AdminSeenSources :many
-- Every source event_types has seen (also those whose events retention has
-- since dropped), without folding the latest arrivals first (a read: the
-- auditor may not fold); a source whose events are not folded yet is in the
-- log itself (AdminSourceKnown). For a usage error naming the known sources.
SELECT DISTINCT provider FROM webhook_ingress.event_types ORDER BY provider;
