-- 027_order_policy_enabled: a dead letter's order policy is its handler's
-- live one, from its enabled subscriptions.
--
-- A dead-lettered job of an ordered handler holds its key under
-- order_policy block and not under skip. The claim decided skip when any
-- subscription row of the handler said skip, and the DLQ listing counted
-- what a dead letter holds back when any row said block, both counting
-- disabled rows. Register disables a handler's rows for patterns it no
-- longer declares, so an ordinary config change (skip on invoice.* to block
-- on *) left a disabled skip row that went on deciding: the claim leased a
-- later job of a key whose earlier job is dead-lettered although the live
-- config says block, while `inlet dlq list` said the dead letter held it
-- back (schema TestOrderPolicyComesFromEnabledSubscriptions).
--
-- Now one function decides, for every place that asks:
--
-- * order_skips_dead(handler): skip when an enabled subscription of the
--   handler says skip; a handler with none enabled (switched off with
--   `inlet subscriptions disable`: its jobs already created still run)
--   keeps what its rows said before (skip when any says skip); no row at
--   all: block, the default. SECURITY INVOKER: the caller's privileges and
--   row security apply (the streamer reads subscriptions' handler, enabled
--   and order_policy; the operator and the auditor read everything).
-- * claim_jobs (both its paths) calls it. Same signature, 026's body but
--   for that call: streamers of the previous version call it and get the
--   fix.
-- * ClaimLimitedJobs (schema/queries/limits.sql) and AdminListDeadLetters
--   (schema/queries/admin.sql) call it too, but their text is in the
--   binary: streamers of the previous version keep the old rule for their
--   limited ordered handlers, and `inlet dlq list`, the dashboard and the
--   admin API of the previous version keep the old count, until they are
--   replaced.
--
-- Cost: one call (one probe of subscriptions by handler) per dead lane
-- earlier than a keyed job the claim considers, where the subquery it
-- replaces made one probe; nothing for a key with no dead letter.
-- Functions only: no table is locked or rewritten.

CREATE FUNCTION webhook_ingress.order_skips_dead(p_handler text) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT coalesce(bool_or(s.order_policy = 'skip') FILTER (WHERE s.enabled),
                    bool_or(s.order_policy = 'skip'),
                    false)
    FROM webhook_ingress.subscriptions s
    WHERE s.handler = p_handler
$$;
COMMENT ON FUNCTION webhook_ingress.order_skips_dead(text) IS
    'Does a dead letter of handler p_handler let its key go on (order_policy skip)? Its enabled subscriptions decide; with none enabled, skip when any of its rows says skip; with no row, no (block, the default). Every claim and the DLQ listing ask it (027_order_policy_enabled).';
REVOKE ALL ON FUNCTION webhook_ingress.order_skips_dead(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.order_skips_dead(text) TO webhook_streamer, webhook_operator, webhook_auditor;

-- 026's, asking order_skips_dead.
CREATE OR REPLACE FUNCTION webhook_ingress.claim_jobs(p_full_handlers text[], p_batch_size bigint, p_lease_holder text, p_lease_for interval,
                                                      p_window interval)
    RETURNS TABLE (id bigint, event_id bigint, handler text, provider text, event_type text, attempt_count integer,
                   max_attempts integer, lease_expires_at timestamptz, trace_parent text, event_received_at timestamptz,
                   attempted_at timestamptz)
    LANGUAGE plpgsql
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
BEGIN
    -- First the jobs to lease are locked, then leased by their tuple ids.
    -- A keyed job waits while an earlier job of its handler and key is
    -- unfinished (020) or another one of them is leased (026).
    IF cardinality(p_full_handlers) = 0 THEN
        -- Every handler: walk the due jobs in order.
        SELECT array_agg(d.id), array_agg(d.ctid), min(d.event_received_at), max(d.event_received_at)
        INTO v_ids, v_tids, v_min, v_max
        FROM (
            SELECT j.id, j.ctid, j.event_received_at
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
                    AND handlers.handler <> ALL (p_full_handlers)) h
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
        SELECT array_agg(l.id), array_agg(l.ctid), min(l.event_received_at), max(l.event_received_at)
        INTO v_ids, v_tids, v_min, v_max
        FROM candidates c
        CROSS JOIN LATERAL (
            SELECT j.id, j.ctid, j.event_received_at
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
        RETURNING j.id, j.event_id, j.handler, j.provider, j.event_type, j.attempt_count, j.max_attempts,
                  j.lease_expires_at, coalesce(j.trace_parent, '') AS trace_parent, j.event_received_at, j.attempted_at
    )
    SELECT * FROM leased;
END
$$;
