-- 057_mixed_version_upgrade: this session's breaker and retention changes
-- hold while services of the previous version still run beside new ones
-- (a rolling upgrade), so they may (review helper-134).
--
-- The breaker: 056's HandlerSucceeded counts failures since the handler's
-- newest success, last_success_at. A consumer of the previous version resets
-- a breaker with its own statement (consecutive_failures = 0, circuit
-- closed) and never writes last_success_at: a new consumer's later reset of
-- an older success then counted again the failures the old one had
-- forgiven. A reset that leaves last_success_at as it was now moves it to
-- now(): whoever zeroes the count or closes the circuit forgives what came
-- before (TestBreakerOldConsumerResetIsNotUndone).
--
-- Retention: 054's retention_keys_due was filled by the new inlet retention
-- only, so a period an old one dropped (and whose key delete did not run)
-- kept its keys for good. Every drop is recorded in retention_log by
-- drop_partition, whichever version calls it: a row there now records its
-- period in retention_keys_due too (TestRetentionOldBinaryDropIsSweptByTheNew).

CREATE FUNCTION webhook_ingress.handler_limits_reset_moves_last_success() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    NEW.last_success_at := greatest(OLD.last_success_at, now());
    RETURN NEW;
END
$$;
CREATE TRIGGER handler_limits_reset_moves_last_success
    BEFORE UPDATE ON webhook_ingress.handler_limits
    FOR EACH ROW
    WHEN (NEW.last_success_at IS NOT DISTINCT FROM OLD.last_success_at
          AND ((NEW.consecutive_failures = 0 AND OLD.consecutive_failures <> 0)
               OR (NEW.circuit = 'closed' AND OLD.circuit <> 'closed')))
    EXECUTE FUNCTION webhook_ingress.handler_limits_reset_moves_last_success();
ALTER TABLE webhook_ingress.handler_limits ENABLE ALWAYS TRIGGER handler_limits_reset_moves_last_success;

CREATE FUNCTION webhook_ingress.retention_log_keys_due() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    INSERT INTO webhook_ingress.retention_keys_due (period_start, period_end)
    VALUES (NEW.period_start, NEW.period_end)
    ON CONFLICT (period_start) DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER retention_log_keys_due
    AFTER INSERT ON webhook_ingress.retention_log
    FOR EACH ROW EXECUTE FUNCTION webhook_ingress.retention_log_keys_due();
ALTER TABLE webhook_ingress.retention_log ENABLE ALWAYS TRIGGER retention_log_keys_due;
REVOKE ALL ON FUNCTION webhook_ingress.handler_limits_reset_moves_last_success(), webhook_ingress.retention_log_keys_due() FROM PUBLIC;
