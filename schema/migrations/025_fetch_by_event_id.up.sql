-- 025_fetch_by_event_id: the consumer's read finds each job's event by its
-- id, never by the time it was stored.
--
-- fetch_jobs probed each event with id = $event AND received_at = $time, and
-- a generic plan may serve that with idx_events_received_at (received_at)
-- rather than the primary key (id, received_at): both look like one row to
-- the planner when received_at seems nearly unique in the statistics. But
-- every event stored by one transaction shares its received_at: a group
-- commit's batch (up to ingress.group_commit.max_batch), or thousands for a
-- bulk load. The probe then read those events one by one until it met the
-- id. Seen in the bench's jobs section (20,000 events loaded by one
-- statement, statistics from an earlier section's webhooks): 1.3 ms per job
-- read, 742 jobs/s instead of about 8,000.
--
-- The event's time is now checked as a filter no index can take (IS TRUE),
-- so the probe is by id: the primary key, one row. The batch's bounds on
-- received_at stay, for partition pruning. Same signature: services of the
-- previous version call it unchanged.

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
          AND e.received_at BETWEEN v_min AND v_max
          -- A filter no index takes (025): the primary key serves the
          -- probe, by the id.
          AND (e.received_at = j.event_received_at) IS TRUE
        ORDER BY e.id, e.received_at
        LIMIT 1
    ) e ON true;
END
$$;
