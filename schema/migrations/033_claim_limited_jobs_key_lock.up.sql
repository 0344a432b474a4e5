-- 033_claim_limited_jobs_key_lock: a limited handler's claim takes 030's
-- per-key locks too, closing the gap 030 left.
--
-- 030 made two claims of one key take turns: claim_jobs and
-- claim_handler_jobs lock each keyed job's key (pg_try_advisory_xact_lock,
-- passing over a key another claim holds) and lease in a later statement,
-- on a snapshot that holds every lease of those keys committed before.
-- ClaimLimitedJobs took no key lock: two limited claims take turns on the
-- handler's limits row, and claim_jobs leaves limited handlers to it. But a
-- streamer's list of limited handlers is a claim round old: in the round
-- after a consumer first gives an ordered handler limits, one streamer could
-- still lease a job of key k through claim_jobs while another's
-- ClaimLimitedJobs, on a snapshot taken before the first committed, leased
-- another job of k (schema TestConcurrentClaimsNeverLeaseTwoJobsOfAKey,
-- claim_jobs then ClaimLimitedJobs: both leased).
--
-- claim_limited_jobs(handler, batch_size, lease_holder, lease_for) is
-- ClaimLimitedJobs's statement taken apart as claim_handler_jobs is: the
-- limits (the row, which LockHandlerLimits locked before, in the same
-- transaction: see ClaimLimitedJobs), then the due jobs within the quota
-- (FOR UPDATE SKIP LOCKED), then the keys of the keyed ones locked, then the
-- lease, on a fresh snapshot, checking again that no other job of a key is
-- leased and passing over a key another claim holds, and the limits spent
-- on what was leased. The quota, the circuit's probe and the bucket are
-- computed as before. ClaimLimitedJobs now calls it.
--
-- Cost: for a handler without ordered jobs, none (no keyed job, no lock);
-- per keyed job, one lock and one probe of order_lanes, as in claim_jobs.
-- SECURITY INVOKER, EXECUTE for webhook_streamer only, as claim_jobs.
--
-- Upgrading: streamers of the previous version run their own statement,
-- which takes no key lock, so the gap stays open while they run beside new
-- ones (and only in the round after an ordered handler first gets limits).

CREATE FUNCTION webhook_ingress.claim_limited_jobs(p_handler text, p_batch_size bigint, p_lease_holder text, p_lease_for interval)
    RETURNS TABLE (id bigint, event_id bigint, handler text, provider text, event_type text, attempt_count integer,
                   max_attempts integer, lease_expires_at timestamptz, trace_parent text, event_received_at timestamptz,
                   attempted_at timestamptz, probe boolean)
    LANGUAGE plpgsql
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
BEGIN
    -- The limits, on a snapshot taken after LockHandlerLimits's lock was
    -- granted: it counts the leases the lock's previous holder committed.
    SELECT CASE WHEN l.rate_per_second IS NULL THEN NULL
                ELSE least(l.burst::float8, l.tokens + l.rate_per_second * extract(epoch FROM now() - l.refilled_at)::float8) END,
           l.circuit <> 'closed' AND l.next_probe_at <= now(),
           l.breaker_probe_interval,
           least(
               CASE WHEN l.circuit <> 'closed' AND (l.next_probe_at IS NULL OR l.next_probe_at > now()) THEN 0
                    WHEN l.circuit <> 'closed' THEN 1
                    ELSE p_batch_size END,
               CASE WHEN l.max_in_flight IS NULL THEN p_batch_size
                    ELSE greatest(l.max_in_flight - (SELECT count(*) FROM webhook_ingress.jobs f
                                                     WHERE f.handler = l.handler AND f.status = 'leased'
                                                       AND f.lease_expires_at IS NOT NULL), 0) END,
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
    'Lease due jobs of one limited handler within its limits, taking 030''s per-key locks as claim_jobs does; run after LockHandlerLimits in one transaction (033_claim_limited_jobs_key_lock).';
REVOKE ALL ON FUNCTION webhook_ingress.claim_limited_jobs(text, bigint, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.claim_limited_jobs(text, bigint, text, interval) TO webhook_streamer;
