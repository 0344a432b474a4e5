-- 058_filtered_fan_out_merges: a handler subscribed both with and without a
-- filter gets, for an event both route, the settings of every subscription
-- that routes it (review helper-140).
--
-- Every fan-out takes the largest max_attempts and order key over a
-- handler's subscriptions that route an event. With an unfiltered and a
-- filtered subscription of one handler (two services sharing a handler
-- name) they were two statements: the insert's trigger wrote the job from
-- the unfiltered subscriptions alone, then fan_out_filtered's insert for the
-- filtered one met that job and did nothing, so the filtered subscription's
-- max_attempts (and order key) were dropped: events the operator gave 20
-- attempts were dead-lettered after 3.
--
-- fan_out_filtered now merges into a job its own transaction wrote (the
-- trigger's, pending, no attempt yet): the larger max_attempts, the larger
-- key, the order time when the job had none. It still counts only the jobs
-- it created. Catch-up creates the filtered subscriptions' jobs first, with
-- the unfiltered ones' settings in (admin: createAllMissing). A job whose key is set or changed by an update keeps its lane
-- row (order_lanes_rekey): before, only an insert or a status change wrote
-- one. Old ingress binaries call the same function: nothing to drain.

CREATE FUNCTION webhook_ingress.order_lanes_rekey() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    IF NEW.order_key IS NULL OR NEW.status = 'completed' THEN
        DELETE FROM webhook_ingress.order_lanes WHERE job_id = NEW.id;
    ELSE
        INSERT INTO webhook_ingress.order_lanes (job_id, event_received_at, handler, order_key, order_at, dead, leased)
        VALUES (NEW.id, NEW.event_received_at, NEW.handler, NEW.order_key, NEW.order_at, NEW.status = 'dead_letter', NEW.status = 'leased')
        ON CONFLICT (job_id) DO UPDATE SET order_key = EXCLUDED.order_key, order_at = EXCLUDED.order_at;
    END IF;
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION webhook_ingress.order_lanes_rekey() FROM PUBLIC;

CREATE TRIGGER jobs_order_lanes_rekey
    AFTER UPDATE OF order_key, order_at ON webhook_ingress.jobs
    FOR EACH ROW WHEN (OLD.order_key IS DISTINCT FROM NEW.order_key OR OLD.order_at IS DISTINCT FROM NEW.order_at)
    EXECUTE FUNCTION webhook_ingress.order_lanes_rekey();

CREATE OR REPLACE FUNCTION webhook_ingress.fan_out_filtered(p_providers text[], p_external_ids text[], p_subscriptions bigint[])
    RETURNS bigint
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan AS
$$
    WITH routed AS MATERIALIZED (
        SELECT e.id, e.received_at, s.handler, e.provider, e.event_type, max(s.max_attempts) AS max_attempts, e.trace_parent,
               max(webhook_ingress.order_key_of(s.order_key, e.payload, e.headers)) AS order_key,
               max(CASE WHEN s.order_key IS NOT NULL THEN coalesce(e.occurred_at, e.received_at) END) AS order_at
        FROM unnest(p_providers, p_external_ids, p_subscriptions) AS u(provider, external_event_id, subscription_id)
        JOIN webhook_ingress.event_keys k
          ON k.provider = u.provider AND k.external_event_id = u.external_event_id
         AND k.xmin = pg_current_xact_id()::xid
        JOIN webhook_ingress.events e ON e.id = k.event_id AND e.received_at = k.received_at
        JOIN webhook_ingress.subscriptions s
          ON s.id = u.subscription_id AND s.enabled AND s.filter IS NOT NULL
         AND e.provider LIKE s.provider_like AND e.event_type LIKE s.event_type_like
        WHERE webhook_ingress.filter_version_holds()
        GROUP BY e.id, e.received_at, s.handler, e.provider, e.event_type, e.trace_parent
    ), merged AS (
        -- The job the insert's trigger wrote from the unfiltered
        -- subscriptions, in this transaction (RETURNING cannot tell an
        -- upsert's insert from its update on a partitioned table).
        UPDATE webhook_ingress.jobs j
        SET max_attempts = greatest(j.max_attempts, r.max_attempts),
            order_key = greatest(j.order_key, r.order_key),
            order_at = coalesce(j.order_at, r.order_at)
        FROM routed r
        WHERE j.event_id = r.id AND j.event_received_at = r.received_at AND j.handler = r.handler
          AND j.xmin = pg_current_xact_id()::xid AND j.status = 'pending' AND j.attempt_count = 0
          AND (j.max_attempts < r.max_attempts OR j.order_key IS DISTINCT FROM greatest(j.order_key, r.order_key))
    ), created AS (
        INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts, trace_parent, order_key, order_at)
        SELECT id, received_at, handler, provider, event_type, max_attempts, trace_parent, order_key, order_at FROM routed
        ON CONFLICT (event_id, handler, event_received_at) DO NOTHING
        RETURNING 1
    )
    SELECT count(*) FROM created
$$;
