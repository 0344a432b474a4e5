-- 006_provider_arrivals: what package monitor and the dashboard read. The
-- silent-source detector reads each source's latest arrivals, and the list of
-- sources, from a new index.

CREATE INDEX idx_events_provider_received_at ON webhook_ingress.events (provider, received_at);
COMMENT ON INDEX webhook_ingress.idx_events_provider_received_at IS
    'Latest arrivals per source (provider heartbeats), and the distinct sources by skip scan.';

-- The queue gauges list every enabled handler, at 0 when it has no open job.
GRANT SELECT (handler, enabled) ON webhook_ingress.subscriptions TO webhook_streamer;

-- The dashboard's failure rate reads the attempts of the last hour.
CREATE INDEX idx_job_attempts_finished_at ON webhook_ingress.job_attempts (finished_at);
