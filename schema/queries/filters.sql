-- Subscription content filters (014_subscription_filters): ingress evaluates
-- them; the events_fan_out trigger skips filtered subscriptions.

-- name: IngressFilteredSubscriptions :many
-- The enabled subscriptions that carry a filter, for ingress to compile.
SELECT id, handler, provider_pattern, event_type_pattern, filter
FROM webhook_ingress.subscriptions
WHERE enabled AND filter IS NOT NULL
ORDER BY id;

-- name: IngressFilterVersion :one
-- The version of filtered routing (040): read before the filtered
-- subscriptions, so the copy is at least as new as the version it claims.
-- InsertEvent(s) pass it to the events_fan_out trigger, which fails the
-- insert with SQLSTATE IN001 when it moved.
SELECT version FROM webhook_ingress.filter_version;

-- name: FanOutFiltered :one
-- Jobs for the (event key, subscription) pairs whose filter passed, for
-- events stored in this transaction ($1 providers, $2 external event ids,
-- $3 subscription ids: parallel arrays). Returns the jobs created.
SELECT webhook_ingress.fan_out_filtered($1::text[], $2::text[], $3::bigint[]);

-- name: AdminHandlerFilters :many
-- Handler handler's enabled subscriptions that carry a filter, for catch-up to
-- evaluate (the unfiltered ones are matched in SQL).
SELECT id, provider_pattern, event_type_pattern, filter, max_attempts
FROM webhook_ingress.subscriptions
WHERE handler = sqlc.arg(handler) AND enabled AND filter IS NOT NULL
ORDER BY id;

-- name: AdminMissingFilteredCandidates :many
-- The next events after id after_id that match the replay's filter (provider source,
-- event_type_like type LIKE, since since, until until, as AdminCountMissingJobs) and the
-- patterns of one of handler handler's enabled filtered subscriptions, and have
-- no job of handler (with unrouted, no job made when it arrived, a catch-up's
-- not counting, and of the types and times
-- event_types counts as unrouted, exactly as AdminCountUnroutedJobs reads
-- them, so a filter only narrows what --unrouted catches up): catch-up
-- evaluates the filters on them.
-- A body over max_payload (filter.MaxPayload, never parsed: a filter sees
-- no payload) is read as NULL. A page is at most batch_size rows, cut
-- before the first row whose body and headers take the page past
-- batch_bytes (the first row always stays), so the admin API holds a
-- bounded number of bytes inside the ingress process whatever the bodies'
-- size. A body counts its stored length (octet_length reads it without
-- detoasting); headers count their JSON text, what the reader receives and
-- decodes (octet_length(headers::text): their stored, compressed size
-- undercounted them). page_rows is how many rows the page had before the
-- cut: the reader goes on after the last row returned while the page was
-- full (batch_size) or cut.
WITH page AS (
    SELECT e.id, e.received_at, e.provider, e.event_type, e.headers, e.occurred_at,
           (CASE WHEN octet_length(e.raw_body) <= sqlc.arg(max_payload)::bigint THEN e.raw_body END)::bytea AS raw_body
    FROM webhook_ingress.events e
    WHERE (sqlc.arg(provider)::text = '' OR e.provider = sqlc.arg(provider))
      AND (sqlc.arg(event_type_like)::text = '' OR e.event_type LIKE sqlc.arg(event_type_like))
      AND (sqlc.narg(since)::timestamptz IS NULL OR e.received_at >= sqlc.narg(since))
      AND (sqlc.narg(until)::timestamptz IS NULL OR e.received_at < sqlc.narg(until))
      AND e.id > sqlc.arg(after_id)
      AND NOT EXISTS (SELECT 1 FROM webhook_ingress.jobs j WHERE j.event_id = e.id AND j.handler = sqlc.arg(handler))
      AND (NOT sqlc.arg(unrouted)::boolean OR (
            NOT EXISTS (SELECT 1 FROM webhook_ingress.jobs j
                        WHERE j.event_id = e.id AND j.event_received_at = e.received_at
                          AND NOT EXISTS (SELECT 1 FROM webhook_ingress.job_attempts a
                                          WHERE a.job_id = j.id AND a.event_received_at = j.event_received_at AND a.attempt = 0
                                            AND a.outcome = 'replayed' AND a.started_at = j.created_at))
            AND EXISTS (SELECT 1 FROM webhook_ingress.event_types t
                        WHERE t.unrouted_events > 0 AND t.provider = e.provider AND e.received_at >= t.first_unrouted_at
                          AND ((t.event_type <> '_other' AND t.event_type = e.event_type)
                               OR (t.event_type = '_other'
                                   AND NOT EXISTS (SELECT 1 FROM webhook_ingress.event_types n
                                                   WHERE n.provider = e.provider AND n.event_type = e.event_type
                                                     AND n.event_type <> '_other' AND e.received_at >= n.first_seen))))))
      AND EXISTS (SELECT 1 FROM webhook_ingress.subscriptions s
                  WHERE s.handler = sqlc.arg(handler) AND s.enabled AND s.filter IS NOT NULL
                    AND e.provider LIKE s.provider_like AND e.event_type LIKE s.event_type_like)
    ORDER BY e.id
    LIMIT sqlc.arg(batch_size)::bigint
), sized AS (
    SELECT id, received_at, provider, event_type, headers, raw_body, occurred_at,
           sum(coalesce(octet_length(raw_body), 0) + octet_length(headers::text)) OVER (ORDER BY id ROWS UNBOUNDED PRECEDING)
             - (coalesce(octet_length(raw_body), 0) + octet_length(headers::text)) AS bytes_before,
           count(*) OVER () AS page_rows
    FROM page
)
SELECT id, received_at, provider, event_type, headers, raw_body, occurred_at, page_rows::bigint AS page_rows
FROM sized
WHERE bytes_before < sqlc.arg(batch_bytes)::bigint
ORDER BY id;

-- name: AdminCreateFilteredJobs :one
-- Jobs of handler handler for the events a filtered subscription of it
-- passed (event_ids, received_ats, subscription_ids: parallel arrays, one
-- element per event and passing subscription), pending and due now, each
-- with a 'replayed' history row (attempt 0, worker_id the login role), as
-- AdminCreateMissingJobs. A job's max_attempts and key are the largest over
-- the subscriptions that route its event, as at fan-out: those that passed
-- and the unfiltered ones that match (a filtered one that rejected the
-- event gives it nothing: review helper-149). Catch-up creates these jobs
-- before AdminCreateMissingJobs, which then skips their events. Returns how
-- many were created.
WITH passed AS (
    SELECT DISTINCT u.id, u.received_at, u.subscription_id
    FROM ROWS FROM (unnest(sqlc.arg(event_ids)::bigint[]),
                    unnest(sqlc.arg(received_ats)::timestamptz[]),
                    unnest(sqlc.arg(subscription_ids)::bigint[])) AS u(id, received_at, subscription_id)
), routed AS (
    SELECT e.id, e.received_at, e.provider, e.event_type, max(s.max_attempts) AS max_attempts,
           max(webhook_ingress.order_key_of(s.order_key, e.payload, e.headers)) AS order_key,
           coalesce(e.occurred_at, e.received_at) AS order_at
    FROM (SELECT DISTINCT id, received_at FROM passed) p
    JOIN webhook_ingress.events e ON e.id = p.id AND e.received_at = p.received_at
    JOIN webhook_ingress.subscriptions s
      ON s.handler = sqlc.arg(handler) AND s.enabled
     AND e.provider LIKE s.provider_like AND e.event_type LIKE s.event_type_like
     AND (s.filter IS NULL OR s.id IN (SELECT q.subscription_id FROM passed q WHERE q.id = e.id))
    GROUP BY e.id, e.received_at, e.provider, e.event_type, e.occurred_at
    HAVING bool_or(s.filter IS NOT NULL)
), created AS (
    INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts, order_key, order_at)
    SELECT id, received_at, sqlc.arg(handler), provider, event_type, max_attempts, order_key,
           CASE WHEN order_key IS NOT NULL THEN order_at END
    FROM routed
    ON CONFLICT (event_id, handler, event_received_at) DO NOTHING
    RETURNING id, event_received_at
), marked AS (
    INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome)
    SELECT id, event_received_at, 0, session_user::text, now(), now(), 'replayed' FROM created
)
SELECT count(*) FROM created;
