-- 067_registration_keeps_other_roles_rows: a registration leaves alone the
-- subscriptions another consumer role of the handler may have declared
-- (review helper-173).
--
-- 046 made a scoped role's registration switch off only rows inside its own
-- scopes, but a role without scopes (webhook_worker, the owner) still
-- switched off every row of the handler it had not declared: with a handler
-- shared by a team's scoped role (stripe) and the platform's webhook_worker
-- consumers (github), each start of the platform's consumer switched off
-- the team's stripe row, and stripe events got no job of the handler until
-- the team's service happened to restart. Now DisableOtherSubscriptions
-- also passes over a row inside a scope of another scoped role given the
-- handler (consumer_roles): that role may have declared it, and its own
-- registration, or inlet subscriptions disable, switches it off. SECURITY
-- DEFINER, as in_registrant_scope: only the owner reads the scopes whole;
-- it answers a boolean. Idempotent, as the migrations since 060.

CREATE OR REPLACE FUNCTION webhook_ingress.another_role_may_own(p_role text, p_handler text, p_provider_pattern text,
                                                                 p_event_type_pattern text)
    RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
    SELECT EXISTS (SELECT FROM webhook_ingress.consumer_roles r
                   JOIN webhook_ingress.consumer_role_scopes c ON c.role_name = r.role_name
                   WHERE r.handler = p_handler AND r.role_name <> p_role
                     AND p_provider_pattern LIKE c.provider_like
                     AND p_event_type_pattern LIKE c.event_type_like)
$$;
REVOKE ALL ON FUNCTION webhook_ingress.another_role_may_own(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.another_role_may_own(text, text, text, text) TO webhook_worker, webhook_consumer;
