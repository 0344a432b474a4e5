-- 029_give_back_attempt: an attempt cut short by a consumer's forced stop
-- no longer counts.
--
-- A consumer whose Stop deadline passes (inlet consumer: SIGTERM past
-- --drain-timeout) cancels its running handlers and records nothing. The
-- lease then expired, and the reaper counted it as an attempt (the consumer
-- had extended it, or a consumer of the handler was alive): a deploy spent
-- an attempt, and dead-lettered a job on its last attempt whose handler the
-- deploy, not its own failure, had cut off.
--
-- Now the consumer gives the lease back on that path, as the streamer's
-- ReleaseJobs does for a reference it could not publish: the job is pending
-- again at once and the attempt does not count. That needs attempt_count,
-- which consumer roles may not update (005, 011), and should not: a role
-- that could set it could grant any job more attempts. So the update is a
-- SECURITY DEFINER function that does exactly one thing, fenced on the
-- attempt's lease token (job id, partition key, attempt number, leased at):
-- a lease meanwhile lost, reaped, completed, failed or replayed is left
-- alone. It returns whether it gave the attempt back.
--
-- Row-level security does not hold the function (it runs as the owner), so
-- it applies the consumer policy's rule itself (011_consumer_roles,
-- jobs.consumer_own_handlers): a role with the privileges of
-- webhook_consumer gives back only jobs of the handlers consumer_roles gives
-- it. The calling role is the session's SET ROLE (the role setting, which a
-- SECURITY DEFINER function does not change), else its login role: a
-- consumer service runs as its role either way (consumer.db_role).
-- Superusers and BYPASSRLS roles are not held, as row-level security does
-- not hold them.
--
-- EXECUTE: webhook_worker and webhook_consumer, as for the consumer's
-- protocol functions (022_protocol_functions); per-consumer roles, those of
-- inlet roles create-consumer included, hold it as members of
-- webhook_consumer. No other role.
--
-- Leaving leased fires the order_lanes trigger (026) as every release does:
-- the job's lane is no longer marked leased.
--
-- Upgrading: consumers of the previous version never call it (their forced
-- stops still count); this version's consumers need it, so migrate first.
-- A function only: no table is locked or rewritten.

CREATE FUNCTION webhook_ingress.give_back_attempt(p_id bigint, p_received_at timestamptz, p_attempt integer,
                                                  p_leased_at timestamptz)
    RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
DECLARE
    caller       text := coalesce(nullif(current_setting('role'), 'none'), session_user);
    unrestricted boolean;
BEGIN
    SELECT a.rolsuper OR a.rolbypassrls OR NOT pg_has_role(a.oid, 'webhook_consumer'::regrole, 'USAGE')
    INTO unrestricted
    FROM pg_catalog.pg_roles a WHERE a.rolname = caller;
    UPDATE webhook_ingress.jobs j
    SET status           = 'pending',
        attempt_count    = j.attempt_count - 1,
        lease_holder_id  = NULL,
        lease_expires_at = NULL,
        worker_id        = NULL,
        next_attempt_at  = now(),
        updated_at       = now()
    WHERE j.id = p_id
      AND j.event_received_at = p_received_at
      AND j.status = 'leased'
      AND j.attempt_count = p_attempt
      AND j.attempted_at = p_leased_at
      AND (coalesce(unrestricted, false)
           OR j.handler IN (SELECT r.handler FROM webhook_ingress.consumer_roles r WHERE r.role_name = caller));
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION webhook_ingress.give_back_attempt(bigint, timestamptz, integer, timestamptz) IS
    'A consumer''s forced stop gives back attempt p_attempt of job p_id (partition p_received_at, leased at p_leased_at): pending again at once, the attempt not counted. Fenced on that lease token; a consumer role only for its own handlers'' jobs. Returns whether it did.';

REVOKE ALL ON FUNCTION webhook_ingress.give_back_attempt(bigint, timestamptz, integer, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.give_back_attempt(bigint, timestamptz, integer, timestamptz)
    TO webhook_worker, webhook_consumer;
