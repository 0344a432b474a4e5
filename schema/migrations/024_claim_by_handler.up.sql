-- 024_claim_by_handler: a handler held back costs the other handlers'
-- claims nothing, however many of its jobs wait.
--
-- The claim walks idx_jobs_claimable in due order (next_attempt_at, id) and
-- leaves out, as a filter, the handlers the streamer holds back: those at
-- streamer.max_leased_per_handler, those whose consumers have all gone quiet,
-- and the limited ones (rate limit, in-flight limit, open circuit), claimed
-- apart. Their due jobs are the oldest in that order, since nobody takes
-- them, so every claim read all of them before reaching another handler's:
-- with 100,000 jobs of a dead consumer's handler waiting, a claim of 100 jobs
-- of a healthy one took 35-40 ms instead of 1-3 (and the bench's jobs
-- section, run after the e2e section had left its handler's backlog behind,
-- delivered 651-808 jobs/s instead of 8,000-15,000). A dead handler delayed
-- every other one, which guarantee 3 rules out.
--
-- Now:
--
-- * idx_jobs_due_by_handler: the due jobs (pending, or failed awaiting
--   retry) by handler, then due order. Partial like idx_jobs_claimable, so
--   only a job's creation and its return to pending or failed add an entry;
--   a claim or a completion adds none.
-- * claim_jobs, when it is given handlers to leave out, lists the handlers
--   with due jobs (one index probe each, skipping from one handler to the
--   next), takes each other handler's first batch_size in due order, and
--   leases the batch_size first of those in due order: the same jobs the walk
--   leased, without reading the held-back ones. With no handler left out
--   (the usual case) it runs the walk as before. Same signature, so services
--   of the previous version call it unchanged.
-- * Either way claim_jobs first locks the jobs it takes, then leases them by
--   tuple id. Its UPDATE joined the locked jobs back to jobs, planned on the
--   generic plan's guess of their number (a tenth of an unknown LIMIT):
--   with statistics taken while a partition was a third of its size and its
--   jobs were due, a hash join that read the whole partition on every
--   claim, 60-100 ms for 100 jobs (the same bench sequence).
-- * ClaimLimitedJobs (a limited handler's own claim, handler = $1) may use
--   the new index too: its handler is the index's first column.
--
-- Safe on a large live queue: the index is made on the parent ON ONLY
-- (instant) and built inline on partitions of at most 10,000 rows; larger
-- ones are left to schema.BuildIndexes, which inlet migrate runs after this
-- transaction with CREATE INDEX CONCURRENTLY (the streamers go on claiming
-- meanwhile, held-back handlers' jobs still read on those partitions).

SET LOCAL lock_timeout = '10s';

CREATE INDEX idx_jobs_due_by_handler ON ONLY webhook_ingress.jobs (handler, next_attempt_at, id)
    WHERE status IN ('pending', 'failed');
COMMENT ON INDEX webhook_ingress.idx_jobs_due_by_handler IS
    'Due jobs (pending, or failed awaiting retry) by handler, then due order: a claim that holds some handlers back reads only the others'' (024_claim_by_handler). Built per partition.';

DO $$
DECLARE
    part regclass;
    idx  text;
BEGIN
    FOR part IN
        SELECT i.inhrelid::regclass FROM pg_catalog.pg_inherits i
        WHERE i.inhparent = 'webhook_ingress.jobs'::regclass
    LOOP
        EXECUTE format('SELECT count(*) > 10000 FROM (SELECT FROM %s LIMIT 10001) s', part) INTO STRICT idx;
        IF idx::boolean THEN
            CONTINUE; -- left to schema.BuildIndexes (CONCURRENTLY)
        END IF;
        idx := (SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid = part) || '_due_by_handler_idx';
        EXECUTE format('CREATE INDEX %I ON %s (handler, next_attempt_at, id) WHERE status IN (''pending'', ''failed'')', idx, part);
        EXECUTE format('ALTER INDEX webhook_ingress.idx_jobs_due_by_handler ATTACH PARTITION webhook_ingress.%I', idx);
    END LOOP;
END
$$;

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
              AND (j.order_key IS NULL OR NOT EXISTS (
                  SELECT FROM webhook_ingress.order_lanes l
                  WHERE l.handler = j.handler AND l.order_key = j.order_key
                    AND (l.order_at, l.job_id) < (j.order_at, j.id)
                    AND (NOT l.dead OR NOT EXISTS (
                        SELECT FROM webhook_ingress.subscriptions s WHERE s.handler = j.handler AND s.order_policy = 'skip'))))
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
                  AND (j.order_key IS NULL OR NOT EXISTS (
                      SELECT FROM webhook_ingress.order_lanes l
                      WHERE l.handler = j.handler AND l.order_key = j.order_key
                        AND (l.order_at, l.job_id) < (j.order_at, j.id)
                        AND (NOT l.dead OR NOT EXISTS (
                            SELECT FROM webhook_ingress.subscriptions s WHERE s.handler = j.handler AND s.order_policy = 'skip'))))
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
