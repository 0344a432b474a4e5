-- Queries on webhook_ingress.handler_limits (017_handler_limits): rate
-- limits, in-flight limits and circuit breakers per handler, enforced by the
-- streamers' claim.

-- name: UpsertHandlerLimits :execrows
-- A consumer registers handler's limits (NULL: none of that kind). A new
-- row starts with a full bucket. Writes nothing when unchanged. A breaker
-- removed takes its circuit with it: closed, no failures, no probe (an open
-- circuit kept without a breaker would stay shut forever: nothing counts
-- outcomes of a handler without one).
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
    consecutive_failures   = CASE WHEN excluded.breaker_failures IS NULL THEN 0 ELSE l.consecutive_failures END,
    circuit                = CASE WHEN excluded.breaker_failures IS NULL THEN 'closed' ELSE l.circuit END,
    circuit_changed_at     = CASE WHEN excluded.breaker_failures IS NULL AND l.circuit <> 'closed' THEN now() ELSE l.circuit_changed_at END,
    -- A shorter probe interval brings an open circuit's next probe nearer
    -- (review helper-139: it kept the old interval's, up to 24 h away).
    next_probe_at          = CASE WHEN excluded.breaker_failures IS NULL THEN NULL
                                  ELSE least(l.next_probe_at, now() + excluded.breaker_probe_interval) END,
    updated_at             = now()
WHERE (l.rate_per_second, l.burst, l.max_in_flight, l.breaker_failures, l.breaker_probe_interval)
      IS DISTINCT FROM
      (excluded.rate_per_second, excluded.burst, excluded.max_in_flight, excluded.breaker_failures, excluded.breaker_probe_interval);

-- name: UpsertSharedHandlerLimits :execrows
-- As UpsertHandlerLimits, for a handler another consumer role is also given
-- (HandlerLimitsShared; review helper-331): each kind of limit declared
-- (rate and burst, in-flight, breaker) is written, the last registration's
-- winning; a kind not declared keeps what the row holds, which another
-- role's consumers may have declared. So a breaker is never removed here,
-- and its circuit, open or not, and its failure count are kept. Writes
-- nothing when unchanged.
INSERT INTO webhook_ingress.handler_limits AS l
    (handler, rate_per_second, burst, max_in_flight, breaker_failures, breaker_probe_interval, tokens, updated_at)
VALUES (sqlc.arg(handler)::text, sqlc.narg(rate_per_second)::float8, sqlc.narg(burst)::int4, sqlc.narg(max_in_flight)::int4,
        sqlc.narg(breaker_failures)::int4, sqlc.narg(breaker_probe_interval)::interval,
        coalesce(sqlc.narg(burst)::int4, 0), now())
ON CONFLICT (handler) DO UPDATE
SET rate_per_second        = coalesce(excluded.rate_per_second, l.rate_per_second),
    burst                  = coalesce(excluded.burst, l.burst),
    max_in_flight          = coalesce(excluded.max_in_flight, l.max_in_flight),
    breaker_failures       = coalesce(excluded.breaker_failures, l.breaker_failures),
    breaker_probe_interval = coalesce(excluded.breaker_probe_interval, l.breaker_probe_interval),
    tokens                 = least(l.tokens, coalesce(excluded.burst, l.burst, 0)),
    next_probe_at          = CASE WHEN excluded.breaker_failures IS NULL THEN l.next_probe_at
                                  ELSE least(l.next_probe_at, now() + excluded.breaker_probe_interval) END,
    updated_at             = now()
WHERE (l.rate_per_second, l.burst, l.max_in_flight, l.breaker_failures, l.breaker_probe_interval)
      IS DISTINCT FROM
      (coalesce(excluded.rate_per_second, l.rate_per_second), coalesce(excluded.burst, l.burst),
       coalesce(excluded.max_in_flight, l.max_in_flight), coalesce(excluded.breaker_failures, l.breaker_failures),
       coalesce(excluded.breaker_probe_interval, l.breaker_probe_interval));

-- name: HandlerLimitsShared :one
-- Before a registration writes handler's limits: whether a consumer role
-- other than the registrant is given the handler (080 another_role_given:
-- its consumers may have declared the limits the row holds), and whether
-- the handler has a row.
SELECT webhook_ingress.another_role_given(current_user::text, sqlc.arg(handler)::text)::boolean AS shared,
       EXISTS (SELECT FROM webhook_ingress.handler_limits WHERE handler = sqlc.arg(handler)::text)::boolean AS limited;

-- name: DeleteHandlerLimits :execrows
-- A consumer registers a handler without limits: it is claimed as others.
-- Not for a handler another consumer role is also given (080: a policy
-- deletes nothing then; the registration leaves the row).
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
-- next_probe_at has passed and none of its jobs is leased (those leased
-- before it opened end first, and a probe runs alone: 073); the circuit is
-- then half_open until the probe's outcome, or the next probe time. The
-- handler's row is locked, so
-- streamers claiming side by side take turns and the limits hold across all
-- of them. An ordered handler's jobs are leased under claim_jobs's rules,
-- its per-key locks included (033_claim_limited_jobs_key_lock). Returns
-- what ClaimJobs returns, and whether the lease is the circuit's probe.
--
-- Run it after LockHandlerLimits in the same transaction. Its own lock on
-- the row is not enough for max_in_flight: a statement that waited for the
-- row reads the row as its holder left it, but counts the handler's leases
-- on the snapshot it took before it waited, without the leases the holder
-- just committed, and so leased max_in_flight more (two streamers waking
-- together, max_in_flight 7: 14 leased). Under READ COMMITTED a statement
-- after the lock is granted counts on a snapshot taken after that. With no
-- row (a consumer registered the handler again without limits since the
-- streamer listed it) it leases nothing.
--
-- The statements run in webhook_ingress.claim_limited_jobs (033).
SELECT id::bigint AS id, event_id::bigint AS event_id, handler::text AS handler, provider::text AS provider,
       event_type::text AS event_type, attempt_count::integer AS attempt_count, max_attempts::integer AS max_attempts,
       lease_expires_at::timestamptz AS lease_expires_at, trace_parent::text AS trace_parent,
       event_received_at::timestamptz AS event_received_at, attempted_at::timestamptz AS attempted_at,
       probe::boolean AS probe
FROM webhook_ingress.claim_limited_jobs(sqlc.arg(handler)::text, sqlc.arg(batch_size)::bigint,
                                        sqlc.arg(lease_holder)::text, sqlc.arg(lease_for)::interval);

-- name: LimitedWakeIn :one
-- After ClaimLimitedJobs, in the same transaction: how soon handler's next
-- claim could lease more of its jobs, in seconds, when some are due and its
-- limits held them back: the time to its next probe when its circuit is
-- open; the time to its next token when its bucket is empty; 0 when its
-- in-flight limit is full (a slot frees when a job ends, which nothing
-- signals, so it is looked at again soon). NULL otherwise: none is due
-- that a live consumer could receive (claim_limited_jobs leases no other,
-- judged as it judges them: 076 receivable_scopes),
-- its circuit waits for a probe's outcome, or for the jobs leased before
-- it opened to end before its probe, or what is due is held back by
-- its order alone (an earlier job of its key unfinished), which a limit's
-- wake-up would not move (the poll and the hints wake it then).
SELECT (CASE
    WHEN NOT EXISTS (SELECT FROM webhook_ingress.jobs j
                     WHERE j.handler = l.handler AND j.status IN ('pending', 'failed') AND j.next_attempt_at <= now()
                       AND webhook_ingress.receives(j.provider, j.event_type, v.open, v.uncovered, v.live_pairs,
                                                    v.member_pairs, v.live_scopes, v.member_scopes))
        THEN NULL
    WHEN l.breaker_failures IS NOT NULL AND l.circuit <> 'closed'
        THEN CASE WHEN l.next_probe_at > now() THEN extract(epoch FROM l.next_probe_at - now()) END
    WHEN l.rate_per_second > 0
         AND least(l.burst::float8, l.tokens + l.rate_per_second * extract(epoch FROM now() - l.refilled_at)::float8) < 1
        THEN (1 - least(l.burst::float8, l.tokens + l.rate_per_second * extract(epoch FROM now() - l.refilled_at)::float8)) / l.rate_per_second
    WHEN l.max_in_flight IS NOT NULL
         AND (SELECT count(*) FROM webhook_ingress.jobs f
              WHERE f.handler = l.handler AND f.status = 'leased' AND f.lease_expires_at IS NOT NULL) >= l.max_in_flight
        THEN 0
    END)::float8 AS wake_in
FROM webhook_ingress.handler_limits l
CROSS JOIN LATERAL webhook_ingress.receivable_scopes(l.handler) v
WHERE l.handler = sqlc.arg(handler)::text;

-- name: HandlerFailed :one
-- A failed attempt of a handler with a breaker (recorded in the same
-- transaction as its FailJob): one more consecutive failure; the circuit
-- opens at breaker_failures, and a failed probe (half_open) opens it again,
-- with the next probe breaker_probe_interval away. A failure whose
-- transaction began before the handler's newest success (last_success_at,
-- 056) is older than that success: not counted. Returns the circuit before
-- and after; no row when the handler has no breaker or the failure is not
-- counted. The reaper counts an attempt that ran and expired the same way
-- (ReapExpiredLeases, 073 count_expired_attempts).
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
WHERE l.handler = before.handler AND now() > coalesce(l.last_success_at, '-infinity')
RETURNING before.circuit AS was, l.circuit AS now;

-- name: HandlerSucceeded :one
-- A successful attempt of a handler with a breaker (job job_id, in the
-- partition of event_received_at, completed at its completed_at): the
-- handler's newest success is the later of it and last_success_at, its
-- consecutive failures those recorded since (failed attempts whose
-- transaction began after), and its circuit closes unless they are
-- breaker_failures or more. Run after LockHandlerLimits in the same
-- transaction, so this statement's snapshot holds every failure counted on
-- the row: a reset that lands after later failures keeps them (review
-- helper-121), and one for an older success than the newest counts from
-- the newest (helper-123). Writes a row with something to change, a newer
-- success among them (last_success_at must move, or a failure that began
-- before this success and is recorded after it would be counted: review
-- helper-126); returns the circuit before and after.
WITH s AS (
    SELECT j.completed_at FROM webhook_ingress.jobs j
    WHERE j.id = sqlc.arg(job_id)::bigint AND j.event_received_at = sqlc.arg(event_received_at)::timestamptz
      AND j.handler = sqlc.arg(handler)::text AND j.status = 'completed'
), cur AS (
    SELECT greatest(h.last_success_at, (SELECT completed_at FROM s)) AS at
    FROM webhook_ingress.handler_limits h WHERE h.handler = sqlc.arg(handler)::text
), since AS (
    -- Every role's failures of the handler, not only those this role's
    -- scopes let it read (059; review helper-139).
    SELECT webhook_ingress.handler_failures_since(sqlc.arg(handler)::text, (SELECT at FROM cur)) AS n
)
UPDATE webhook_ingress.handler_limits l
SET consecutive_failures = since.n,
    last_success_at      = cur.at,
    circuit              = CASE WHEN since.n >= l.breaker_failures THEN l.circuit ELSE 'closed' END,
    circuit_changed_at   = CASE WHEN since.n < l.breaker_failures AND l.circuit <> 'closed' THEN now() ELSE l.circuit_changed_at END,
    next_probe_at        = CASE WHEN since.n < l.breaker_failures THEN NULL ELSE l.next_probe_at END,
    updated_at           = now()
FROM since, cur, (SELECT h.handler, h.circuit FROM webhook_ingress.handler_limits h WHERE h.handler = sqlc.arg(handler)::text) AS before
WHERE l.handler = before.handler AND l.breaker_failures IS NOT NULL AND EXISTS (SELECT 1 FROM s)
  AND (l.consecutive_failures <> since.n OR (l.circuit <> 'closed' AND since.n < l.breaker_failures)
       OR cur.at > coalesce(l.last_success_at, '-infinity'))
RETURNING before.circuit AS was, l.circuit AS now;

-- name: HandlerLimitsState :many
-- Every limited handler's settings and state, for gauges, the dashboard and
-- inlet subscriptions list.
SELECT handler, rate_per_second, burst, max_in_flight, breaker_failures, breaker_probe_interval,
       consecutive_failures, circuit, circuit_changed_at, next_probe_at
FROM webhook_ingress.handler_limits
ORDER BY handler;
