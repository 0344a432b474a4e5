-- 011_consumer_roles: a database role per consumer (or group of handlers),
-- held to its own handlers by PostgreSQL itself.
--
-- Until now every consumer ran as webhook_worker, which may complete, fail or
-- re-lease any handler's jobs, switch any subscription off, and read every
-- event's body and headers: one compromised consumer could quietly finish or
-- disable another team's handler. Now:
--
-- * webhook_consumer is a group role with webhook_worker's grants. Its members
--   are the per-consumer roles (webhook_consumer_<name>, made by `inlet roles
--   create-consumer <name> --handlers a,b`, i.e. create_consumer_role below).
-- * consumer_roles says which handlers each of them runs.
-- * Row-level security on jobs, job_attempts, subscriptions, consumers and
--   events: a permissive policy lets every role see every row as before, and
--   a RESTRICTIVE policy, which applies only to members of webhook_consumer,
--   narrows them to the rows of the handlers consumer_roles gives
--   current_user (for events: events that have a job of one of them). So a
--   consumer role reads, extends, completes and fails only its own handlers'
--   jobs, appends history only to them, registers, refreshes and disables
--   only their subscriptions, says only they are alive, and reads the bodies
--   of only their events. Restrictive policies are ANDed with every
--   permissive one, so no other grant can widen them.
-- * Every other role (ingress, streamer, operator, sealer, auditor, and
--   webhook_worker itself, the single-team setup) sees what it saw: its
--   policy is `true`, which the planner folds away. The owner bypasses RLS
--   (no FORCE), and so do the SECURITY DEFINER triggers (fan-out, dedupe)
--   that run as the owner.
--
-- Partitions: policies of a partitioned table apply to statements through
-- the parent, and every query names the parent. No application role has any
-- privilege on a partition (CREATE TABLE … PARTITION OF grants none), so
-- none can go around the parent's policies.
--
-- The consumer's policies look roles up by current_user: a consumer service
-- must run as its role (consumer.db_role, i.e. SET ROLE, or logging in as it).
-- A session whose current_user is some other member of webhook_consumer
-- matches no row of consumer_roles and sees no rows at all.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'webhook_consumer') THEN
        CREATE ROLE webhook_consumer NOLOGIN;
    END IF;
END
$$;

-- Which handlers each consumer role runs ------------------------------------------

CREATE TABLE webhook_ingress.consumer_roles (
    role_name  text        NOT NULL,
    handler    text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT consumer_roles_pkey PRIMARY KEY (role_name, handler),
    CONSTRAINT consumer_roles_role_name_length CHECK (role_name <> '' AND octet_length(role_name) <= 63),
    CONSTRAINT consumer_roles_handler_not_empty CHECK (handler <> '')
);
COMMENT ON TABLE webhook_ingress.consumer_roles IS
    'The handlers each per-consumer role (a member of webhook_consumer) may work: row-level security on jobs, job_attempts, subscriptions, consumers and events narrows such a role to these handlers'' rows. Written by inlet roles (create_consumer_role, drop_consumer_role) as the owner.';
COMMENT ON COLUMN webhook_ingress.consumer_roles.role_name IS
    'The role, as current_user names it: a consumer service runs as this role (consumer.db_role).';
COMMENT ON COLUMN webhook_ingress.consumer_roles.handler IS
    'A handler the role runs. A handler may belong to several roles (e.g. while one team''s role replaces another''s).';

-- Row-level security ------------------------------------------------------------------
-- For each table: everyone as before (permissive, true), and members of
-- webhook_consumer only their handlers' rows (restrictive).

ALTER TABLE webhook_ingress.consumer_roles ENABLE ROW LEVEL SECURITY;
CREATE POLICY every_role ON webhook_ingress.consumer_roles AS PERMISSIVE FOR ALL TO PUBLIC
    USING (true) WITH CHECK (true);
CREATE POLICY consumer_own_rows ON webhook_ingress.consumer_roles AS RESTRICTIVE FOR ALL TO webhook_consumer
    USING (role_name = current_user) WITH CHECK (role_name = current_user);

ALTER TABLE webhook_ingress.jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY every_role ON webhook_ingress.jobs AS PERMISSIVE FOR ALL TO PUBLIC
    USING (true) WITH CHECK (true);
CREATE POLICY consumer_own_handlers ON webhook_ingress.jobs AS RESTRICTIVE FOR ALL TO webhook_consumer
    USING (handler IN (SELECT r.handler FROM webhook_ingress.consumer_roles r WHERE r.role_name = current_user))
    WITH CHECK (handler IN (SELECT r.handler FROM webhook_ingress.consumer_roles r WHERE r.role_name = current_user));

-- History rows of the role's own jobs only. A policy's subquery runs as the
-- querying role, under the policies of the tables it reads: the job (probed
-- by its primary key, partition key included) is found only when the jobs
-- policy above lets the role see it, i.e. its handler is the role's.
-- (Repeating the handler test here cost a semi-join with consumer_roles per
-- row for nothing.)
ALTER TABLE webhook_ingress.job_attempts ENABLE ROW LEVEL SECURITY;
CREATE POLICY every_role ON webhook_ingress.job_attempts AS PERMISSIVE FOR ALL TO PUBLIC
    USING (true) WITH CHECK (true);
CREATE POLICY consumer_own_handlers ON webhook_ingress.job_attempts AS RESTRICTIVE FOR ALL TO webhook_consumer
    USING (EXISTS (
        SELECT FROM webhook_ingress.jobs j
        WHERE j.id = job_attempts.job_id
          AND j.event_received_at = job_attempts.event_received_at))
    WITH CHECK (EXISTS (
        SELECT FROM webhook_ingress.jobs j
        WHERE j.id = job_attempts.job_id
          AND j.event_received_at = job_attempts.event_received_at));

ALTER TABLE webhook_ingress.subscriptions ENABLE ROW LEVEL SECURITY;
CREATE POLICY every_role ON webhook_ingress.subscriptions AS PERMISSIVE FOR ALL TO PUBLIC
    USING (true) WITH CHECK (true);
CREATE POLICY consumer_own_handlers ON webhook_ingress.subscriptions AS RESTRICTIVE FOR ALL TO webhook_consumer
    USING (handler IN (SELECT r.handler FROM webhook_ingress.consumer_roles r WHERE r.role_name = current_user))
    WITH CHECK (handler IN (SELECT r.handler FROM webhook_ingress.consumer_roles r WHERE r.role_name = current_user));

-- Liveness too: a role that could say another team's handler is alive would
-- make streamers lease its jobs with nobody there, and the reaper count each
-- expired lease as an attempt until they dead-letter.
ALTER TABLE webhook_ingress.consumers ENABLE ROW LEVEL SECURITY;
CREATE POLICY every_role ON webhook_ingress.consumers AS PERMISSIVE FOR ALL TO PUBLIC
    USING (true) WITH CHECK (true);
CREATE POLICY consumer_own_handlers ON webhook_ingress.consumers AS RESTRICTIVE FOR ALL TO webhook_consumer
    USING (handler IN (SELECT r.handler FROM webhook_ingress.consumer_roles r WHERE r.role_name = current_user))
    WITH CHECK (handler IN (SELECT r.handler FROM webhook_ingress.consumer_roles r WHERE r.role_name = current_user));

-- Bodies and headers of the events that have a job of one of the role's
-- handlers: one probe of jobs_event_handler_key per event read, which sees
-- only the role's jobs (the jobs policy, as for job_attempts).
ALTER TABLE webhook_ingress.events ENABLE ROW LEVEL SECURITY;
CREATE POLICY every_role ON webhook_ingress.events AS PERMISSIVE FOR ALL TO PUBLIC
    USING (true) WITH CHECK (true);
CREATE POLICY consumer_own_events ON webhook_ingress.events AS RESTRICTIVE FOR SELECT TO webhook_consumer
    USING (EXISTS (
        SELECT FROM webhook_ingress.jobs j
        WHERE j.event_id = events.id
          AND j.event_received_at = events.received_at));

-- Privileges --------------------------------------------------------------------------
-- webhook_worker's, row for row narrowed by the policies above; and the role's
-- own rows of consumer_roles, which the policies read as the querying role.

REVOKE ALL ON webhook_ingress.consumer_roles FROM PUBLIC;
GRANT USAGE ON SCHEMA webhook_ingress TO webhook_consumer;
GRANT SELECT ON webhook_ingress.events TO webhook_consumer;
GRANT SELECT ON webhook_ingress.jobs TO webhook_consumer;
GRANT UPDATE (status, next_attempt_at, lease_expires_at, lease_holder_id, worker_id, last_error, last_error_class,
              updated_at, completed_at, completed_attempt_id)
    ON webhook_ingress.jobs TO webhook_consumer;
GRANT SELECT, INSERT (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome, error_class, error)
    ON webhook_ingress.job_attempts TO webhook_consumer;
GRANT USAGE ON SEQUENCE webhook_ingress.job_attempts_id_seq TO webhook_consumer;
GRANT SELECT, INSERT (handler, provider_pattern, event_type_pattern, max_attempts, enabled, updated_at),
    UPDATE (max_attempts, enabled, updated_at)
    ON webhook_ingress.subscriptions TO webhook_consumer;
GRANT SELECT, INSERT, UPDATE, DELETE ON webhook_ingress.consumers TO webhook_consumer;
GRANT SELECT ON webhook_ingress.schema_migrations TO webhook_consumer;
GRANT SELECT ON webhook_ingress.consumer_roles TO webhook_consumer, webhook_auditor, webhook_operator;

-- No role may change the log, whatever was granted elsewhere.
REVOKE UPDATE, DELETE, TRUNCATE ON webhook_ingress.events, webhook_ingress.event_keys, webhook_ingress.retention_log,
    webhook_ingress.audit_checkpoints
    FROM webhook_consumer;

-- Managing consumer roles (the owner: inlet roles) ----------------------------------------

-- Make role p_role (created NOLOGIN when missing) a consumer role running
-- exactly the handlers p_handlers: rows for handlers not listed are removed.
-- An existing role is taken only when it already is a member of
-- webhook_consumer: any other role (a service's, an operator's, a login
-- role) is refused rather than restricted. A superuser or BYPASSRLS role is
-- refused: row-level security would not hold it. Returns one row per handler
-- the role now runs (change added or kept) or no longer runs (removed), and
-- whether the role was created.
CREATE FUNCTION webhook_ingress.create_consumer_role(p_role text, p_handlers text[])
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
    )
    SELECT p_role, created, w.h, CASE WHEN w.h IN (SELECT a.handler FROM added a) THEN 'added' ELSE 'kept' END
    FROM wanted w
    UNION ALL
    SELECT p_role, created, d.handler, 'removed' FROM removed d
    ORDER BY 3;
END
$$;
COMMENT ON FUNCTION webhook_ingress.create_consumer_role(text, text[]) IS
    'inlet roles create-consumer: make a consumer role (a member of webhook_consumer, NOLOGIN when created) that runs exactly the given handlers. For the owner only.';

-- Drop consumer role p_role: its consumer_roles rows, then the role itself
-- (it holds no privilege of its own, only its membership of
-- webhook_consumer, so nothing else refers to it unless granted by hand).
-- Refused for a role that is not a member of webhook_consumer. Returns the
-- handlers it ran.
CREATE FUNCTION webhook_ingress.drop_consumer_role(p_role text)
    RETURNS TABLE (handler text)
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles a ON a.oid = m.member
                   WHERE a.rolname = p_role AND m.roleid = 'webhook_consumer'::regrole) THEN
        RAISE EXCEPTION 'role % is not a consumer role (a member of webhook_consumer)', p_role
            USING ERRCODE = 'undefined_object';
    END IF;
    RETURN QUERY
    DELETE FROM webhook_ingress.consumer_roles c WHERE c.role_name = p_role RETURNING c.handler;
    EXECUTE format('DROP ROLE %I', p_role);
END
$$;
COMMENT ON FUNCTION webhook_ingress.drop_consumer_role(text) IS
    'inlet roles drop-consumer: remove a consumer role and its handler rows. For the owner only.';

REVOKE ALL ON FUNCTION webhook_ingress.create_consumer_role(text, text[]), webhook_ingress.drop_consumer_role(text) FROM PUBLIC;
