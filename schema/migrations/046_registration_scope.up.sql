-- 046_registration_scope: a consumer's registration switches off only the
-- subscriptions inside its own role's scopes.
--
-- A handler may be shared by two consumer roles of different scopes (038).
-- Each service's registration switched off every enabled row of the handler
-- it had not declared itself (DisableOtherSubscriptions), so the role that
-- started last switched off the other's rows (the restrictive policy always
-- lets a row be disabled): the other scope's events got no job of the
-- handler until that service restarted. DisableOtherSubscriptions now asks
-- in_registrant_scope, which answers for the role named (current_user of the
-- registering statement): true for a role without scopes (webhook_worker,
-- the owner), else whether the pattern lies inside one of its scopes, as
-- 038's policies test it. SECURITY DEFINER: only the owner reads the scopes
-- table whole.
CREATE FUNCTION webhook_ingress.in_registrant_scope(p_role text, p_provider_pattern text, p_event_type_pattern text)
    RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
    SELECT NOT EXISTS (SELECT FROM webhook_ingress.consumer_role_scopes c WHERE c.role_name = p_role)
        OR EXISTS (SELECT FROM webhook_ingress.consumer_role_scopes c
                   WHERE c.role_name = p_role
                     AND p_provider_pattern LIKE c.provider_like
                     AND p_event_type_pattern LIKE c.event_type_like)
$$;
REVOKE ALL ON FUNCTION webhook_ingress.in_registrant_scope(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.in_registrant_scope(text, text, text) TO webhook_worker, webhook_consumer;
