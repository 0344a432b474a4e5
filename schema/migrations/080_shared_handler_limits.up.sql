-- 080_shared_handler_limits: a registration leaves the limits of a handler
-- another consumer role is also given (review helper-331).
--
-- A handler shared by two consumer roles has one handler_limits row, and
-- each registration rewrote it whole: a consumer declaring no limits
-- deleted it (consumer_own_handlers lets either role), so team A's rate
-- limit, in-flight limit and breaker, an open circuit included, vanished
-- when team B's consumer started, and every streamer claimed the handler
-- unlimited. Now a registration asks another_role_given first, as 067's
-- another_role_may_own is asked for subscription rows: for a handler that
-- another role (consumer_roles, besides the registrant) is given, a
-- consumer declaring no limits leaves the row, and one declaring limits
-- writes the kinds it declares and keeps the others
-- (UpsertSharedHandlerLimits), so a registration never resets a circuit.
-- SECURITY DEFINER, as another_role_may_own: a consumer role reads only its
-- own consumer_roles rows, webhook_worker none; it answers a boolean.
--
-- A restrictive DELETE policy holds the same for any registrant, a consumer
-- of the previous version included (its DeleteHandlerLimits then deletes
-- nothing); the owner (inlet migrate's role) is not held.
--
-- Safe on a large live log: events and jobs are untouched. The policy takes
-- handler_limits' ACCESS EXCLUSIVE lock for an instant (a row per limited
-- handler), under inlet migrate's 10 s lock_timeout: the streamers' claims,
-- which read the table, wait for it meanwhile; ingest does not read it.
-- Idempotent, as the migrations since 060: CREATE OR REPLACE, and the
-- policy dropped before it is made again.

CREATE OR REPLACE FUNCTION webhook_ingress.another_role_given(p_role text, p_handler text)
    RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
    SELECT EXISTS (SELECT FROM webhook_ingress.consumer_roles r
                   WHERE r.handler = p_handler AND r.role_name <> p_role)
$$;
REVOKE ALL ON FUNCTION webhook_ingress.another_role_given(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.another_role_given(text, text) TO webhook_worker, webhook_consumer;
COMMENT ON FUNCTION webhook_ingress.another_role_given(text, text) IS
    'Whether a consumer role other than p_role is given handler p_handler (consumer_roles): its consumers may have declared the handler''s limits, which p_role''s registration then does not remove (080).';

DROP POLICY IF EXISTS registrant_keeps_shared_limits ON webhook_ingress.handler_limits;
CREATE POLICY registrant_keeps_shared_limits ON webhook_ingress.handler_limits AS RESTRICTIVE FOR DELETE
    TO webhook_worker, webhook_consumer
    USING (NOT webhook_ingress.another_role_given(current_user::text, handler));
