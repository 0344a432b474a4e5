-- Rate limits, in-flight limits and circuit breakers per handler (issue 22),
-- enforced where every replica's jobs come from: the streamers' claim.
--
-- A handler with a row here is claimed apart from the others, one statement
-- per handler (ClaimLimitedJobs) that locks its row, so streamers running
-- side by side take turns and the limits hold across every streamer and
-- every consumer replica:
--   * rate_per_second / burst: a token bucket; a job leased spends a token,
--     tokens refill at rate_per_second up to burst.
--   * max_in_flight: at most that many of its jobs leased at once.
--   * breaker_failures / breaker_probe_interval: after that many
--     consecutive failed attempts the circuit opens; its jobs are not leased
--     (they wait, spending no attempts) except one probe per
--     breaker_probe_interval (circuit half_open while the probe runs); a
--     success closes it, a failed probe opens it again.
-- Consumers write the settings when they register (as subscriptions) and
-- move the failure count and the circuit with each outcome; streamers spend
-- tokens and start probes. Handlers without a row are claimed as before.

CREATE TABLE webhook_ingress.handler_limits (
    handler                text PRIMARY KEY,
    rate_per_second        double precision CHECK (rate_per_second IS NULL OR rate_per_second > 0),
    burst                  integer CHECK (burst IS NULL OR burst >= 1),
    max_in_flight          integer CHECK (max_in_flight IS NULL OR max_in_flight >= 1),
    breaker_failures       integer CHECK (breaker_failures IS NULL OR breaker_failures >= 1),
    breaker_probe_interval interval,
    tokens                 double precision NOT NULL DEFAULT 0,
    refilled_at            timestamptz NOT NULL DEFAULT now(),
    consecutive_failures   integer NOT NULL DEFAULT 0,
    circuit                text NOT NULL DEFAULT 'closed' CHECK (circuit IN ('closed', 'open', 'half_open')),
    circuit_changed_at     timestamptz NOT NULL DEFAULT now(),
    next_probe_at          timestamptz,
    updated_at             timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT handler_limits_rate_burst CHECK ((rate_per_second IS NULL) = (burst IS NULL)),
    CONSTRAINT handler_limits_breaker CHECK ((breaker_failures IS NULL) = (breaker_probe_interval IS NULL))
);
COMMENT ON TABLE webhook_ingress.handler_limits IS
    'Per-handler rate limit (token bucket), in-flight limit and circuit breaker, enforced by the streamers'' claim across every replica. Settings written by consumers at registration; tokens and probes by streamers; consecutive_failures and circuit by consumers with each outcome.';

GRANT SELECT, INSERT (handler, rate_per_second, burst, max_in_flight, breaker_failures, breaker_probe_interval, tokens, updated_at),
    UPDATE (rate_per_second, burst, max_in_flight, breaker_failures, breaker_probe_interval, tokens,
            consecutive_failures, circuit, circuit_changed_at, next_probe_at, updated_at),
    DELETE
    ON webhook_ingress.handler_limits TO webhook_worker, webhook_consumer;
GRANT SELECT, UPDATE (tokens, refilled_at, circuit, circuit_changed_at, next_probe_at)
    ON webhook_ingress.handler_limits TO webhook_streamer;
GRANT SELECT ON webhook_ingress.handler_limits TO webhook_operator, webhook_auditor;

-- A team's consumer role sets and moves only its own handlers' limits.
ALTER TABLE webhook_ingress.handler_limits ENABLE ROW LEVEL SECURITY;
CREATE POLICY every_role ON webhook_ingress.handler_limits AS PERMISSIVE FOR ALL TO PUBLIC
    USING (true) WITH CHECK (true);
CREATE POLICY consumer_own_handlers ON webhook_ingress.handler_limits AS RESTRICTIVE FOR ALL TO webhook_consumer
    USING (handler IN (SELECT r.handler FROM webhook_ingress.consumer_roles r WHERE r.role_name = current_user))
    WITH CHECK (handler IN (SELECT r.handler FROM webhook_ingress.consumer_roles r WHERE r.role_name = current_user));
