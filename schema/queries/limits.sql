-- Queries on webhook_ingress.handler_limits (017_handler_limits): rate
-- limits, in-flight limits and circuit breakers per handler, enforced by the
-- streamers' claim.

-- name: UpsertHandlerLimits :execrows
-- A consumer registers handler's limits (NULL: none of that kind). A new
-- row starts with a full bucket. Writes nothing when unchanged.
INSERT INTO webhook_ingress.handler_limits AS l
    (handler, rate_per_second, burst, max_in_flight, breaker_failures, breaker_probe_interval, tokens, updated_at)
VALUES (sqlc.arg(handler)::text, sqlc.narg(rate_per_second)::float8, sqlc.narg(burst)::int4, sqlc.narg(max_in_flight)::int4,
        sqlc.narg(breaker_failures)::int4, sqlc.narg(breaker_probe_interval)::interval,
        coalesce(sqlc.narg(burst)::int4, 0), now())
ON CONFLICT (handler) DO UPDATE
SET rate_per_second        = excluded.rate_per_second,
    burst                  = excluded.burst,
    max_in_flight          = excluded.max_in_flight,
    breaker_failures       = excluded.breaker_failures,
    breaker_probe_interval = excluded.breaker_probe_interval,
    tokens                 = least(l.tokens, coalesce(excluded.burst, 0)),
    updated_at             = now()
WHERE (l.rate_per_second, l.burst, l.max_in_flight, l.breaker_failures, l.breaker_probe_interval)
      IS DISTINCT FROM
      (excluded.rate_per_second, excluded.burst, excluded.max_in_flight, excluded.breaker_failures, excluded.breaker_probe_interval);

-- name: DeleteHandlerLimits :execrows
-- A consumer registers a handler without limits: it is claimed as others.
DELETE FROM webhook_ingress.handler_limits WHERE handler = sqlc.arg(handler)::text;

-- name: ListLimitedHandlers :many
-- The handlers the streamers claim apart (one ClaimLimitedJobs each).
SELECT handler FROM webhook_ingress.handler_limits ORDER BY handler;

-- name: LockHandlerLimits :exec
-- Lock handler's row before its ClaimLimitedJobs, in the same transaction
-- (the streamer sends the two in one batch): see there.
SELECT FROM webhook_ingress.handler_limits WHERE handler = sqlc.arg(handler)::text FOR UPDATE;

-- name: ClaimLimitedJobs :many
-- Lease due jobs of one limited handler, at most batch_size and what its
-- limits allow now: the tokens of its bucket (refilled at rate_per_second
-- since refilled_at, up to burst), max_in_flight less its jobs leased now,
-- and while its circuit is not closed nothing but one probe once
-- next_probe_at has passed (the circuit is then half_open until the probe's
-- outcome, or the next probe time). The handler's row is locked, so
-- streamers claiming side by side take turns and the limits hold across all
-- of them. Returns what ClaimJobs returns.
--
-- Run it after LockHandlerLimits in the same transaction. Its own lock on
-- the row is not enough for max_in_flight: a statement that waited for the
-- row reads the row as its holder left it, but counts the handler's leases
-- on the snapshot it took before it waited, without the leases the holder
-- just committed, and so leased max_in_flight more (two streamers waking
-- together, max_in_flight 7: 14 leased). Under READ COMMITTED a statement
-- after the lock is granted counts on a snapshot taken after that. With no row (a consumer
-- registered the handler again without limits since the streamer listed
-- it) it leases nothing: LIMIT NULL would be no limit at all.
WITH lim AS (
    SELECT l.handler, l.burst, l.breaker_probe_interval,
           CASE WHEN l.rate_per_second IS NULL THEN NULL
                ELSE least(l.burst::float8, l.tokens + l.rate_per_second * extract(epoch FROM now() - l.refilled_at)::float8) END AS tokens,
           l.circuit <> 'closed' AND l.next_probe_at <= now() AS probe,
           CASE WHEN l.circuit <> 'closed' AND (l.next_probe_at IS NULL OR l.next_probe_at > now()) THEN 0
                WHEN l.circuit <> 'closed' THEN 1
                ELSE sqlc.arg(batch_size)::bigint END AS by_circuit,
           CASE WHEN l.max_in_flight IS NULL THEN sqlc.arg(batch_size)::bigint
                ELSE greatest(l.max_in_flight - (SELECT count(*) FROM webhook_ingress.jobs f
                                                 WHERE f.handler = l.handler AND f.status = 'leased'
                                                   AND f.lease_expires_at IS NOT NULL), 0) END AS by_in_flight
    FROM webhook_ingress.handler_limits l
    WHERE l.handler = sqlc.arg(handler)::text
    FOR UPDATE
), quota AS (
    SELECT least(by_circuit, by_in_flight, coalesce(floor(tokens)::bigint, by_circuit), sqlc.arg(batch_size)::bigint) AS n
    FROM lim
), skips AS (
    -- Asked once, not per job walked past behind a dead letter (a function
    -- call each: a backlog held behind one made every claim slow).
    SELECT webhook_ingress.order_skips_dead(sqlc.arg(handler)::text) AS dead
), due AS (
    SELECT j.id, j.ctid, j.event_received_at
    FROM webhook_ingress.jobs j
    WHERE j.status IN ('pending', 'failed')
      AND j.next_attempt_at <= now()
      AND j.handler = sqlc.arg(handler)::text
      -- An ordered handler's job waits for the earlier unfinished ones of
      -- its key (020_order_lanes; a dead one only under its handler's live
      -- order policy block, as claim_jobs asks it: 027_order_policy_enabled)
      -- and for a leased one of its key, earlier or not
      -- (026_order_lanes_leased: an earlier event that arrived late).
      AND (j.order_key IS NULL OR (NOT EXISTS (
          SELECT FROM webhook_ingress.order_lanes l
          WHERE l.handler = j.handler AND l.order_key = j.order_key
            AND (l.order_at, l.job_id) < (j.order_at, j.id)
            AND (NOT l.dead OR NOT (SELECT skips.dead FROM skips)))
        AND NOT EXISTS (
          SELECT FROM webhook_ingress.order_lanes l
          WHERE l.handler = j.handler AND l.order_key = j.order_key AND l.leased
            AND l.job_id <> j.id)))
    ORDER BY j.next_attempt_at, j.id
    LIMIT coalesce((SELECT n FROM quota), 0) -- no row: handler is no longer limited; ClaimJobs takes it after the next recount
    FOR UPDATE OF j SKIP LOCKED
), leased AS (
    UPDATE webhook_ingress.jobs j
    SET status           = 'leased',
        attempt_count    = j.attempt_count + 1,
        lease_holder_id  = sqlc.arg(lease_holder)::text,
        lease_expires_at = now() + sqlc.arg(lease_for)::interval,
        attempted_at     = now(),
        worker_id        = NULL,
        updated_at       = now()
    -- The rows due locked, by tuple id in the partitions between their
    -- least and greatest received_at; the ids tell a row from another
    -- partition's at the same tuple id. Not a join to due: on a generic
    -- plan (pgx prepares its statements) the planner guesses due's rows
    -- (its LIMIT is a subquery) and, with statistics taken while the
    -- partition was smaller, hash-joined a scan of the whole partition
    -- (43,405 rows read to lease 100, as claim_jobs before 024).
    WHERE j.ctid = ANY (ARRAY(SELECT due.ctid FROM due))
      AND j.id = ANY (ARRAY(SELECT due.id FROM due))
      AND j.event_received_at BETWEEN (SELECT min(due.event_received_at) FROM due) AND (SELECT max(due.event_received_at) FROM due)
    RETURNING j.id, j.event_id, j.handler, j.provider, j.event_type, j.attempt_count, j.max_attempts,
              j.lease_expires_at, j.trace_parent, j.event_received_at, j.attempted_at
), spent AS (
    UPDATE webhook_ingress.handler_limits l
    SET tokens             = CASE WHEN lim.tokens IS NULL THEN l.tokens ELSE lim.tokens - (SELECT count(*) FROM leased) END,
        refilled_at        = CASE WHEN lim.tokens IS NULL THEN l.refilled_at ELSE now() END,
        circuit            = CASE WHEN lim.probe AND EXISTS (SELECT FROM leased) THEN 'half_open' ELSE l.circuit END,
        circuit_changed_at = CASE WHEN lim.probe AND EXISTS (SELECT FROM leased) AND l.circuit <> 'half_open' THEN now() ELSE l.circuit_changed_at END,
        next_probe_at      = CASE WHEN lim.probe AND EXISTS (SELECT FROM leased) THEN now() + lim.breaker_probe_interval ELSE l.next_probe_at END
    FROM lim
    WHERE l.handler = lim.handler
    RETURNING l.circuit
)
SELECT leased.id, leased.event_id, leased.handler, leased.provider, leased.event_type, leased.attempt_count, leased.max_attempts,
       leased.lease_expires_at::timestamptz AS lease_expires_at, coalesce(leased.trace_parent, '') AS trace_parent,
       leased.event_received_at, leased.attempted_at::timestamptz AS attempted_at,
       coalesce((SELECT lim.probe FROM lim), false)::boolean AS probe
FROM leased;

-- name: HandlerFailed :one
-- A failed attempt of a handler with a breaker (recorded in the same
-- transaction as its FailJob): one more consecutive failure; the circuit
-- opens at breaker_failures, and a failed probe (half_open) opens it again,
-- with the next probe breaker_probe_interval away. Returns the circuit
-- before and after; no row when the handler has no breaker.
UPDATE webhook_ingress.handler_limits l
SET consecutive_failures = l.consecutive_failures + 1,
    circuit              = CASE WHEN l.circuit = 'half_open' OR l.consecutive_failures + 1 >= l.breaker_failures THEN 'open' ELSE l.circuit END,
    circuit_changed_at   = CASE WHEN l.circuit <> 'open' AND (l.circuit = 'half_open' OR l.consecutive_failures + 1 >= l.breaker_failures)
                                THEN now() ELSE l.circuit_changed_at END,
    next_probe_at        = CASE WHEN l.circuit <> 'open' AND (l.circuit = 'half_open' OR l.consecutive_failures + 1 >= l.breaker_failures)
                                THEN now() + l.breaker_probe_interval ELSE l.next_probe_at END,
    updated_at           = now()
FROM (SELECT h.handler, h.circuit FROM webhook_ingress.handler_limits h
      WHERE h.handler = sqlc.arg(handler)::text AND h.breaker_failures IS NOT NULL FOR UPDATE) AS before
WHERE l.handler = before.handler
RETURNING before.circuit AS was, l.circuit AS now;

-- name: HandlersSucceeded :many
-- Successful attempts of handlers with a breaker: their failure counts
-- restart and their circuits close. Writes only rows with something to
-- reset; returns those whose circuit was not closed.
UPDATE webhook_ingress.handler_limits l
SET consecutive_failures = 0,
    circuit              = 'closed',
    circuit_changed_at   = CASE WHEN l.circuit <> 'closed' THEN now() ELSE l.circuit_changed_at END,
    next_probe_at        = NULL,
    updated_at           = now()
FROM (SELECT h.handler, h.circuit FROM webhook_ingress.handler_limits h
      WHERE h.handler = ANY(sqlc.arg(handlers)::text[]) AND h.breaker_failures IS NOT NULL
        AND (h.consecutive_failures > 0 OR h.circuit <> 'closed')
      ORDER BY h.handler FOR UPDATE) AS before
WHERE l.handler = before.handler
RETURNING l.handler, before.circuit AS was;

-- name: HandlerLimitsState :many
-- Every limited handler's settings and state, for gauges, the dashboard and
-- inlet subscriptions list.
SELECT handler, rate_per_second, burst, max_in_flight, breaker_failures, breaker_probe_interval,
       consecutive_failures, circuit, circuit_changed_at, next_probe_at
FROM webhook_ingress.handler_limits
ORDER BY handler;
