-- Login roles for Inlet's services: one per service, each a member of the
-- group role that holds that service's privileges (created by inlet migrate,
-- which grants them column by column). The services then SET ROLE to that
-- group role (ingress.db_role, streamer.db_role, consumer.db_role), so even a
-- login role given more by mistake runs with only its service's grants.
-- inlet_streamer is also a member of webhook_sealer, for the tamper-evidence
-- sealer the shipped inlet.yaml runs inside the streamer (audit.seal_every,
-- audit.db_role): inlet retention drops only sealed periods. webhook_sealer
-- reads the sealed columns of events (headers and body_sha256, never
-- raw_body) and appends checkpoints. Running the sealer apart instead
-- (`inlet audit seal --every 1m` with a login role of its own)? Drop that
-- grant and audit.seal_every.
--
-- Run it with psql as a superuser or as the role that owns the schema (the
-- one inlet migrate connects as: it created the group roles, so it may grant
-- them), before or after the first inlet migrate; running it again only
-- resets the passwords:
--
--   psql "$OWNER_DATABASE_URL" \
--     -v ingress_password="$INGRESS_PW" \
--     -v streamer_password="$STREAMER_PW" \
--     -v consumer_password="$CONSUMER_PW" \
--     -f deployments/postgres/roles.sql
--
-- deployments/compose runs it when the postgres container first starts.

\set ON_ERROR_STOP on

-- The group roles, NOLOGIN and without privileges, when inlet migrate has not
-- made them yet (it creates only the missing ones and grants to them).
SELECT format('CREATE ROLE %I NOLOGIN', r)
FROM unnest(ARRAY['webhook_ingress_writer', 'webhook_streamer', 'webhook_worker', 'webhook_auditor', 'webhook_sealer']) AS r
WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r)
\gexec

-- The login roles.
SELECT format('CREATE ROLE %I LOGIN', r)
FROM unnest(ARRAY['inlet_ingress', 'inlet_streamer', 'inlet_consumer']) AS r
WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r)
\gexec

ALTER ROLE inlet_ingress PASSWORD :'ingress_password';
ALTER ROLE inlet_streamer PASSWORD :'streamer_password';
ALTER ROLE inlet_consumer PASSWORD :'consumer_password';

GRANT webhook_ingress_writer TO inlet_ingress;
GRANT webhook_streamer TO inlet_streamer;
GRANT webhook_sealer TO inlet_streamer;
GRANT webhook_worker TO inlet_consumer;

GRANT CONNECT ON DATABASE :"DBNAME" TO inlet_ingress, inlet_streamer, inlet_consumer;
-- Optionally keep every other role out of this database:
-- REVOKE CONNECT, TEMPORARY ON DATABASE :"DBNAME" FROM PUBLIC;

-- Only for streamer.wake: replication. A logical replication connection needs
-- the REPLICATION attribute (powerful: keep it to the streamer). Only a
-- superuser may give it (PostgreSQL 16 and later: also a CREATEROLE role
-- that has REPLICATION itself and ADMIN OPTION on inlet_streamer), not the
-- owner, whose CREATEROLE is not enough. On a managed service without a
-- superuser, its own way: on Amazon RDS and Aurora, GRANT rds_replication TO
-- inlet_streamer; on Cloud SQL, with the cloudsql.logical_decoding flag on,
-- ALTER ROLE inlet_streamer WITH REPLICATION as a cloudsqlsuperuser member
-- (the postgres user). So, as a superuser:
-- ALTER ROLE inlet_streamer REPLICATION;
-- The publication must exist too; the streamer creates it when its role may,
-- else run this as the owner of webhook_ingress.jobs after inlet migrate:
-- CREATE PUBLICATION inlet_jobs FOR TABLE webhook_ingress.jobs WITH (publish = 'insert, update', publish_via_partition_root = true);

-- Several teams' consumers: give each team a consumer role of its own, which
-- row-level security holds to its handlers' jobs, subscriptions and event
-- bodies (docs/operations.md, "A database role per consumer"), and take webhook_worker,
-- which runs every handler, away from its login role:
--   inlet roles create-consumer payments --handlers billing,refunds --scope stripe --member payments_login
-- then consumer.db_role: webhook_consumer_payments in that team's config.

-- An auditor (reads everything in webhook_ingress, writes nothing):
-- CREATE ROLE alice LOGIN PASSWORD '…' IN ROLE webhook_auditor;
