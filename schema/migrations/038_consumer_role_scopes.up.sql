-- 038_consumer_role_scopes: a consumer role reads only the events the
-- operator let it, not the events it subscribes itself to.
--
-- 011 held a consumer role (webhook_consumer_<name>) to its own handlers'
-- rows, and to the bodies of the events that have a job of one of them. But
-- the role writes its handlers' subscriptions, and so chose which events get
-- those jobs: registering its handler for every source and type ('*') was
-- allowed, and from then on the owner's fan-out gave it a job, and so the
-- body and headers, of every event, another team's included (schema
-- TestConsumerCannotWidenItsSubscriptionToReadOtherTeamsEvents).
--
-- Now the owner also pins what each role may subscribe to:
--
-- * consumer_role_scopes holds, per role, (source pattern, event type
--   pattern) pairs, globs as the subscriptions' ('*' any run of characters).
--   inlet roles create-consumer NAME --handlers … --scope SOURCE[:TYPE]
--   writes them (create_consumer_role, now with the scope arrays).
-- * A consumer role may have an enabled subscription only when one of its
--   scopes covers both its patterns (a restrictive WITH CHECK on INSERT and
--   UPDATE): 'stripe' with 'invoice.*' under a scope stripe:*, not '*'. It
--   may still disable any of its handlers' subscriptions.
-- * It sees, and so reads, extends, completes, fails and gives back, only
--   the jobs of its handlers inside one of its scopes (a restrictive policy
--   on jobs; job_attempts follow, their policy probing jobs), and reads the
--   body and headers only of events inside one, besides having a job of one
--   of its handlers (a restrictive SELECT policy on events). A subscription
--   wider than the scope, enabled before this migration or by the owner, or
--   left enabled when the operator narrows the scope, or a handler shared
--   with a role of another scope, does not open the events outside it, nor
--   their jobs, whose order_key and error texts may copy body and header
--   values. Such a job is one the consumer cannot take: its leases expire
--   until the reaper dead-letters it (lease_expired; replayable once a
--   scope covers it, or run by a role whose scope does).
--
-- Coverage: a pattern P lies inside scope pattern S when P, read as plain
-- text, matches S's LIKE pattern (its '*' the only wildcard). Each '*' of P
-- can then only be matched by a '*' of S, which matches whatever P's '*'
-- does; so every value P matches, S matches too.
--
-- Upgrade: every existing consumer role is pinned to the patterns of its
-- handlers' enabled subscriptions as they stand, so running consumers keep
-- registering what they register today. A role that had already widened
-- its subscription keeps that width: check `inlet roles list` after
-- upgrading. A role with no enabled subscription gets no scope, and its
-- consumer's registration fails until the operator gives it one.
-- Rolling upgrade: old consumers write the same rows; only a widening one
-- is refused.

CREATE TABLE webhook_ingress.consumer_role_scopes (
    role_name          text        NOT NULL,
    provider_pattern   text        NOT NULL,
    event_type_pattern text        NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    provider_like      text        GENERATED ALWAYS AS (
        replace(replace(replace(replace(provider_pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%')) STORED,
    event_type_like    text        GENERATED ALWAYS AS (
        replace(replace(replace(replace(event_type_pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%')) STORED,
    CONSTRAINT consumer_role_scopes_pkey PRIMARY KEY (role_name, provider_pattern, event_type_pattern),
    CONSTRAINT consumer_role_scopes_provider_pattern CHECK (provider_pattern <> '' AND octet_length(provider_pattern) <= 256),
    CONSTRAINT consumer_role_scopes_event_type_pattern CHECK (octet_length(event_type_pattern) <= 256)
);
COMMENT ON TABLE webhook_ingress.consumer_role_scopes IS
    'The events each consumer role may subscribe its handlers to and read: (source pattern, event type pattern) globs. A role''s enabled subscriptions must lie inside one of them, and it reads the bodies only of events inside one. Written by inlet roles create-consumer --scope (create_consumer_role) as the owner.';

ALTER TABLE webhook_ingress.consumer_role_scopes ENABLE ROW LEVEL SECURITY;
CREATE POLICY every_role ON webhook_ingress.consumer_role_scopes AS PERMISSIVE FOR ALL TO PUBLIC
    USING (true) WITH CHECK (true);
CREATE POLICY consumer_own_rows ON webhook_ingress.consumer_role_scopes AS RESTRICTIVE FOR ALL TO webhook_consumer
    USING (role_name = current_user) WITH CHECK (role_name = current_user);
REVOKE ALL ON webhook_ingress.consumer_role_scopes FROM PUBLIC;
GRANT SELECT ON webhook_ingress.consumer_role_scopes TO webhook_consumer, webhook_auditor, webhook_operator;

-- Today's width of every consumer role, so nothing running breaks.
INSERT INTO webhook_ingress.consumer_role_scopes (role_name, provider_pattern, event_type_pattern)
SELECT DISTINCT r.role_name, s.provider_pattern, s.event_type_pattern
FROM webhook_ingress.consumer_roles r
JOIN webhook_ingress.subscriptions s ON s.handler = r.handler
WHERE s.enabled AND s.provider_pattern <> '' AND octet_length(s.provider_pattern) <= 256
  AND octet_length(s.event_type_pattern) <= 256;

-- Subscriptions: enabled only inside a scope. Both INSERT (a new pattern)
-- and UPDATE (re-enabling one, or an upsert's DO UPDATE) are checked; a
-- disabled row is always allowed, so a role can switch off what it may no
-- longer have.
CREATE POLICY consumer_in_scope_insert ON webhook_ingress.subscriptions AS RESTRICTIVE FOR INSERT TO webhook_consumer
    WITH CHECK (NOT enabled OR EXISTS (
        SELECT FROM webhook_ingress.consumer_role_scopes c
        WHERE c.role_name = current_user
          AND subscriptions.provider_pattern LIKE c.provider_like
          AND subscriptions.event_type_pattern LIKE c.event_type_like));
CREATE POLICY consumer_in_scope_update ON webhook_ingress.subscriptions AS RESTRICTIVE FOR UPDATE TO webhook_consumer
    USING (true)
    WITH CHECK (NOT enabled OR EXISTS (
        SELECT FROM webhook_ingress.consumer_role_scopes c
        WHERE c.role_name = current_user
          AND subscriptions.provider_pattern LIKE c.provider_like
          AND subscriptions.event_type_pattern LIKE c.event_type_like));

-- Jobs: inside a scope, besides being of one of the role's handlers
-- (consumer_own_handlers, 011). A job carries its event's source and type.
-- job_attempts' policy finds the job under this one, so a role reads no
-- error text of a job outside its scopes either.
CREATE POLICY consumer_in_scope ON webhook_ingress.jobs AS RESTRICTIVE FOR ALL TO webhook_consumer
    USING (EXISTS (
        SELECT FROM webhook_ingress.consumer_role_scopes c
        WHERE c.role_name = current_user
          AND jobs.provider LIKE c.provider_like
          AND jobs.event_type LIKE c.event_type_like));

-- Events: inside a scope, besides having one of the role's jobs
-- (consumer_own_events, 011).
CREATE POLICY consumer_in_scope ON webhook_ingress.events AS RESTRICTIVE FOR SELECT TO webhook_consumer
    USING (EXISTS (
        SELECT FROM webhook_ingress.consumer_role_scopes c
        WHERE c.role_name = current_user
          AND events.provider LIKE c.provider_like
          AND events.event_type LIKE c.event_type_like));

-- Managing consumer roles ----------------------------------------------------------------

DROP FUNCTION webhook_ingress.create_consumer_role(text, text[]);

-- As 011's, and: p_scope_providers[i], p_scope_types[i] are the role's
-- scopes, replacing its old ones; both NULL keep them. A role left with no
-- scope is refused (its consumer could register nothing). Returns one row
-- per handler (added, kept, removed) and per scope (scope_added,
-- scope_kept, scope_removed; handler is then 'source:type').
CREATE FUNCTION webhook_ingress.create_consumer_role(p_role text, p_handlers text[],
                                                     p_scope_providers text[], p_scope_types text[])
    RETURNS TABLE (role_name text, role_created boolean, handler text, change text)
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS
$$
DECLARE
    r       record;
    created boolean := false;
BEGIN
    IF p_role IS NULL OR p_role !~ '^[a-z_][a-z0-9_]*$' OR octet_length(p_role) > 63 THEN
        RAISE EXCEPTION 'consumer role name %: lower-case letters, digits and _, at most 63 bytes', p_role
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_role IN ('webhook_ingress_writer', 'webhook_streamer', 'webhook_worker', 'webhook_auditor',
                  'webhook_operator', 'webhook_sealer', 'webhook_consumer') THEN
        RAISE EXCEPTION 'role % is one of Inlet''s service roles, not a consumer role', p_role
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(cardinality(p_handlers), 0) = 0 OR array_position(p_handlers, NULL) IS NOT NULL
       OR array_position(p_handlers, '') IS NOT NULL THEN
        RAISE EXCEPTION 'consumer role %: at least one handler, none empty', p_role
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (p_scope_providers IS NULL) <> (p_scope_types IS NULL)
       OR coalesce(cardinality(p_scope_providers), 0) <> coalesce(cardinality(p_scope_types), 0) THEN
        RAISE EXCEPTION 'consumer role %: scope sources and types are parallel arrays, both or neither', p_role
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_scope_providers IS NOT NULL AND (cardinality(p_scope_providers) = 0
       OR array_position(p_scope_providers, NULL) IS NOT NULL OR array_position(p_scope_providers, '') IS NOT NULL
       OR array_position(p_scope_types, NULL) IS NOT NULL) THEN
        RAISE EXCEPTION 'consumer role %: at least one scope, every source pattern set (use * for any source)', p_role
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT a.oid, a.rolsuper, a.rolbypassrls INTO r FROM pg_catalog.pg_roles a WHERE a.rolname = p_role;
    IF NOT FOUND THEN
        EXECUTE format('CREATE ROLE %I NOLOGIN', p_role);
        created := true;
    ELSIF r.rolsuper OR r.rolbypassrls THEN
        RAISE EXCEPTION 'role % is a superuser or has BYPASSRLS: row-level security cannot hold it to its handlers', p_role
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF NOT EXISTS (SELECT FROM pg_catalog.pg_auth_members m
                      WHERE m.member = r.oid AND m.roleid = 'webhook_consumer'::regrole) THEN
        RAISE EXCEPTION 'role % exists and is not a consumer role (a member of webhook_consumer); choose another name', p_role
            USING ERRCODE = 'duplicate_object';
    END IF;
    IF created THEN
        EXECUTE format('GRANT webhook_consumer TO %I', p_role);
        -- Rows a role of this name left when it was dropped by hand (DROP
        -- ROLE, not drop_consumer_role) are not the new role's.
        DELETE FROM webhook_ingress.consumer_roles c WHERE c.role_name = p_role;
        DELETE FROM webhook_ingress.consumer_role_scopes c WHERE c.role_name = p_role;
    END IF;
    IF p_scope_providers IS NULL AND NOT EXISTS (
        SELECT FROM webhook_ingress.consumer_role_scopes c WHERE c.role_name = p_role) THEN
        RAISE EXCEPTION 'consumer role % has no scope: give the sources (and types) whose events its handlers may subscribe to and read (--scope SOURCE[:TYPE], --scope ''*'' for every event)', p_role
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    WITH wanted AS (
        SELECT DISTINCT h FROM unnest(p_handlers) AS h
    ), removed AS (
        DELETE FROM webhook_ingress.consumer_roles c
        WHERE c.role_name = p_role AND c.handler NOT IN (SELECT h FROM wanted)
        RETURNING c.handler
    ), added AS (
        INSERT INTO webhook_ingress.consumer_roles (role_name, handler)
        SELECT p_role, h FROM wanted
        ON CONFLICT ON CONSTRAINT consumer_roles_pkey DO NOTHING
        RETURNING consumer_roles.handler
    ), scopes AS (
        SELECT DISTINCT u.p, u.t FROM ROWS FROM (unnest(p_scope_providers), unnest(p_scope_types)) AS u(p, t)
    ), scopes_removed AS (
        DELETE FROM webhook_ingress.consumer_role_scopes c
        WHERE p_scope_providers IS NOT NULL AND c.role_name = p_role
          AND (c.provider_pattern, c.event_type_pattern) NOT IN (SELECT s.p, s.t FROM scopes s)
        RETURNING c.provider_pattern, c.event_type_pattern
    ), scopes_added AS (
        INSERT INTO webhook_ingress.consumer_role_scopes (role_name, provider_pattern, event_type_pattern)
        SELECT p_role, s.p, s.t FROM scopes s
        ON CONFLICT ON CONSTRAINT consumer_role_scopes_pkey DO NOTHING
        RETURNING consumer_role_scopes.provider_pattern, consumer_role_scopes.event_type_pattern
    )
    SELECT o.r, o.c, o.h, o.ch FROM (
        SELECT p_role AS r, created AS c, w.h AS h,
               CASE WHEN w.h IN (SELECT a.handler FROM added a) THEN 'added' ELSE 'kept' END AS ch
        FROM wanted w
        UNION ALL
        SELECT p_role, created, d.handler, 'removed' FROM removed d
        UNION ALL
        SELECT p_role, created, s.p || ':' || s.t,
               CASE WHEN (s.p, s.t) IN (SELECT a.provider_pattern, a.event_type_pattern FROM scopes_added a)
                    THEN 'scope_added' ELSE 'scope_kept' END
        FROM scopes s
        UNION ALL
        SELECT p_role, created, d.provider_pattern || ':' || d.event_type_pattern, 'scope_removed' FROM scopes_removed d
    ) o
    ORDER BY o.ch LIKE 'scope%', o.h;
END
$$;
COMMENT ON FUNCTION webhook_ingress.create_consumer_role(text, text[], text[], text[]) IS
    'inlet roles create-consumer: make a consumer role (a member of webhook_consumer, NOLOGIN when created) that runs exactly the given handlers, inside the given scopes (source pattern, event type pattern; NULL keeps them). For the owner only.';
REVOKE ALL ON FUNCTION webhook_ingress.create_consumer_role(text, text[], text[], text[]) FROM PUBLIC;

-- Dropping a role drops its scopes too.
CREATE OR REPLACE FUNCTION webhook_ingress.drop_consumer_role(p_role text)
    RETURNS TABLE (handler text)
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles a ON a.oid = m.member
                   WHERE a.rolname = p_role AND m.roleid = 'webhook_consumer'::regrole) THEN
        RAISE EXCEPTION 'role % is not a consumer role (a member of webhook_consumer)', p_role
            USING ERRCODE = 'undefined_object';
    END IF;
    DELETE FROM webhook_ingress.consumer_role_scopes c WHERE c.role_name = p_role;
    RETURN QUERY
    DELETE FROM webhook_ingress.consumer_roles c WHERE c.role_name = p_role RETURNING c.handler;
    EXECUTE format('DROP ROLE %I', p_role);
END
$$;

-- give_back_attempt runs as the owner and applies the consumer policies
-- itself (029): now the scope too, as the jobs policy above does.
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
        next_attempt_at  = now(),
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
