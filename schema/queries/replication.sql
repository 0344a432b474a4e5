-- Queries of the streamer's replication wake source (streamer.wake:
-- replication). They run on its replication=database connection, which speaks
-- only the simple query protocol: no parameters here.

-- name: JobsPublication :one
-- Is the publication the streamer follows there, and does it carry what it
-- needs? No row: it is missing. has_jobs false: it exists without the jobs
-- table (then it wakes nobody). Also run every 30s on the streamer's pool
-- while a stream is up, so a publication altered meanwhile is noticed (the
-- catalogs are readable by every role, webhook_streamer too).
SELECT p.pubinsert,
       p.pubupdate,
       EXISTS (SELECT 1
               FROM pg_catalog.pg_publication_tables t
               WHERE t.pubname = p.pubname
                 AND t.schemaname = 'webhook_ingress'
                 AND t.tablename = 'jobs') AS has_jobs
FROM pg_catalog.pg_publication p
WHERE p.pubname = 'inlet_jobs';

-- name: CreateJobsPublication :exec
-- Only the owner of webhook_ingress.jobs (or a superuser) may run this; the
-- streamer does when its replication role is allowed to, otherwise it stops
-- and names this statement for an operator to run. Inserts wake streamers;
-- updates do too when they make a job pending again (reaper, replay). Changes
-- to jobs' partitions are published as changes to jobs.
CREATE PUBLICATION inlet_jobs FOR TABLE webhook_ingress.jobs WITH (publish = 'insert, update', publish_via_partition_root = true);
