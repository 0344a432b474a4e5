-- 022_protocol_functions: the three statements every delivered job passes
-- through (the streamer's claim, the consumer's read, the consumer's
-- completion) run in functions on generic plans, planned once per session
-- instead of on every call.
--
-- Run as plain statements, each call was planned afresh: jobs and events
-- are partitioned, so PostgreSQL's plan cache judged a generic plan (every
-- partition, pruned at run time) dearer than a custom plan plus its
-- planning. Measured with pg_stat_statements.track_planning at 1,000
-- webhooks/s: planning took 160 µs per FetchJobs, 236 µs per CompleteJobs
-- and 70 µs per ClaimJobs call, against 28–60 µs of execution per job. A
-- pool-wide plan_cache_mode would also change the statements a consumer
-- program runs on the pool it hands the SDK; a SET clause on a function
-- holds for that function's statements (and the checks they fire) only, as
-- 021_generic_fk_checks does for the fan-out.
--
-- The statements are those the queries ClaimJobs, FetchJobs and CompleteJobs
-- ran before (schema/queries/jobs.sql explains each); only where they run
-- changed. PL/pgSQL, not SQL: a SQL function's statements are planned on
-- every call (before PostgreSQL 18). SECURITY INVOKER (the default): the
-- caller's privileges and row security apply as before, so every role that
-- could run a statement can run its function and no other can.
--
-- jit is off in the three functions. A generic plan cannot know the claim's
-- LIMIT, so with a backlog its estimated cost passes jit_above_cost (100,000
-- by default): with 60,000 jobs pending PostgreSQL 15 JIT-compiled 141
-- functions on every claim (313 ms, against 0.7 ms to execute the plan),
-- and delivery fell from 5,100 to 600 jobs/s. Compiled code is not kept
-- between executions, so JIT never pays for statements like these.
--
-- Upgrading: services of the previous version keep running their own
-- statements against the same tables; services of this version need the
-- functions, so migrate before rolling them out (as for every migration).
-- Functions only: no table is locked or rewritten.

CREATE FUNCTION webhook_ingress.claim_jobs(p_full_handlers text[], p_batch_size bigint, p_lease_holder text, p_lease_for interval)
    RETURNS TABLE (id bigint, event_id bigint, handler text, provider text, event_type text, attempt_count integer,
                   max_attempts integer, lease_expires_at timestamptz, trace_parent text, event_received_at timestamptz,
                   attempted_at timestamptz)
    LANGUAGE plpgsql
    SET plan_cache_mode = force_generic_plan
    SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH due AS (
        SELECT j.id, j.event_received_at
        FROM webhook_ingress.jobs j
        WHERE j.status IN ('pending', 'failed')
          AND j.next_attempt_at <= now()
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
        RETURNING j.id, j.event_id, j.handler, j.provider, j.event_type, j.attempt_count, j.max_attempts,
                  j.lease_expires_at, coalesce(j.trace_parent, '') AS trace_parent, j.event_received_at, j.attempted_at
    )
    SELECT * FROM leased;
END
$$;

CREATE FUNCTION webhook_ingress.fetch_jobs(p_ids bigint[], p_attempts integer[], p_handlers text[], p_event_ids bigint[],
                                           p_received_at timestamptz[], p_leased_at timestamptz[])
    RETURNS TABLE (job_id bigint, attempted_at timestamptz, lease_expires_at timestamptz, max_attempts integer,
                   started_at timestamptz, event_id bigint, provider text, scheme text, external_event_id text,
                   event_type text, received_at timestamptz, headers jsonb, raw_body bytea, occurred_at timestamptz)
    LANGUAGE plpgsql STABLE
    SET plan_cache_mode = force_generic_plan
    SET jit = off
AS $$
#variable_conflict use_column
BEGIN
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
        ORDER BY e.id, e.received_at
        LIMIT 1
    ) e ON true;
END
$$;

CREATE FUNCTION webhook_ingress.complete_jobs(p_ids bigint[], p_attempts integer[], p_received_at timestamptz[],
                                              p_leased_at timestamptz[], p_worker_id text)
    RETURNS TABLE (id bigint)
    LANGUAGE plpgsql
    SET plan_cache_mode = force_generic_plan
    SET jit = off
AS $$
#variable_conflict use_column
BEGIN
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

REVOKE ALL ON FUNCTION webhook_ingress.claim_jobs(text[], bigint, text, interval),
    webhook_ingress.fetch_jobs(bigint[], integer[], text[], bigint[], timestamptz[], timestamptz[]),
    webhook_ingress.complete_jobs(bigint[], integer[], timestamptz[], timestamptz[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.claim_jobs(text[], bigint, text, interval) TO webhook_streamer;
GRANT EXECUTE ON FUNCTION webhook_ingress.fetch_jobs(bigint[], integer[], text[], bigint[], timestamptz[], timestamptz[]),
    webhook_ingress.complete_jobs(bigint[], integer[], timestamptz[], timestamptz[], text) TO webhook_worker, webhook_consumer;
