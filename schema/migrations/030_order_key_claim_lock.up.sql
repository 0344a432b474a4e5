-- 030_order_key_claim_lock: two claims never lease two jobs of one key.
--
-- 026 holds a keyed job back while another job of its key is leased, but a
-- claim sees only the leases committed when its statement began. Streamer
-- A's claim leases a2 of key k1 (a1, which occurred before it, had not
-- arrived); a1 arrives; streamer B's claim, before A's commit, sees a1 and
-- no lease of k1, and leases a1: k1 ran two jobs at once (schema
-- TestConcurrentClaimsNeverLeaseTwoJobsOfAKey).
--
-- Now claim_jobs, after locking its rows and before leasing them, takes a
-- transaction-level advisory lock per key of the keyed jobs it locked
-- (pg_try_advisory_xact_lock: never waits) and passes over a job whose key
-- another claim holds. The lease is the function's next statement: its
-- snapshot is taken after the locks were granted, so it sees the leases of
-- every claim that held one of those keys before (a lock is released after
-- its holder's commit is visible), and it checks again that no other job
-- of the key is leased. Two claims of one key are thus ordered: the second
-- sees the first's lease.
--
-- The lock's key is order_key_lock(handler, key): a 64-bit hash of both
-- in the single-bigint advisory lock space, with an "inlet:order-key:"
-- prefix so it does not meet the migrator's and the event type fold's
-- locks. Two keys with one hash only pass each other over for one claim.
--
-- ClaimLimitedJobs (schema/queries/limits.sql) needs no lock: it runs after
-- LockHandlerLimits in one transaction, so two claims of a limited handler
-- already take turns, each on a snapshot taken after the other's commit,
-- and claim_jobs does not lease a limited handler's jobs (the streamer
-- holds them back). One gap stays: in the claim round after a consumer
-- first gives a handler limits, a streamer whose list of limited handlers
-- is a round old may still claim it through claim_jobs beside another's
-- ClaimLimitedJobs.
--
-- Cost: nothing for unkeyed jobs (one more FILTER per aggregate); per keyed
-- job, one advisory lock and one probe of order_lanes by key. Same
-- signature: streamers of the previous version call it and get the fix.
-- Functions only: no table is locked or rewritten.

CREATE FUNCTION webhook_ingress.order_key_lock(p_handler text, p_order_key text) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT hashtextextended('inlet:order-key:' || p_handler || E'\n' || p_order_key, 0)
$$;
COMMENT ON FUNCTION webhook_ingress.order_key_lock(text, text) IS
    'The advisory lock key claim_jobs takes, until it commits, for each keyed job it leases (030_order_key_claim_lock).';
REVOKE ALL ON FUNCTION webhook_ingress.order_key_lock(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.order_key_lock(text, text) TO webhook_streamer;

-- 027's, locking each key before leasing.
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
    v_kids bigint[]; -- the keyed jobs locked
    v_kh   text[];   -- their handlers
    v_kk   text[];   -- their keys
    v_busy bigint[]; -- those whose key another claim is leasing
BEGIN
    -- First the jobs to lease are locked, then leased by their tuple ids.
    -- A keyed job waits while an earlier job of its handler and key is
    -- unfinished (020) or another one of them is leased (026).
    IF cardinality(p_full_handlers) = 0 THEN
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
