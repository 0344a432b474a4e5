-- Queries of inlet retention (package retention). It runs as the owner of
-- webhook_ingress: only the owner may create or drop partitions, and the
-- maintenance functions (005_partitions) are not granted to any other role.

-- name: RetentionOwner :one
-- Who is connected, who owns events, and whether the first may act as the second.
SELECT current_user::text AS connected_as, pg_catalog.pg_get_userbyid(c.relowner)::text AS owner,
       pg_catalog.pg_has_role(current_user, c.relowner, 'USAGE') AS may_act_as_owner
FROM pg_catalog.pg_class c
WHERE c.oid = 'webhook_ingress.events'::regclass;

-- name: RetentionLockTimeout :exec
-- Partition DDL takes an ACCESS EXCLUSIVE lock on the parent: wait at most
-- lock_timeout (text, e.g. '5s') for it rather than queue ingress behind a
-- long reader.
SELECT pg_catalog.set_config('lock_timeout', sqlc.arg(lock_timeout)::text, true);

-- name: RetentionSerialize :exec
-- One partition change at a time in the database: runs of inlet migrate and
-- inlet retention on several hosts at once would otherwise each create the
-- same missing period (relation already exists) or drop the same expired one.
-- Held to the end of the transaction and waited for within its lock_timeout;
-- the key spells 'partitns' in ASCII.
SELECT pg_catalog.pg_advisory_xact_lock(x'7061727469746e73'::bigint);

-- name: RetentionCreatePartitions :many
-- Period partitions from the newest one through ahead periods of period past now.
SELECT period_start::timestamptz AS period_start, period_end::timestamptz AS period_end
FROM webhook_ingress.create_partitions(sqlc.arg(period)::text, sqlc.arg(ahead)::integer);

-- name: RetentionPartitions :many
-- Every period partition, oldest first, and the database's clock.
SELECT period_start::timestamptz AS period_start, period_end::timestamptz AS period_end,
       events_partition::text AS events_partition, now()::timestamptz AS now
FROM webhook_ingress.partitions();

-- name: RetentionPartitionStatus :one
-- What the partition starting at period_start holds, and what would keep it.
SELECT events::bigint AS events, min_event_id, max_event_id, jobs::bigint AS jobs, open_jobs::bigint AS open_jobs,
       dead_letters::bigint AS dead_letters, attempts::bigint AS attempts, sealed_through::bigint AS sealed_through
FROM webhook_ingress.partition_status(sqlc.arg(period_start)::timestamptz);

-- name: RetentionDropPartition :one
-- Drop the partition starting at period_start (re-checked under lock); its
-- retention_log row.
SELECT events, jobs, attempts, sealed_through
FROM webhook_ingress.drop_partition(sqlc.arg(period_start)::timestamptz);

-- name: RetentionDefaultPartition :one
-- Events no period partition covered when they arrived: kept, never dropped.
-- oldest and newest are meaningless when events is 0 (min and max are NULL
-- then; sqlc cannot type a nullable computed column, so they are coalesced).
SELECT count(*) AS events,
       coalesce(min(received_at), 'epoch')::timestamptz AS oldest,
       coalesce(max(received_at), 'epoch')::timestamptz AS newest
FROM webhook_ingress.events_default;

-- name: RetentionDeleteDueKeys :one
-- The dedupe keys of every dropped period recorded in retention_keys_due
-- (by the trigger on retention_log, 057),
-- and the records, in one statement (a run interrupted before it leaves the
-- records for the next run). inlet retention runs it after drop_partition
-- committed, outside its locks (044): an old key arriving meanwhile waits on
-- a row. Two runs at once: the second waits on the first's records, then
-- finds them gone.
WITH due AS (
    DELETE FROM webhook_ingress.retention_keys_due RETURNING period_start, period_end
), gone AS (
    DELETE FROM webhook_ingress.event_keys k USING due
    WHERE k.received_at >= due.period_start AND k.received_at < due.period_end
    RETURNING 1
)
SELECT (SELECT count(*) FROM due)::bigint AS periods, (SELECT count(*) FROM gone)::bigint AS keys;

-- name: RetentionKeysPending :one
-- Whether dropped periods' dedupe keys wait for deletion.
SELECT EXISTS (SELECT 1 FROM webhook_ingress.retention_keys_due) AS pending;
