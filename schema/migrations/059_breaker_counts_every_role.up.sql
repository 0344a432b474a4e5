-- 059_breaker_counts_every_role: a breaker's reset counts the failures of
-- every consumer role of a shared handler (review helper-139).
--
-- HandlerSucceeded (056) counts the handler's failures recorded since its
-- newest success, from job_attempts and jobs, in the consumer's own
-- statement. A consumer role sees only the jobs inside its scopes (011,
-- 038), so for a handler shared by two roles of different scopes the
-- recount missed the other role's failures: one role's late reset closed
-- the circuit the other's failures had opened, with nothing succeeding
-- since. The count now runs as the owner, returning a number only; a
-- consumer role gets it for its own handlers alone (consumer_roles), as
-- give_back_attempt limits what it may give back.

CREATE FUNCTION webhook_ingress.handler_failures_since(p_handler text, p_since timestamptz)
    RETURNS integer
    LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
DECLARE
    caller       text := coalesce(nullif(current_setting('role'), 'none'), session_user);
    unrestricted boolean;
    n            integer;
BEGIN
    SELECT a.rolsuper OR a.rolbypassrls OR NOT pg_has_role(a.oid, 'webhook_consumer'::regrole, 'USAGE')
    INTO unrestricted
    FROM pg_catalog.pg_roles a WHERE a.rolname = caller;
    IF NOT coalesce(unrestricted, false)
       AND NOT EXISTS (SELECT FROM webhook_ingress.consumer_roles r WHERE r.role_name = caller AND r.handler = p_handler) THEN
        RAISE EXCEPTION 'handler % is not one of role %''s handlers', p_handler, caller USING ERRCODE = '42501';
    END IF;
    SELECT count(*)::integer INTO n
    FROM webhook_ingress.job_attempts a
    JOIN webhook_ingress.jobs j ON j.id = a.job_id AND j.event_received_at = a.event_received_at
    WHERE j.handler = p_handler AND a.outcome IN ('failed', 'dead_letter')
      AND a.finished_at > p_since;
    RETURN n;
END
$$;
REVOKE ALL ON FUNCTION webhook_ingress.handler_failures_since(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.handler_failures_since(text, timestamptz) TO webhook_worker, webhook_consumer;
