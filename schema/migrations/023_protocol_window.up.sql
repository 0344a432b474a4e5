-- 023_protocol_window: the protocol statements start only the partitions
-- their rows can be in.
--
-- jobs and events are partitioned by the event's received_at, one partition
-- per period (a week by default), kept as long as retention.max_age says
-- (forever by default): an installation that has kept a year has 58 of each.
-- The functions of 022 run generic plans, and a generic plan names every
-- partition: each call started a scan of every partition (and opened its
-- index) before run-time pruning picked the one it needed. Measured with 52
-- past weekly partitions added (bench -history-weeks 52): an empty claim
-- took 1.5 ms against 0.27 ms with the 6 partitions of a new installation,
-- a read of 18 attempts 1.35 ms, and four consumer replicas delivered a
-- third less.
--
-- Each statement now bounds the partition key by values known when the
-- plan starts (PL/pgSQL variables are parameters of the plan), so PostgreSQL
-- prunes the partitions outside the bounds before starting their scans
-- ("Subplans Removed" in EXPLAIN):
--
-- * fetch_jobs and complete_jobs: between the least and the greatest
--   received_at of the batch (one partition in practice). Same signatures:
--   services of the previous version call them unchanged.
-- * claim_jobs gets a fifth argument, p_window: only jobs whose event was
--   received p_window before now() or later (NULL: every partition). The
--   bound is one-sided on purpose: a generic plan estimates a range between
--   two parameters at 0.5 % of the rows, and with both bounds PostgreSQL
--   chose to read the window through the primary key and sort it (26 ms per
--   claim of 100 with 20,000 pending) instead of walking idx_jobs_claimable
--   in order; one bound (a third of the rows) keeps the ordered walk. The
--   partitions ahead of now and the default one stay in the plan, as many
--   as in a new installation, however long the history. The streamer
--   claims within an hour and runs a claim over every partition at least
--   once per poll interval, so jobs of older events (retries, replays,
--   catch-up) wait at most that long more. The four-argument claim_jobs of
--   022 stays, for streamers of the previous version, and claims over every
--   partition as before.
--
-- PostgreSQL 15 still locks every partition of a generic plan (not its
-- indexes); starting the scans was the larger cost. Functions only: no table
-- is locked or rewritten.

CREATE FUNCTION webhook_ingress.claim_jobs(p_full_handlers text[], p_batch_size bigint, p_lease_holder text, p_lease_for interval,
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
BEGIN
    RETURN QUERY
    WITH due AS (
        SELECT j.id, j.event_received_at
        FROM webhook_ingress.jobs j
        WHERE j.status IN ('pending', 'failed')
          AND j.next_attempt_at <= now()
          AND j.event_received_at >= v_from
          AND j.handler <> ALL (p_full_handlers)
          AND (j.order_key IS NULL OR NOT EXISTS (
              SELECT FROM webhook_ingress.order_lanes l
              WHERE l.handler = j.handler AND l.order_key = j.order_key
                AND (l.order_at, l.job_id) < (j.order_at, j.id)
                AND (NOT l.dead OR NOT EXISTS (
                    SELECT FROM webhook_ingress.subscriptions s WHERE s.handler = j.handler AND s.order_policy = 'skip'))))
        ORDER BY j.next_attempt_at, j.id
        LIMIT p_batch_size
        FOR UPDATE OF j SKIP LOCKED
    ), leased AS (
        UPDATE webhook_ingress.jobs j
        SET status           = 'leased',
            attempt_count    = j.attempt_count + 1,
            lease_holder_id  = p_lease_holder,
            lease_expires_at = now() + p_lease_for,
            attempted_at     = now(),
            worker_id        = NULL,
            updated_at       = now()
        FROM due
        WHERE j.id = due.id
          AND j.event_received_at = due.event_received_at
          AND j.event_received_at >= v_from
        RETURNING j.id, j.event_id, j.handler, j.provider, j.event_type, j.attempt_count, j.max_attempts,
                  j.lease_expires_at, coalesce(j.trace_parent, '') AS trace_parent, j.event_received_at, j.attempted_at
    )
    SELECT * FROM leased;
END
$$;

CREATE OR REPLACE FUNCTION webhook_ingress.fetch_jobs(p_ids bigint[], p_attempts integer[], p_handlers text[], p_event_ids bigint[],
                                           p_received_at timestamptz[], p_leased_at timestamptz[])
    RETURNS TABLE (job_id bigint, attempted_at timestamptz, lease_expires_at timestamptz, max_attempts integer,
                   started_at timestamptz, event_id bigint, provider text, scheme text, external_event_id text,
                   event_type text, received_at timestamptz, headers jsonb, raw_body bytea, occurred_at timestamptz)
    LANGUAGE plpgsql STABLE
    SET plan_cache_mode = force_generic_plan
    SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_min timestamptz;
    v_max timestamptz;
BEGIN
    SELECT min(t), max(t) INTO v_min, v_max FROM unnest(p_received_at) t;
    RETURN QUERY
    SELECT j.id, j.attempted_at, j.lease_expires_at, j.max_attempts, now(),
           e.id, coalesce(e.provider, ''), coalesce(e.scheme, ''), coalesce(e.external_event_id, ''),
           coalesce(e.event_type, ''), coalesce(e.received_at, now()), coalesce(e.headers, '{}'), coalesce(e.raw_body, ''),
           e.occurred_at
    FROM ROWS FROM (unnest(p_ids), unnest(p_attempts), unnest(p_handlers), unnest(p_event_ids),
                    unnest(p_received_at), unnest(p_leased_at))
        AS w(id, attempt, handler, event_id, event_received_at, leased_at)
    CROSS JOIN LATERAL (
        SELECT j.id, j.attempted_at, j.lease_expires_at, j.max_attempts, j.event_id, j.event_received_at
        FROM webhook_ingress.jobs j
        WHERE j.id = w.id
          AND j.event_received_at = w.event_received_at
          AND j.event_received_at BETWEEN v_min AND v_max
          AND j.attempt_count = w.attempt
          AND j.handler = w.handler
          AND j.event_id = w.event_id
          AND j.status = 'leased'
          AND j.attempted_at = coalesce(w.leased_at, j.attempted_at)
        LIMIT 1
    ) j
    LEFT JOIN LATERAL (
        SELECT e.id, e.provider, e.scheme, e.external_event_id, e.event_type, e.received_at, e.headers, e.raw_body, e.occurred_at
        FROM webhook_ingress.events e
        WHERE e.id = j.event_id
          AND e.received_at = j.event_received_at
          AND e.received_at BETWEEN v_min AND v_max
        ORDER BY e.id, e.received_at
        LIMIT 1
    ) e ON true;
END
$$;

CREATE OR REPLACE FUNCTION webhook_ingress.complete_jobs(p_ids bigint[], p_attempts integer[], p_received_at timestamptz[],
                                              p_leased_at timestamptz[], p_worker_id text)
    RETURNS TABLE (id bigint)
    LANGUAGE plpgsql
    SET plan_cache_mode = force_generic_plan
    SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_min timestamptz;
    v_max timestamptz;
BEGIN
    SELECT min(t), max(t) INTO v_min, v_max FROM unnest(p_received_at) t;
    RETURN QUERY
    WITH done AS (
        SELECT d.id, d.attempt, d.leased_at, j.event_received_at, j.tableoid AS part, j.ctid AS tid
        FROM ROWS FROM (unnest(p_ids), unnest(p_attempts), unnest(p_received_at), unnest(p_leased_at))
            AS d(id, attempt, event_received_at, leased_at)
        CROSS JOIN LATERAL (
            SELECT j.event_received_at, j.tableoid, j.ctid
            FROM webhook_ingress.jobs j
            WHERE j.id = d.id
              AND j.event_received_at = d.event_received_at
              AND j.event_received_at BETWEEN v_min AND v_max
              AND j.status = 'leased'
              AND j.attempt_count = d.attempt
              AND j.attempted_at = d.leased_at
            LIMIT 1
        ) j
    ), completed AS (
        UPDATE webhook_ingress.jobs j
        SET status               = 'completed',
            completed_at         = now(),
            completed_attempt_id = nextval('webhook_ingress.job_attempts_id_seq'),
            worker_id            = p_worker_id,
            lease_holder_id      = NULL,
            lease_expires_at     = NULL,
            last_error           = NULL,
            last_error_class     = NULL,
            updated_at           = now()
        FROM done d
        WHERE j.id = d.id
          AND j.event_received_at = d.event_received_at
          AND j.event_received_at BETWEEN v_min AND v_max
          AND j.tableoid = d.part
          AND j.ctid = d.tid
          AND j.status = 'leased'
          AND j.attempt_count = d.attempt
          AND j.attempted_at = d.leased_at
        RETURNING j.id
    )
    SELECT * FROM completed;
END
$$;

CREATE OR REPLACE FUNCTION webhook_ingress.claim_jobs(p_full_handlers text[], p_batch_size bigint, p_lease_holder text, p_lease_for interval)
    RETURNS TABLE (id bigint, event_id bigint, handler text, provider text, event_type text, attempt_count integer,
                   max_attempts integer, lease_expires_at timestamptz, trace_parent text, event_received_at timestamptz,
                   attempted_at timestamptz)
    LANGUAGE sql
AS $$
    SELECT * FROM webhook_ingress.claim_jobs(p_full_handlers, p_batch_size, p_lease_holder, p_lease_for, NULL::interval)
$$;

REVOKE ALL ON FUNCTION webhook_ingress.claim_jobs(text[], bigint, text, interval, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.claim_jobs(text[], bigint, text, interval, interval) TO webhook_streamer;
