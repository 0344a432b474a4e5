-- 068_fold_ignores_catch_up_jobs: an event is routed when it created a job
-- as it arrived, not when a catch-up made one for it later (review
-- helper-178).
--
-- 013's fold judged an event routed if it had any job when the fold ran.
-- A catch-up (inlet replay --handler H --since …, POST /api/replay) does
-- not fold first, so an event that created no job, caught up before the
-- streamer's next fold (every heartbeat.types_every, and for as long as no
-- streamer runs), was counted routed: inlet_events_unrouted_total and inlet
-- events types never showed it, and inlet replay --unrouted of a handler
-- subscribed later never reached it, while the same history folded before
-- the catch-up counted it unrouted. Now the fold passes over a job a
-- catch-up created, recognised exactly as AdminCountUnroutedJobs and
-- AdminCreateUnroutedJobs recognise it: the 'replayed' row of attempt 0
-- written with the job (started_at = the job's created_at).
--
-- The rest is 013's definition: same signature, SECURITY DEFINER and
-- search_path; CREATE OR REPLACE keeps its owner and grants (restated
-- below all the same). A streamer of the previous version calls the new
-- function: nothing to drain. Idempotent, as the migrations since 060.

CREATE OR REPLACE FUNCTION webhook_ingress.fold_event_types(p_max_types integer) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
DECLARE
    n bigint;
BEGIN
    IF p_max_types IS NULL OR p_max_types < 1 THEN
        RAISE EXCEPTION 'max types per source %: must be at least 1', p_max_types
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('inlet:fold-event-types', 0));
    WITH d AS (
        DELETE FROM webhook_ingress.event_type_arrivals RETURNING provider, event_type, event_ids, received_ats
    ), x AS (
        -- The jobs key is (event_id, handler, event_received_at): with the
        -- partition key, each probe reads one partition's index. A job with
        -- the catch-up's own 'replayed' row (attempt 0, started as the job
        -- was created) came after the arrival: it does not route the event.
        SELECT d.provider, d.event_type, u.received_at,
               EXISTS (SELECT 1 FROM webhook_ingress.jobs j
                       WHERE j.event_id = u.id AND j.event_received_at = u.received_at
                         AND NOT EXISTS (SELECT 1 FROM webhook_ingress.job_attempts a
                                         WHERE a.job_id = j.id AND a.event_received_at = j.event_received_at AND a.attempt = 0
                                           AND a.outcome = 'replayed' AND a.started_at = j.created_at)) AS routed
        FROM d CROSS JOIN LATERAL unnest(d.event_ids, d.received_ats) AS u(id, received_at)
    ), a AS (
        SELECT provider, event_type, min(received_at) AS first_seen, max(received_at) AS last_seen,
               count(*) AS events, count(*) FILTER (WHERE NOT routed) AS unrouted_events,
               max(received_at) FILTER (WHERE routed) AS last_routed_at,
               min(received_at) FILTER (WHERE NOT routed) AS first_unrouted_at,
               max(received_at) FILTER (WHERE NOT routed) AS last_unrouted_at
        FROM x GROUP BY provider, event_type
    ), k AS (
        SELECT a.*, (t.provider IS NOT NULL OR a.event_type = '_other') AS known
        FROM a LEFT JOIN webhook_ingress.event_types t USING (provider, event_type)
    ), used AS (
        SELECT provider, count(*) AS n FROM webhook_ingress.event_types WHERE event_type <> '_other' GROUP BY provider
    ), r AS (
        SELECT k.*,
               CASE WHEN k.known OR coalesce(u.n, 0)
                        + row_number() OVER (PARTITION BY k.provider, k.known ORDER BY k.first_seen, k.event_type) <= p_max_types
                    THEN k.event_type ELSE '_other' END AS dest
        FROM k LEFT JOIN used u USING (provider)
    )
    INSERT INTO webhook_ingress.event_types AS t
        (provider, event_type, first_seen, last_seen, events, unrouted_events, last_routed_at, first_unrouted_at, last_unrouted_at)
    SELECT provider, dest, min(first_seen), max(last_seen), sum(events), sum(unrouted_events),
           max(last_routed_at), min(first_unrouted_at), max(last_unrouted_at)
    FROM r GROUP BY provider, dest
    ON CONFLICT (provider, event_type) DO UPDATE SET
        first_seen        = least(t.first_seen, excluded.first_seen),
        last_seen         = greatest(t.last_seen, excluded.last_seen),
        events            = t.events + excluded.events,
        unrouted_events   = t.unrouted_events + excluded.unrouted_events,
        last_routed_at    = greatest(t.last_routed_at, excluded.last_routed_at),
        first_unrouted_at = least(t.first_unrouted_at, excluded.first_unrouted_at),
        last_unrouted_at  = greatest(t.last_unrouted_at, excluded.last_unrouted_at);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
COMMENT ON FUNCTION webhook_ingress.fold_event_types(integer) IS
    'Fold event_type_arrivals into event_types, at most p_max_types named types per source (the rest in ''_other''). An event is unrouted when it created no job as it arrived (a job a catch-up created later does not count). Run by the streamer every heartbeat.types_every and by inlet events types; returns the event_types rows written.';

REVOKE ALL ON FUNCTION webhook_ingress.fold_event_types(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.fold_event_types(integer) TO webhook_streamer, webhook_operator;
