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

-- name: RetentionPeriodStatus :one
-- What RetentionPartitionStatus reads, through the parent tables: for a
-- period partition_status may not read, its partitions belonging to a login
-- the connected role may not act as (RetentionNotOwned), so that the period
-- kept for it is reported with what it holds. A query on a partitioned table
-- checks the parent's privileges alone, and the bounds, the period's, prune
-- it to the period's partitions. max_event_id is 0 for none.
WITH e AS (
    SELECT count(*) AS events, coalesce(max(id), 0) AS max_event_id
    FROM webhook_ingress.events
    WHERE received_at >= sqlc.arg(period_start)::timestamptz AND received_at < sqlc.arg(period_end)::timestamptz
), j AS (
    SELECT count(*) AS jobs, count(*) FILTER (WHERE status IN ('pending', 'leased', 'failed')) AS open_jobs,
           count(*) FILTER (WHERE status = 'dead_letter') AS dead_letters, count(completed_attempt_id) AS successes
    FROM webhook_ingress.jobs
    WHERE event_received_at >= sqlc.arg(period_start)::timestamptz AND event_received_at < sqlc.arg(period_end)::timestamptz
), a AS (
    SELECT count(*) AS attempts
    FROM webhook_ingress.job_attempts
    WHERE event_received_at >= sqlc.arg(period_start)::timestamptz AND event_received_at < sqlc.arg(period_end)::timestamptz
)
SELECT e.events::bigint AS events, e.max_event_id::bigint AS max_event_id, j.jobs::bigint AS jobs,
       j.open_jobs::bigint AS open_jobs, j.dead_letters::bigint AS dead_letters,
       (a.attempts + j.successes)::bigint AS attempts,
       (SELECT coalesce(max(c.last_event_id), 0) FROM webhook_ingress.audit_checkpoints c)::bigint AS sealed_through
FROM e, j, a;

-- name: RetentionNotOwned :many
-- The partitions of the period starting at period_start that the connected
-- role may not act as the owner of (created by another member of the owner
-- role before 060 made create_partitions give them to the owner, and not
-- re-owned by the upgrade's runner), with their owner and their parent's.
SELECT c.relname::text AS partition, pg_catalog.pg_get_userbyid(c.relowner)::text AS owner,
       pg_catalog.pg_get_userbyid(pt.relowner)::text AS parent_owner
FROM pg_catalog.pg_inherits i
JOIN pg_catalog.pg_class pt ON pt.oid = i.inhparent
JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
WHERE pt.oid IN ('webhook_ingress.events'::regclass, 'webhook_ingress.jobs'::regclass, 'webhook_ingress.job_attempts'::regclass)
  AND c.relname IN (webhook_ingress.partition_name('events', sqlc.arg(period_start)::timestamptz),
                    webhook_ingress.partition_name('jobs', sqlc.arg(period_start)::timestamptz),
                    webhook_ingress.partition_name('job_attempts', sqlc.arg(period_start)::timestamptz))
  AND NOT pg_catalog.pg_has_role(current_user, c.relowner, 'USAGE')
ORDER BY 1;

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

-- name: RetentionDroppedThrough :one
-- The end of the newest period inlet retention dropped: before it the log
-- may lack events it once held, and event_keys (once the drop's keys are
-- deleted) their dedupe keys. inlet reconcile compares and stores nothing
-- older, or every event of a dropped period would be "missing" and stored
-- again under a new id, with new jobs (review helper-272); an older period
-- retention kept (open jobs) is left uncompared with it. Only the periods
-- that had ended when dropped count, as every one inlet retention drops has
-- (past max_age): a current or future period the owner dropped by hand
-- would otherwise hold every reconcile back until its end. Read as the
-- ingress role, which 074 grants these two columns. No row: nothing was
-- dropped. A row per dropped period: a few a month.
SELECT period_end FROM webhook_ingress.retention_log
WHERE period_end <= dropped_at
ORDER BY period_end DESC
LIMIT 1;

-- name: RetentionLockHolders :many
-- Who holds a lock on the tables a drop of the period starting at
-- period_start must lock (the three parents and the period's partitions),
-- other than this session: what inlet retention names when its locks were
-- not granted in time. A role without pg_read_all_stats sees NULL state and
-- transaction start for other roles' sessions; those stay empty then.
SELECT l.pid::int AS pid,
       coalesce(a.usename::text, '')::text AS role,
       coalesce(a.application_name, '')::text AS application_name,
       coalesce(a.state, '')::text AS state,
       coalesce(extract(epoch FROM clock_timestamp() - a.xact_start), -1)::float8 AS xact_seconds,
       string_agg(DISTINCT l.mode, ',' ORDER BY l.mode)::text AS modes
FROM pg_catalog.pg_locks l
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.granted
  AND l.pid <> pg_catalog.pg_backend_pid()
  AND l.locktype = 'relation'
  AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
  AND l.relation IN (
      SELECT 'webhook_ingress.events'::regclass UNION ALL
      SELECT 'webhook_ingress.jobs'::regclass UNION ALL
      SELECT 'webhook_ingress.job_attempts'::regclass UNION ALL
      SELECT c.oid FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'webhook_ingress'
      WHERE c.relname IN (webhook_ingress.partition_name('events', sqlc.arg(period_start)::timestamptz),
                          webhook_ingress.partition_name('jobs', sqlc.arg(period_start)::timestamptz),
                          webhook_ingress.partition_name('job_attempts', sqlc.arg(period_start)::timestamptz)))
GROUP BY l.pid, a.usename, a.application_name, a.state, a.xact_start
ORDER BY a.xact_start NULLS LAST, l.pid
LIMIT 5;
