-- Content filters on subscriptions (issue 19): a subscription may carry a CEL
-- expression (package filter) an event must pass to get a job.
--
-- Where the decision is made: the events_fan_out trigger keeps creating the
-- jobs of unfiltered subscriptions (every write path, in the event's own
-- statement, as before), and skips filtered ones: PostgreSQL cannot run CEL.
-- Ingress evaluates the filters of the subscriptions whose patterns match
-- before it commits and calls fan_out_filtered in the same transaction for
-- the pairs that passed, so a rejected event costs no job row. Catch-up
-- (inlet replay --missing) evaluates the same filters on the stored events.
--
-- subscriptions is small: the new nullable column rewrites nothing.

ALTER TABLE webhook_ingress.subscriptions ADD COLUMN filter text
    CONSTRAINT subscriptions_filter_length CHECK (filter IS NULL OR length(filter) BETWEEN 1 AND 4096);
COMMENT ON COLUMN webhook_ingress.subscriptions.filter IS
    'A CEL expression over event.source, event.type, event.headers, event.occurred_at and payload that an event must also pass (NULL: none). Evaluated by ingress and catch-up; the events_fan_out trigger skips filtered subscriptions.';

-- Jobs for (event, subscription) pairs whose filter passed, for events this
-- transaction stored (found by their dedupe keys, which the events_dedupe
-- trigger wrote in this transaction: the writer cannot make jobs for older
-- events). The subscription must still be enabled, filtered, and match the
-- event's source and type. Returns the jobs created.
CREATE FUNCTION webhook_ingress.fan_out_filtered(p_providers text[], p_external_ids text[], p_subscriptions bigint[])
    RETURNS bigint
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
    WITH created AS (
        INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts, trace_parent)
        SELECT e.id, e.received_at, s.handler, e.provider, e.event_type, max(s.max_attempts), e.trace_parent
        FROM unnest(p_providers, p_external_ids, p_subscriptions) AS u(provider, external_event_id, subscription_id)
        JOIN webhook_ingress.event_keys k
          ON k.provider = u.provider AND k.external_event_id = u.external_event_id
         AND k.xmin = pg_current_xact_id()::xid
        JOIN webhook_ingress.events e ON e.id = k.event_id AND e.received_at = k.received_at
        JOIN webhook_ingress.subscriptions s
          ON s.id = u.subscription_id AND s.enabled AND s.filter IS NOT NULL
         AND e.provider LIKE s.provider_like AND e.event_type LIKE s.event_type_like
        GROUP BY e.id, e.received_at, s.handler, e.provider, e.event_type, e.trace_parent
        ON CONFLICT (event_id, handler, event_received_at) DO NOTHING
        RETURNING 1
    )
    SELECT count(*) FROM created
$$;
REVOKE ALL ON FUNCTION webhook_ingress.fan_out_filtered(text[], text[], bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.fan_out_filtered(text[], text[], bigint[]) TO webhook_ingress_writer;

-- Ingress reads the filtered subscriptions (never their jobs).
GRANT SELECT (id, handler, provider_pattern, event_type_pattern, filter, enabled)
    ON webhook_ingress.subscriptions TO webhook_ingress_writer;
-- Consumers register their filters.
GRANT INSERT (filter), UPDATE (filter) ON webhook_ingress.subscriptions TO webhook_worker, webhook_consumer;

-- The trigger's fan-out, as in 007, for unfiltered subscriptions only.
CREATE OR REPLACE FUNCTION webhook_ingress.events_fan_out() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts, trace_parent)
    SELECT e.id, e.received_at, s.handler, e.provider, e.event_type, max(s.max_attempts), e.trace_parent
    FROM new_events e
    JOIN webhook_ingress.subscriptions s
      ON s.enabled
     AND s.filter IS NULL
     AND e.provider LIKE s.provider_like
     AND e.event_type LIKE s.event_type_like
    GROUP BY e.id, e.received_at, s.handler, e.provider, e.event_type, e.trace_parent
    ON CONFLICT (event_id, handler, event_received_at) DO NOTHING;
    RETURN NULL;
END
$$;
