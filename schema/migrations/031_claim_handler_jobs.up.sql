-- 031_claim_handler_jobs: a claim of one handler's jobs, so a handler's
-- backlog that its order holds back costs the other handlers' claims nothing.
--
-- A key held back by a failing or dead-lettered head leaves its waiting
-- jobs due, and a claim walks past each of them (one probe of order_lanes
-- each) before it reaches other jobs: 40,000 held jobs of one ordered
-- handler took another handler's claim of 100 jobs 359 ms behind a failing
-- head, 662 ms behind a dead letter (1.6 / 1.8 ms with this). The
-- streamer now claims the handlers whose jobs can be held back (ordered
-- ones, and limited ones as before) apart from the others, in a loop of
-- their own: claim_jobs gets them in p_full_handlers and reads only the
-- others' due jobs (idx_jobs_due_by_handler, 024), and each is claimed by
-- this function.
--
-- claim_handler_jobs(handler, batch_size, lease_holder, lease_for): up to
-- batch_size due jobs of handler, in due order, under the same rules as
-- claim_jobs (020, 026, 027, and 030's per-key locks), over every
-- partition (idx_jobs_due_by_handler); it asks order_skips_dead (027) once,
-- where claim_jobs asks it per job behind a dead letter. Returns what
-- claim_jobs returns.
-- SECURITY INVOKER, EXECUTE for webhook_streamer only, as claim_jobs.
--
-- Upgrading: streamers of the previous version never call it and claim
-- ordered handlers with the others, as before; a mix is safe (the same
-- rules, the same locks).

CREATE FUNCTION webhook_ingress.claim_handler_jobs(p_handler text, p_batch_size bigint, p_lease_holder text, p_lease_for interval)
    RETURNS TABLE (id bigint, event_id bigint, handler text, provider text, event_type text, attempt_count integer,
                   max_attempts integer, lease_expires_at timestamptz, trace_parent text, event_received_at timestamptz,
                   attempted_at timestamptz)
    LANGUAGE plpgsql
    SET plan_cache_mode = force_generic_plan
    SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_ids  bigint[];
    v_tids tid[];
    v_min  timestamptz;
    v_max  timestamptz;
    v_kids bigint[]; -- the keyed jobs locked
    v_kk   text[];   -- their keys
    v_busy bigint[]; -- those whose key another claim is leasing
    -- Does a dead letter let its key go on? Asked once, not per job walked
    -- past (a function call each: 40,000 jobs held behind a dead letter took
    -- a claim over a second).
    v_skip boolean := webhook_ingress.order_skips_dead(p_handler);
BEGIN
    SELECT array_agg(d.id), array_agg(d.ctid), min(d.event_received_at), max(d.event_received_at),
           array_agg(d.id) FILTER (WHERE d.order_key IS NOT NULL),
           array_agg(d.order_key) FILTER (WHERE d.order_key IS NOT NULL)
    INTO v_ids, v_tids, v_min, v_max, v_kids, v_kk
    FROM (
        SELECT j.id, j.ctid, j.event_received_at, j.order_key
        FROM webhook_ingress.jobs j
        WHERE j.handler = p_handler
          AND j.status IN ('pending', 'failed')
          AND j.next_attempt_at <= now()
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
        LIMIT p_batch_size
        FOR UPDATE OF j SKIP LOCKED
    ) d;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    -- As claim_jobs (030): each key locked until commit, a key another
    -- claim holds passed over, and the lease, on a snapshot taken after the
    -- locks, checks again that no other job of the key is leased.
    IF v_kids IS NOT NULL THEN
        SELECT array_agg(k.id) INTO v_busy
        FROM unnest(v_kids, v_kk) AS k(id, order_key)
        WHERE NOT pg_try_advisory_xact_lock(webhook_ingress.order_key_lock(p_handler, k.order_key));
    END IF;
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
        WHERE j.ctid = ANY (v_tids)
          AND j.id = ANY (v_ids)
          AND j.event_received_at BETWEEN v_min AND v_max
          AND (j.order_key IS NULL OR (
              j.id <> ALL (coalesce(v_busy, '{}'))
              AND NOT EXISTS (
                  SELECT FROM webhook_ingress.order_lanes l
                  WHERE l.handler = j.handler AND l.order_key = j.order_key AND l.leased
                    AND l.job_id <> j.id)))
        RETURNING j.id, j.event_id, j.handler, j.provider, j.event_type, j.attempt_count, j.max_attempts,
                  j.lease_expires_at, coalesce(j.trace_parent, '') AS trace_parent, j.event_received_at, j.attempted_at
    )
    SELECT * FROM leased;
END
$$;
COMMENT ON FUNCTION webhook_ingress.claim_handler_jobs(text, bigint, text, interval) IS
    'Lease up to p_batch_size due jobs of one handler, as claim_jobs leases: the streamer claims ordered and limited handlers apart, so a held-back backlog costs the others'' claims nothing (031_claim_handler_jobs).';
REVOKE ALL ON FUNCTION webhook_ingress.claim_handler_jobs(text, bigint, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.claim_handler_jobs(text, bigint, text, interval) TO webhook_streamer;
