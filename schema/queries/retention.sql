-- Queries of inlet retention (package retention). It runs as the owner of
-- webhook_ingress: only the owner may create or drop partitions, and the
-- maintenance functions (005_partitions) are not granted to any other role.

-- name: RetentionOwner :one
-- Who is connected, who owns events, and whether the first may act as the second.
SELECT current_user::text, pg_catalog.pg_get_userbyid(c.relowner)::text,
       pg_catalog.pg_has_role(current_user, c.relowner, 'USAGE')
FROM pg_catalog.pg_class c
WHERE c.oid = 'webhook_ingress.events'::regclass;

-- name: RetentionLockTimeout :exec
-- Partition DDL takes an ACCESS EXCLUSIVE lock on the parent: wait at most $1
-- (text, e.g. '5s') for it rather than queue ingress behind a long reader.
SELECT pg_catalog.set_config('lock_timeout', $1, true);

-- name: RetentionCreatePartitions :many
-- Period partitions from the newest one through $2 periods of $1 past now.
SELECT period_start, period_end FROM webhook_ingress.create_partitions($1, $2);

-- name: RetentionPartitions :many
-- Every period partition, oldest first, and the database's clock.
SELECT period_start, period_end, events_partition, now() FROM webhook_ingress.partitions();

-- name: RetentionPartitionStatus :one
-- What the partition starting at $1 holds, and what would keep it.
SELECT events, min_event_id, max_event_id, jobs, open_jobs, dead_letters, attempts, sealed_through
FROM webhook_ingress.partition_status($1);

-- name: RetentionDropPartition :one
-- Drop the partition starting at $1 (re-checked under lock); its retention_log row.
SELECT events, jobs, attempts, sealed_through FROM webhook_ingress.drop_partition($1);

-- name: RetentionDefaultPartition :one
-- Events no period partition covered when they arrived: kept, never dropped.
SELECT count(*), min(received_at), max(received_at) FROM webhook_ingress.events_default;
