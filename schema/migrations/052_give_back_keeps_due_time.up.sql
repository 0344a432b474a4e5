-- 052_give_back_keeps_due_time: a lease a consumer gives back keeps its
-- job's due time.
--
-- give_back_attempt (029, 038) set next_attempt_at = now(), so each
-- consumer Stop that cut references short made their jobs look due since
-- that moment, and inlet_handler_lag_seconds (and the dashboard's lag) fell
-- to 0 whenever a consumer restarted behind a backlog, the moment the alert
-- is for (review helper-104: monitor TestLagSurvivesAConsumerGiveBack). The
-- streamer's give-backs and the reaper keep it already (ReleaseJobs,
-- ReleaseUnseenJobs, ReapExpiredLeases). Only that line changes; the rest is
-- 038's definition.

CREATE OR REPLACE FUNCTION webhook_ingress.give_back_attempt(p_id bigint, p_received_at timestamptz, p_attempt integer,
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
        next_attempt_at  = least(j.next_attempt_at, now()),
        updated_at       = now()
    WHERE j.id = p_id
      AND j.event_received_at = p_received_at
      AND j.status = 'leased'
      AND j.attempt_count = p_attempt
      AND j.attempted_at = p_leased_at
      AND (coalesce(unrestricted, false)
           OR (j.handler IN (SELECT r.handler FROM webhook_ingress.consumer_roles r WHERE r.role_name = caller)
               AND EXISTS (SELECT FROM webhook_ingress.consumer_role_scopes c
                           WHERE c.role_name = caller
                             AND j.provider LIKE c.provider_like
                             AND j.event_type LIKE c.event_type_like)));
    RETURN FOUND;
END
$$;
