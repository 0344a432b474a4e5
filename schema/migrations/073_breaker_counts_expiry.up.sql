-- 073_breaker_counts_expiry: an attempt the reaper closes as lease_expired
-- is a failure of its handler's circuit breaker, and a half-open circuit's
-- probe waits for every job of its handler to end (review helper-273).
--
-- 1. A breaker counted only the outcomes a consumer records (HandlerFailed).
--    An attempt that ran and never reported (a poison event that hangs its
--    handler past its Timeout, ignoring its context, or crashes or
--    OOM-kills its consumer) is closed by the streamer's reaper as
--    lease_expired (ReapExpiredLeases), which left handler_limits alone, and
--    a reset's recount (handler_failures_since, 059) counted 'failed' and
--    'dead_letter' only: the handler whose every attempt died was fed on,
--    its circuit closed, until every job was dead-lettered. The reaper now
--    counts each attempt it closes as lease_expired (those that ran, never a
--    lease given back unrun) through count_expired_attempts, as HandlerFailed
--    counts a consumer's failure: one more consecutive failure each, the
--    circuit open at breaker_failures, a half-open circuit's probe that
--    expired opens it again; and handler_failures_since counts
--    'lease_expired' too, so a reset keeps them.
--    SECURITY DEFINER: webhook_streamer, the reaper's role, may not write
--    consecutive_failures (017); it only adds one per handler named, and the
--    rows are locked in handler order, so two reapers never deadlock.
-- 2. claim_limited_jobs (041) refused a probe while jobs were leased only
--    when the circuit was half_open. A job leased before the circuit opened
--    that failed while the probe ran turned half_open back to open
--    (HandlerFailed), and the next probe was leased at its time while the
--    first still ran: a slow downstream, whose in-flight attempts fail one
--    by one as they time out, got probe after probe at once. A probe is now
--    leased only when none of the handler's jobs is leased, whatever the
--    circuit: the jobs leased before it opened end first.
--
-- Safe on a live log: functions are replaced and granted; no table is
-- touched. It runs twice safely (CREATE OR REPLACE keeps owners and grants;
-- the revokes, grants and comments change nothing again). Streamers of the
-- previous version reap as before (their expiries are not counted on the
-- row, but a reset's recount counts them) and call the new claim.

CREATE OR REPLACE FUNCTION webhook_ingress.handler_failures_since(p_handler text, p_since timestamptz)
    RETURNS integer
    LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
DECLARE
    caller       text := coalesce(nullif(current_setting('role'), 'none'), session_user);
    unrestricted boolean;
    n            integer;
BEGIN
    SELECT a.rolsuper OR a.rolbypassrls OR NOT pg_has_role(a.oid, 'webhook_consumer'::regrole, 'USAGE')
    INTO unrestricted
    FROM pg_catalog.pg_roles a WHERE a.rolname = caller;
    IF NOT coalesce(unrestricted, false)
       AND NOT EXISTS (SELECT FROM webhook_ingress.consumer_roles r WHERE r.role_name = caller AND r.handler = p_handler) THEN
        RAISE EXCEPTION 'handler % is not one of role %''s handlers', p_handler, caller USING ERRCODE = '42501';
    END IF;
    -- lease_expired: an attempt that ran and never reported, which the
    -- reaper counted (073).
    SELECT count(*)::integer INTO n
    FROM webhook_ingress.job_attempts a
    JOIN webhook_ingress.jobs j ON j.id = a.job_id AND j.event_received_at = a.event_received_at
    WHERE j.handler = p_handler AND a.outcome IN ('failed', 'dead_letter', 'lease_expired')
      AND a.finished_at > p_since;
    RETURN n;
END
$$;
REVOKE ALL ON FUNCTION webhook_ingress.handler_failures_since(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.handler_failures_since(text, timestamptz) TO webhook_worker, webhook_consumer;

-- p_handlers: the handler of each attempt the reaper closed as
-- lease_expired, once per attempt. Returns each handler with a breaker whose
-- row counted them: its circuit before and after. As HandlerFailed, a
-- failure recorded by a transaction that began before the handler's newest
-- success (last_success_at) is older than it: not counted.
CREATE OR REPLACE FUNCTION webhook_ingress.count_expired_attempts(p_handlers text[])
    RETURNS TABLE (handler text, was text, circuit text)
    LANGUAGE plpgsql STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH n AS (
        SELECT h.handler, count(*)::integer AS n
        FROM unnest(p_handlers) AS h(handler)
        GROUP BY h.handler
    ), before AS (
        -- Locked in handler order: two reapers (two streamers) counting
        -- for the same handlers take their rows in the same order.
        SELECT l.handler, l.circuit
        FROM webhook_ingress.handler_limits l
        WHERE l.handler IN (SELECT n.handler FROM n) AND l.breaker_failures IS NOT NULL
        ORDER BY l.handler
        FOR UPDATE OF l
    ), counted AS (
        UPDATE webhook_ingress.handler_limits l
        SET consecutive_failures = l.consecutive_failures + n.n,
            circuit              = CASE WHEN l.circuit = 'half_open' OR l.consecutive_failures + n.n >= l.breaker_failures
                                        THEN 'open' ELSE l.circuit END,
            circuit_changed_at   = CASE WHEN l.circuit <> 'open'
                                             AND (l.circuit = 'half_open' OR l.consecutive_failures + n.n >= l.breaker_failures)
                                        THEN now() ELSE l.circuit_changed_at END,
            next_probe_at        = CASE WHEN l.circuit <> 'open'
                                             AND (l.circuit = 'half_open' OR l.consecutive_failures + n.n >= l.breaker_failures)
                                        THEN now() + l.breaker_probe_interval ELSE l.next_probe_at END,
            updated_at           = now()
        FROM before JOIN n ON n.handler = before.handler
        WHERE l.handler = before.handler AND now() > coalesce(l.last_success_at, '-infinity')
        RETURNING l.handler, before.circuit AS was, l.circuit
    )
    SELECT counted.handler, counted.was, counted.circuit FROM counted;
END
$$;
COMMENT ON FUNCTION webhook_ingress.count_expired_attempts(text[]) IS
    'The reaper''s expired attempts that ran, one handler name each, counted against their handlers'' circuit breakers as HandlerFailed counts a consumer''s failure; returns each counted handler''s circuit before and after (073).';
REVOKE ALL ON FUNCTION webhook_ingress.count_expired_attempts(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.count_expired_attempts(text[]) TO webhook_streamer;

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
    -- The handler's leased jobs, counted once: the in-flight limit, and the
    -- jobs a probe waits for (041, 073). On a snapshot taken after
    -- LockHandlerLimits's lock was granted, as the limits below.
    SELECT count(*) INTO v_leased FROM webhook_ingress.jobs f
    WHERE f.handler = p_handler AND f.status = 'leased' AND f.lease_expires_at IS NOT NULL;
    -- The limits, on a snapshot taken after LockHandlerLimits's lock was
    -- granted: it counts the leases the lock's previous holder committed.
    SELECT CASE WHEN l.rate_per_second IS NULL THEN NULL
                ELSE least(l.burst::float8, l.tokens + l.rate_per_second * extract(epoch FROM now() - l.refilled_at)::float8) END,
           l.breaker_failures IS NOT NULL AND l.circuit <> 'closed' AND coalesce(l.next_probe_at <= now(), true)
               AND v_leased = 0,
           l.breaker_probe_interval,
           least(
               CASE WHEN l.breaker_failures IS NULL OR l.circuit = 'closed' THEN p_batch_size
                    -- no next probe (only a fault leaves none): one is due
                    WHEN l.next_probe_at > now() THEN 0
                    -- One probe at a time, and only once every job of the
                    -- handler has ended: a job leased before the circuit
                    -- opened that fails while the probe runs opens the
                    -- circuit again, and a probe fenced on half_open alone
                    -- was leased beside the first (041, 073).
                    WHEN v_leased > 0 THEN 0
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
    'Lease due jobs of one limited handler within its limits, taking 030''s per-key locks as claim_jobs does; a probe only while none of the handler''s jobs is leased, none of a circuit without a breaker; run after LockHandlerLimits in one transaction (033, 041, 073).';
REVOKE ALL ON FUNCTION webhook_ingress.claim_limited_jobs(text, bigint, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.claim_limited_jobs(text, bigint, text, interval) TO webhook_streamer;
