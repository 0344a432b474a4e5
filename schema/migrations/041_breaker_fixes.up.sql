-- 041_breaker_fixes: two faults of the circuit breakers (017, 033).
--
-- 1. A breaker removed while its circuit was open (the consumer re-registered
--    the handler with other limits, so its handler_limits row stayed) kept
--    circuit 'open'. The next probe set next_probe_at = now() + NULL, the
--    circuit went half_open with no next probe, and from then on the claim's
--    quota was 0: the handler, which had no breaker any more, never got a
--    job again (nothing counts outcomes of a handler without a breaker, so
--    nothing closed it). UpsertHandlerLimits now closes the circuit of a
--    breaker it removes; the claim treats a row without a breaker as closed
--    whatever its circuit says; and rows stuck that way are closed here
--    (or, when the breaker came back since, given a probe due now).
-- 2. A half-open circuit leased a new probe every breaker_probe_interval
--    whether or not the last one still ran (the default interval, 30 s, is
--    half the default lease): a slow downstream, the reason circuits open,
--    got 2, 3, … probes at once. While half open the claim now leases a
--    probe only when none of the handler's jobs is leased (a probe whose
--    consumer died is reaped at its lease's end, then the next one comes).
--
-- claim_limited_jobs is 033's with those two changes; the handler's leased
-- jobs are counted once, for the in-flight limit and the probe alike.

UPDATE webhook_ingress.handler_limits
SET circuit = 'closed', consecutive_failures = 0, next_probe_at = NULL, circuit_changed_at = now(), updated_at = now()
WHERE breaker_failures IS NULL AND (circuit <> 'closed' OR consecutive_failures <> 0 OR next_probe_at IS NOT NULL);
-- The same fault left rows that got their breaker back afterwards (the
-- upsert kept the circuit): a breaker, a circuit not closed, and no next
-- probe. Their probe is due now.
UPDATE webhook_ingress.handler_limits
SET next_probe_at = now(), updated_at = now()
WHERE breaker_failures IS NOT NULL AND circuit <> 'closed' AND next_probe_at IS NULL;

CREATE OR REPLACE FUNCTION webhook_ingress.claim_limited_jobs(p_handler text, p_batch_size bigint, p_lease_holder text, p_lease_for interval)
    RETURNS TABLE (id bigint, event_id bigint, handler text, provider text, event_type text, attempt_count integer,
                   max_attempts integer, lease_expires_at timestamptz, trace_parent text, event_received_at timestamptz,
                   attempted_at timestamptz, probe boolean)
    LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp -- as 036 made it
    SET plan_cache_mode = force_generic_plan
    SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_tokens   float8;   -- the bucket's tokens now (NULL: no rate limit)
    v_probe    boolean;  -- the circuit is open and its probe is due
    v_interval interval; -- breaker_probe_interval
    v_quota    bigint;   -- how many jobs the limits allow now
    v_ids      bigint[];
    v_tids     tid[];
    v_min      timestamptz;
    v_max      timestamptz;
    v_kids     bigint[]; -- the keyed jobs locked
    v_kk       text[];   -- their keys
    v_busy     bigint[]; -- those whose key another claim is leasing
    v_skip     boolean;
    v_leased   bigint;   -- the handler's jobs leased now
BEGIN
    -- The handler's leased jobs, counted once: the in-flight limit, and a
    -- half-open circuit's probe still running (041). On a snapshot taken
    -- after LockHandlerLimits's lock was granted, as the limits below.
    SELECT count(*) INTO v_leased FROM webhook_ingress.jobs f
    WHERE f.handler = p_handler AND f.status = 'leased' AND f.lease_expires_at IS NOT NULL;
    -- The limits, on a snapshot taken after LockHandlerLimits's lock was
    -- granted: it counts the leases the lock's previous holder committed.
    SELECT CASE WHEN l.rate_per_second IS NULL THEN NULL
                ELSE least(l.burst::float8, l.tokens + l.rate_per_second * extract(epoch FROM now() - l.refilled_at)::float8) END,
           l.breaker_failures IS NOT NULL AND l.circuit <> 'closed' AND coalesce(l.next_probe_at <= now(), true)
               AND NOT (l.circuit = 'half_open' AND v_leased > 0),
           l.breaker_probe_interval,
           least(
               CASE WHEN l.breaker_failures IS NULL OR l.circuit = 'closed' THEN p_batch_size
                    -- no next probe (only a fault leaves none): one is due
                    WHEN l.next_probe_at > now() THEN 0
                    -- half open: one probe at a time (041).
                    WHEN l.circuit = 'half_open' AND v_leased > 0 THEN 0
                    ELSE 1 END,
               CASE WHEN l.max_in_flight IS NULL THEN p_batch_size
                    ELSE greatest(l.max_in_flight - v_leased, 0) END,
               p_batch_size)
    INTO v_tokens, v_probe, v_interval, v_quota
    FROM webhook_ingress.handler_limits l
    WHERE l.handler = p_handler
    FOR UPDATE;
    IF NOT FOUND THEN
        -- No row: a consumer registered the handler again without limits
        -- since the streamer listed it; claim_jobs takes it after the next
        -- recount.
        RETURN;
    END IF;
    v_quota := least(v_quota, coalesce(floor(v_tokens)::bigint, v_quota));
    -- Does a dead letter let its key go on? Asked once (see 031).
    v_skip := webhook_ingress.order_skips_dead(p_handler);

    IF v_quota > 0 THEN
        SELECT array_agg(d.id), array_agg(d.ctid), min(d.event_received_at), max(d.event_received_at),
               array_agg(d.id) FILTER (WHERE d.order_key IS NOT NULL),
               array_agg(d.order_key) FILTER (WHERE d.order_key IS NOT NULL)
        INTO v_ids, v_tids, v_min, v_max, v_kids, v_kk
        FROM (
            SELECT j.id, j.ctid, j.event_received_at, j.order_key
            FROM webhook_ingress.jobs j
            WHERE j.status IN ('pending', 'failed')
              AND j.next_attempt_at <= now()
              AND j.handler = p_handler
              -- An ordered handler's job waits for the earlier unfinished
              -- ones of its key (020; a dead one only under its handler's
              -- live order policy block, 027) and for a leased one of its
              -- key, earlier or not (026).
              AND (j.order_key IS NULL OR (NOT EXISTS (
                  SELECT FROM webhook_ingress.order_lanes l
                  WHERE l.handler = j.handler AND l.order_key = j.order_key
                    AND (l.order_at, l.job_id) < (j.order_at, j.id)
                    AND (NOT l.dead OR NOT v_skip))
                AND NOT EXISTS (
                  SELECT FROM webhook_ingress.order_lanes l
                  WHERE l.handler = j.handler AND l.order_key = j.order_key AND l.leased
                    AND l.job_id <> j.id)))
            ORDER BY j.next_attempt_at, j.id
            LIMIT v_quota
            FOR UPDATE OF j SKIP LOCKED
        ) d;
        -- As claim_jobs (030): each key locked until commit, a key another
        -- claim holds passed over, and the lease, on a snapshot taken after
        -- the locks, checks again that no other job of the key is leased.
        IF v_kids IS NOT NULL THEN
            SELECT array_agg(k.id) INTO v_busy
            FROM unnest(v_kids, v_kk) AS k(id, order_key)
            WHERE NOT pg_try_advisory_xact_lock(webhook_ingress.order_key_lock(p_handler, k.order_key));
        END IF;
    END IF;

    -- The lease, and the limits spent on it (the bucket refilled to now
    -- even when nothing was leased, as before).
    RETURN QUERY
    WITH leased AS (
        UPDATE webhook_ingress.jobs j
        SET status           = 'leased',
            attempt_count    = j.attempt_count + 1,
            lease_holder_id  = p_lease_holder,
            lease_expires_at = now() + p_lease_for,
            attempted_at     = now(),
            worker_id        = NULL,
            updated_at       = now()
        WHERE j.ctid = ANY (coalesce(v_tids, '{}'))
          AND j.id = ANY (coalesce(v_ids, '{}'))
          AND j.event_received_at BETWEEN v_min AND v_max
          AND (j.order_key IS NULL OR (
              j.id <> ALL (coalesce(v_busy, '{}'))
              AND NOT EXISTS (
                  SELECT FROM webhook_ingress.order_lanes l
                  WHERE l.handler = j.handler AND l.order_key = j.order_key AND l.leased
                    AND l.job_id <> j.id)))
        RETURNING j.id, j.event_id, j.handler, j.provider, j.event_type, j.attempt_count, j.max_attempts,
                  j.lease_expires_at, coalesce(j.trace_parent, '') AS trace_parent, j.event_received_at, j.attempted_at
    ), spent AS (
        UPDATE webhook_ingress.handler_limits l
        SET tokens             = CASE WHEN v_tokens IS NULL THEN l.tokens ELSE v_tokens - (SELECT count(*) FROM leased) END,
            refilled_at        = CASE WHEN v_tokens IS NULL THEN l.refilled_at ELSE now() END,
            circuit            = CASE WHEN v_probe AND EXISTS (SELECT FROM leased) THEN 'half_open' ELSE l.circuit END,
            circuit_changed_at = CASE WHEN v_probe AND EXISTS (SELECT FROM leased) AND l.circuit <> 'half_open' THEN now() ELSE l.circuit_changed_at END,
            next_probe_at      = CASE WHEN v_probe AND EXISTS (SELECT FROM leased) THEN now() + v_interval ELSE l.next_probe_at END
        WHERE l.handler = p_handler
        RETURNING l.circuit
    )
    SELECT leased.id, leased.event_id, leased.handler, leased.provider, leased.event_type, leased.attempt_count,
           leased.max_attempts, leased.lease_expires_at, leased.trace_parent, leased.event_received_at,
           leased.attempted_at, coalesce(v_probe, false)
    FROM leased;
END
$$;
COMMENT ON FUNCTION webhook_ingress.claim_limited_jobs(text, bigint, text, interval) IS
    'Lease due jobs of one limited handler within its limits, taking 030''s per-key locks as claim_jobs does; one probe at a time when half open, none of a circuit without a breaker; run after LockHandlerLimits in one transaction (033, 041).';
REVOKE ALL ON FUNCTION webhook_ingress.claim_limited_jobs(text, bigint, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.claim_limited_jobs(text, bigint, text, interval) TO webhook_streamer;
