-- 026_order_lanes_leased: an ordered handler's key runs one job at a time,
-- also when an earlier event of the key arrives while a later one runs.
--
-- The claim leased a keyed job when no earlier (order_at, job_id) lane of
-- its handler and key was unfinished. An event that occurred before the
-- key's running job but arrived after it was leased (a provider's late or
-- retried delivery) has nothing earlier than it, so it was leased at once,
-- beside the running job: two jobs of one key at the same time
-- (streamer TestOrderKeyLateEarlierEventWaitsForTheRunningJob).
--
-- Now a keyed job is leased only when, besides that, no other job of its
-- handler and key is leased:
--
-- * order_lanes.leased: true exactly while the lane's job is leased. The
--   lane triggers now also fire when a keyed job enters or leaves leased
--   (a claim, a release, a failure, a reaped or dead-lettered lease, a
--   completion); unordered jobs still never fire them. A constant default:
--   no rewrite of order_lanes.
-- * order_lanes_leased: the leased lanes by handler and key, partial (only
--   the jobs running now), so the check is one probe of a small index per
--   keyed job the claim considers.
-- * claim_jobs (both its paths: the walk, and the claim by handler of 024)
--   checks it. Same signature: streamers of the previous version call it
--   and get the fix.
-- * ClaimLimitedJobs (an ordered handler with limits) checks it too, but its
--   text is in the binary (schema/queries/limits.sql): during a rolling
--   upgrade, streamers of the previous version keep the old check for their
--   limited ordered handlers until they are replaced.
--
-- A job already leased when this runs gets its lane marked leased below, so
-- a late earlier job of its key waits for it.
--
-- Cost: a keyed job's lease, and its leaving leased, now write its lane row
-- through the trigger (unordered jobs: nothing); a key's first waiting job
-- gets a second probe, of order_lanes_leased. Not closed: a late earlier job
-- that commits while one streamer's claim is leasing a later job of its key
-- can be leased by another streamer's claim that does not yet see that lease
-- (the milliseconds of the first claim's statement).

SET LOCAL lock_timeout = '10s';

-- Writers of jobs wait until this commits (the claims and outcomes of the
-- jobs whose lanes are marked below), and jobs is locked before order_lanes,
-- in the order a job's statement and its lane trigger take them.
LOCK TABLE webhook_ingress.jobs IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE webhook_ingress.order_lanes
    ADD COLUMN leased boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN webhook_ingress.order_lanes.leased IS
    'The lane''s job is leased (running): no other job of its handler and key is leased meanwhile (026_order_lanes_leased).';
COMMENT ON TABLE webhook_ingress.order_lanes IS
    'One row per ordered handler''s job not completed (pending, leased, failed, or dead: dead lettered), kept by triggers on jobs; the claim leases a keyed job only when no earlier row of its handler and key blocks it and no other row of them is leased.';
CREATE INDEX order_lanes_leased ON webhook_ingress.order_lanes (handler, order_key) WHERE leased;
COMMENT ON INDEX webhook_ingress.order_lanes_leased IS
    'The lanes whose jobs are leased, by handler and key: the claim''s "is a job of this key running?" Partial: only the jobs running now.';

CREATE OR REPLACE FUNCTION webhook_ingress.order_lanes_keep() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    IF NEW.status = 'completed' THEN
        DELETE FROM webhook_ingress.order_lanes WHERE job_id = NEW.id;
    ELSE
        INSERT INTO webhook_ingress.order_lanes (job_id, event_received_at, handler, order_key, order_at, dead, leased)
        VALUES (NEW.id, NEW.event_received_at, NEW.handler, NEW.order_key, NEW.order_at, NEW.status = 'dead_letter', NEW.status = 'leased')
        ON CONFLICT (job_id) DO UPDATE SET dead = EXCLUDED.dead, leased = EXCLUDED.leased;
    END IF;
    RETURN NULL;
END
$$;

-- 020's, also for a keyed job entering or leaving leased. Replaced in this
-- transaction, with jobs locked: no status change is missed.
DROP TRIGGER jobs_order_lanes_status ON webhook_ingress.jobs;
CREATE TRIGGER jobs_order_lanes_status
    AFTER UPDATE OF status ON webhook_ingress.jobs
    FOR EACH ROW WHEN (NEW.order_key IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status
                       AND (OLD.status IN ('completed', 'dead_letter', 'leased') OR NEW.status IN ('completed', 'dead_letter', 'leased')))
    EXECUTE FUNCTION webhook_ingress.order_lanes_keep();

-- The jobs leased now (a live installation has leases in flight). One probe
-- of jobs by primary key per lane (a scalar subquery runs per row): the
-- lanes are the ordered jobs not completed, never a scan of jobs.
UPDATE webhook_ingress.order_lanes l
SET leased = true
WHERE (SELECT j.status FROM webhook_ingress.jobs j
       WHERE j.id = l.job_id AND j.event_received_at = l.event_received_at) = 'leased';

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
                    AND (NOT l.dead OR NOT EXISTS (
                        SELECT FROM webhook_ingress.subscriptions s WHERE s.handler = j.handler AND s.order_policy = 'skip')))
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
                        AND (NOT l.dead OR NOT EXISTS (
                            SELECT FROM webhook_ingress.subscriptions s WHERE s.handler = j.handler AND s.order_policy = 'skip')))
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
