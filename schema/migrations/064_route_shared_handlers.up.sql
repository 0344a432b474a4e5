-- 064_route_shared_handlers: a handler shared by consumer roles is
-- published per role, and 063's pass-on is gone (review helper-169).
--
-- 063 let a consumer that got a reference to a job its role may not see
-- give the lease back (pass_on_attempt), on the strength of the lease token
-- alone. Taking an attempt writes nothing, so nothing told a reference
-- waiting in the bus from one another role's consumer was running: team A,
-- given a duplicate of team B's reference (or reading the topic at will),
-- reset B's running attempt (B's outcome fenced out, the job pending again
-- uncounted, for ever if repeated), writing to jobs that 038's row-level
-- security keeps it from reading. And a job whose other role had been
-- dropped circled for ever. Dropped here.
--
-- Instead the streamer sends each job of a shared handler only to a role
-- that may take it: a consumer of a scoped role says which role it runs as
-- (consumers.db_role, its own only: a policy) and reads the topic
-- inlet.jobs.HANDLER.ROLE beside inlet.jobs.HANDLER; for a handler with
-- consumers of two roles or more saying so, the streamer publishes a job on
-- the topic of the first such role (by name) whose scopes cover its source
-- and type (ListJobRoutes), and on the handler's own topic when none does.
-- Consumers of the previous version say no role (NULL): their handler is
-- published as before, on its own topic, until every role's consumers run
-- the new version. It reads the roles' handlers and scopes, which the
-- streamer may now read (names and patterns, no event).

DROP FUNCTION IF EXISTS webhook_ingress.pass_on_attempt(bigint, timestamptz, integer, timestamptz);

ALTER TABLE webhook_ingress.consumers ADD COLUMN IF NOT EXISTS db_role text;

-- A consumer role says only that it runs as itself: saying another role
-- would route that role's jobs to a topic of its choosing. (Idempotent, as
-- the migrations since 060 are: a rewound schema_migrations runs them again.)
DROP POLICY IF EXISTS consumer_own_db_role ON webhook_ingress.consumers;
DROP POLICY IF EXISTS consumer_own_db_role_update ON webhook_ingress.consumers;
CREATE POLICY consumer_own_db_role ON webhook_ingress.consumers AS RESTRICTIVE FOR INSERT TO webhook_consumer
    WITH CHECK (db_role IS NULL OR db_role = current_user);
CREATE POLICY consumer_own_db_role_update ON webhook_ingress.consumers AS RESTRICTIVE FOR UPDATE TO webhook_consumer
    USING (true) WITH CHECK (db_role IS NULL OR db_role = current_user);

GRANT SELECT ON webhook_ingress.consumer_roles, webhook_ingress.consumer_role_scopes TO webhook_streamer;
