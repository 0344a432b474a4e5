-- 007_trace_parent: the W3C traceparent of the ingress request that stored an
-- event, copied to its jobs, so the streamer's and the handler's spans join
-- the request's trace (package internal/tracing). NULL when tracing is off or
-- the trace was not sampled. Not sealed by the audit: it says how the event
-- was traced, not what arrived.

ALTER TABLE webhook_ingress.events ADD COLUMN trace_parent text;
ALTER TABLE webhook_ingress.jobs ADD COLUMN trace_parent text;
COMMENT ON COLUMN webhook_ingress.events.trace_parent IS
    'W3C traceparent of the ingress span that stored the event; NULL when tracing was off.';
COMMENT ON COLUMN webhook_ingress.jobs.trace_parent IS
    'The event''s trace_parent: the streamer''s and the handler''s spans join that trace.';

GRANT INSERT (trace_parent) ON webhook_ingress.events TO webhook_ingress_writer;

CREATE OR REPLACE FUNCTION webhook_ingress.events_fan_out() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts, trace_parent)
    SELECT e.id, e.received_at, s.handler, e.provider, e.event_type, max(s.max_attempts), e.trace_parent
    FROM new_events e
    JOIN webhook_ingress.subscriptions s
      ON s.enabled
     AND e.provider LIKE s.provider_like
     AND e.event_type LIKE s.event_type_like
    GROUP BY e.id, e.received_at, s.handler, e.provider, e.event_type, e.trace_parent
    ON CONFLICT (event_id, handler, event_received_at) DO NOTHING;
    RETURN NULL;
END
$$;
