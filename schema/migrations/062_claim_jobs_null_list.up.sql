-- 062_claim_jobs_null_list: claim_jobs reads a NULL list of held handlers as
-- an empty one (review helper-165).
--
-- 061 built the held list as p_full_handlers || (the limited handlers not
-- in it). With p_full_handlers NULL (pgx sends a nil []string as NULL; the
-- 4-argument wrapper of 023 passes it on) every "<> ALL (NULL)" was NULL, so
-- no limited handler was added, NULL || '{}' was '{}', and the claim took
-- the branch that walks every handler: a handler with max_in_flight 1 had
-- its whole backlog leased. The streamer always passes a list (empty or
-- not), so no shipped caller was exposed. Now NULL means "none named": the
-- limited handlers are held back all the same, the others are claimed.
-- The rest is 061's definition. Nothing to drain.

CREATE OR REPLACE FUNCTION webhook_ingress.claim_jobs(p_full_handlers text[], p_batch_size bigint, p_lease_holder text, p_lease_for interval,
                                                      p_window interval)
    RETURNS TABLE (id bigint, event_id bigint, handler text, provider text, event_type text, attempt_count integer,
                   max_attempts integer, lease_expires_at timestamptz, trace_parent text, event_received_at timestamptz,
                   attempted_at timestamptz)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan
    SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_from timestamptz := coalesce(now() - p_window, '-infinity');
    v_ids  bigint[];
    v_tids tid[];
    v_min  timestamptz;
    v_max  timestamptz;
    v_kids bigint[]; -- the keyed jobs locked
    v_kh   text[];   -- their handlers
    v_kk   text[];   -- their keys
    v_busy bigint[]; -- those whose key another claim is leasing
    -- The handlers held back: those the streamer names, and every limited
    -- handler (a limits row) it does not know of yet (its list is up to a
    -- recount old: a consumer registering limits in between had a whole
    -- batch leased here, limits unheld; 061). One read of a small table.
    -- (A NULL list names none: 062.)
    v_held text[] := coalesce(p_full_handlers, '{}') || ARRAY(SELECT l.handler FROM webhook_ingress.handler_limits l
                                             WHERE l.handler <> ALL (coalesce(p_full_handlers, '{}')));
BEGIN
    -- First the jobs to lease are locked, then leased by their tuple ids.
    -- A keyed job waits while an earlier job of its handler and key is
    -- unfinished (020) or another one of them is leased (026).
    IF cardinality(v_held) = 0 THEN
        -- Every handler: walk the due jobs in order.
        SELECT array_agg(d.id), array_agg(d.ctid), min(d.event_received_at), max(d.event_received_at),
               array_agg(d.id) FILTER (WHERE d.order_key IS NOT NULL),
               array_agg(d.handler) FILTER (WHERE d.order_key IS NOT NULL),
               array_agg(d.order_key) FILTER (WHERE d.order_key IS NOT NULL)
        INTO v_ids, v_tids, v_min, v_max, v_kids, v_kh, v_kk
        FROM (
            SELECT j.id, j.ctid, j.event_received_at, j.handler, j.order_key
            FROM webhook_ingress.jobs j
            WHERE j.status IN ('pending', 'failed')
              AND j.next_attempt_at <= now()
              AND j.event_received_at >= v_from
              AND (j.order_key IS NULL OR (NOT EXISTS (
                  SELECT FROM webhook_ingress.order_lanes l
                  WHERE l.handler = j.handler AND l.order_key = j.order_key
                    AND (l.order_at, l.job_id) < (j.order_at, j.id)
                    AND (NOT l.dead OR NOT webhook_ingress.order_skips_dead(j.handler)))
                AND NOT EXISTS (
                  SELECT FROM webhook_ingress.order_lanes l
                  WHERE l.handler = j.handler AND l.order_key = j.order_key AND l.leased
                    AND l.job_id <> j.id)))
            ORDER BY j.next_attempt_at, j.id
            LIMIT p_batch_size
            FOR UPDATE OF j SKIP LOCKED
        ) d;
    ELSE
        -- Some handlers held back: read only the others' due jobs, through
        -- idx_jobs_due_by_handler.
        WITH RECURSIVE handlers AS (
            -- The handlers with jobs pending or failed, one index probe
            -- each: the least, then the least after it, and so on (a loose
            -- index scan). Not bounded by the window: a bound the index does
            -- not hold would make a probe read a held-back handler's jobs
            -- outside it.
            (SELECT j.handler
             FROM webhook_ingress.jobs j
             WHERE j.status IN ('pending', 'failed')
             ORDER BY j.handler
             LIMIT 1)
            UNION ALL
            SELECT (SELECT j.handler
                    FROM webhook_ingress.jobs j
                    WHERE j.status IN ('pending', 'failed')
                      AND j.handler > h.handler
                    ORDER BY j.handler
                    LIMIT 1)
            FROM handlers h
            WHERE h.handler IS NOT NULL
        ), candidates AS (
            -- Each other handler's first batch_size due jobs, and of those
            -- the first batch_size in due order.
            SELECT c.id, c.event_received_at
            FROM (SELECT handlers.handler FROM handlers
                  WHERE handlers.handler IS NOT NULL
                    AND handlers.handler <> ALL (v_held)) h
            CROSS JOIN LATERAL (
                SELECT j.id, j.event_received_at, j.next_attempt_at
                FROM webhook_ingress.jobs j
                WHERE j.handler = h.handler
                  AND j.status IN ('pending', 'failed')
                  AND j.next_attempt_at <= now()
                  AND j.event_received_at >= v_from
                  AND (j.order_key IS NULL OR (NOT EXISTS (
                      SELECT FROM webhook_ingress.order_lanes l
                      WHERE l.handler = j.handler AND l.order_key = j.order_key
                        AND (l.order_at, l.job_id) < (j.order_at, j.id)
                        AND (NOT l.dead OR NOT webhook_ingress.order_skips_dead(j.handler)))
                    AND NOT EXISTS (
                      SELECT FROM webhook_ingress.order_lanes l
                      WHERE l.handler = j.handler AND l.order_key = j.order_key AND l.leased
                        AND l.job_id <> j.id)))
                ORDER BY j.next_attempt_at, j.id
                LIMIT p_batch_size
            ) c
            ORDER BY c.next_attempt_at, c.id
            LIMIT p_batch_size
        )
        -- Read without a lock above: locked now, each by its primary key,
        -- and checked again (another streamer may have leased one
        -- meanwhile; SKIP LOCKED passes over those it is leasing).
        SELECT array_agg(l.id), array_agg(l.ctid), min(l.event_received_at), max(l.event_received_at),
               array_agg(l.id) FILTER (WHERE l.order_key IS NOT NULL),
               array_agg(l.handler) FILTER (WHERE l.order_key IS NOT NULL),
               array_agg(l.order_key) FILTER (WHERE l.order_key IS NOT NULL)
        INTO v_ids, v_tids, v_min, v_max, v_kids, v_kh, v_kk
        FROM candidates c
        CROSS JOIN LATERAL (
            SELECT j.id, j.ctid, j.event_received_at, j.handler, j.order_key
            FROM webhook_ingress.jobs j
            WHERE j.id = c.id
              AND j.event_received_at = c.event_received_at
              AND j.event_received_at >= v_from
              AND j.status IN ('pending', 'failed')
              AND j.next_attempt_at <= now()
            LIMIT 1
            FOR UPDATE OF j SKIP LOCKED
        ) l;
    END IF;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    -- Each keyed job's key is locked until this claim commits (030); a key
    -- another claim holds is passed over, as SKIP LOCKED passes over a row.
    -- The lease below is a later statement, so its snapshot, taken after
    -- these locks were granted, holds every lease of the key committed by
    -- a claim that held its lock before: it checks again that no other job
    -- of the key is leased.
    IF v_kids IS NOT NULL THEN
        SELECT array_agg(k.id) INTO v_busy
        FROM unnest(v_kids, v_kh, v_kk) AS k(id, handler, order_key)
        WHERE NOT pg_try_advisory_xact_lock(webhook_ingress.order_key_lock(k.handler, k.order_key));
    END IF;
    -- The rows locked above (unchanged since: locked), by tuple id in the
    -- partitions between their least and greatest received_at; the ids tell
    -- a row from another partition's at the same tuple id. A join to the
    -- locked rows was planned on a guess of their number (a tenth of an
    -- unknown LIMIT) and, with statistics of a partition taken while it was
    -- smaller, read the whole partition on every claim.
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
