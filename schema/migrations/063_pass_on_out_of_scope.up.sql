-- 063_pass_on_out_of_scope: a consumer passes on the lease of a job its
-- role may not see (review helper-163).
--
-- A handler may be shared by consumer roles of different scopes (team A
-- runs "audit" over stripe, team B over github: docs/operations.md, "A
-- database role per consumer"). The streamer publishes a handler's
-- references on one topic, and the bus hands each message to any consumer
-- of the handler (a NATS queue group, the in-process bus's round robin).
-- The team that got a reference to the other team's job found no row (row-
-- level security), skipped it as stale, and the lease expired; the reaper,
-- a consumer of the handler being alive, counted the attempt. Every
-- misrouted reference cost an attempt and a lease of delay, and a job was
-- dead-lettered unrun whenever its deliveries all landed on the wrong team,
-- while the team that could run it was up and idle.
--
-- Now the consumer that cannot see a reference's job passes its lease on:
-- the job is pending again, the attempt does not count, and the next claim
-- publishes it again, to whichever consumer the bus picks. Like
-- give_back_attempt (029, 038, 052) it runs as the owner, fenced on the
-- attempt's lease token, for a job of one of the caller's handlers; unlike
-- it, only for a job outside every scope of the caller and inside a scope
-- of another role that has the handler: someone else can take it. A job no
-- role can take is left to expire and count, as before (docs: a scope
-- narrowed under enabled subscriptions). The job is due again after a pause
-- that grows with its age (a tenth of it, 1 s to 1 min), so while the other
-- team's consumers are all down its jobs circle at most once a minute
-- rather than as fast as claims run. Unrestricted callers (webhook_worker,
-- superusers) see every job: nothing to pass on, false.

CREATE OR REPLACE FUNCTION webhook_ingress.pass_on_attempt(p_id bigint, p_received_at timestamptz, p_attempt integer,
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
    IF coalesce(unrestricted, true) THEN
        RETURN false;
    END IF;
    UPDATE webhook_ingress.jobs j
    SET status           = 'pending',
        attempt_count    = j.attempt_count - 1,
        lease_holder_id  = NULL,
        lease_expires_at = NULL,
        worker_id        = NULL,
        next_attempt_at  = greatest(j.next_attempt_at,
                                    now() + least(interval '1 minute', greatest(interval '1 second', (now() - j.event_received_at) / 10))),
        updated_at       = now()
    WHERE j.id = p_id
      AND j.event_received_at = p_received_at
      AND j.status = 'leased'
      AND j.attempt_count = p_attempt
      AND j.attempted_at = p_leased_at
      AND j.handler IN (SELECT r.handler FROM webhook_ingress.consumer_roles r WHERE r.role_name = caller)
      AND NOT EXISTS (SELECT FROM webhook_ingress.consumer_role_scopes c
                      WHERE c.role_name = caller
                        AND j.provider LIKE c.provider_like
                        AND j.event_type LIKE c.event_type_like)
      AND EXISTS (SELECT FROM webhook_ingress.consumer_roles r
                  JOIN webhook_ingress.consumer_role_scopes c ON c.role_name = r.role_name
                  WHERE r.handler = j.handler AND r.role_name <> caller
                    AND j.provider LIKE c.provider_like
                    AND j.event_type LIKE c.event_type_like);
    RETURN FOUND;
END
$$;

REVOKE ALL ON FUNCTION webhook_ingress.pass_on_attempt(bigint, timestamptz, integer, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.pass_on_attempt(bigint, timestamptz, integer, timestamptz) TO webhook_consumer;
