-- Queries of the tamper-evidence sealer and verifier (package audit). The
-- sealer runs as webhook_sealer and never reads raw_body; the verifier runs as
-- webhook_auditor or webhook_operator. Neither takes a lock on events.

-- name: AuditTrySealLock :one
-- One sealer at a time: a transaction-scoped advisory lock (lock_key is the
-- audit package's key). false means another sealer holds it.
SELECT pg_try_advisory_xact_lock(sqlc.arg(lock_key));

-- name: AuditLastCheckpoint :one
-- The newest checkpoint: what the next seal extends.
SELECT seq, last_event_id, tree_size, root_hash, frontier, hash
FROM webhook_ingress.audit_checkpoints
ORDER BY seq DESC
LIMIT 1;

-- name: AuditEventsToSeal :many
-- The sealed columns of the next batch_size events from id first_id, in id
-- order, through audit_events_to_seal (078), which runs as its owner: the
-- headers as their digest (jsonb output is canonical), the body as
-- body_sha256, occurred_at since leaf format v2 (075_audit_occurred_at),
-- and whether payload is stored since v3 (payload_stored: the sealer may
-- read neither raw_body nor payload). The function is STABLE: it reads in
-- this statement's snapshot, taken after the pass's probe.
-- The casts give sqlc the columns' nullability (a function's are all
-- nullable to it): only occurred_at may be NULL.
SELECT id::bigint AS id, provider::text AS provider, external_event_id::text AS external_event_id,
       event_type::text AS event_type, received_at::timestamptz AS received_at, body_sha256, headers_sha256,
       scheme::text AS scheme, request_uri::text AS request_uri, signature_verified::boolean AS signature_verified,
       secret_index::smallint AS secret_index, occurred_at, payload_stored::boolean AS payload_stored
FROM webhook_ingress.audit_events_to_seal(sqlc.arg(first_id)::bigint, sqlc.arg(batch_size)::bigint);

-- name: AuditSealProbe :one
-- How the sealer judges a gap in the ids without a clock (package audit,
-- "Sealing without serializing ingress"): the highest visible event id, in
-- this statement's snapshot, and the transactions holding RowExclusiveLock on
-- events or one of its partitions, read from the lock table as the statement
-- runs, that is after the snapshot. An insert takes that lock before it draws
-- its id and keeps it until it ends (ids are drawn in order), so an id at or
-- below max_id that is not visible belongs to one of writers or to a
-- transaction that had ended when writers was read. pg_locks, pg_database and
-- pg_partition_tree are open to every role; the sealer's own AccessShareLock
-- is not listed.
SELECT coalesce((SELECT max(id) FROM webhook_ingress.events), 0)::bigint AS max_id,
       array(SELECT DISTINCT l.virtualtransaction
             FROM pg_catalog.pg_locks l
             WHERE l.locktype = 'relation'
               AND l.mode = 'RowExclusiveLock'
               AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
               AND l.relation IN (SELECT relid FROM pg_catalog.pg_partition_tree('webhook_ingress.events'::regclass))
               AND l.pid IS DISTINCT FROM pg_backend_pid()
             ORDER BY 1)::text[] AS writers;

-- name: AuditInsertCheckpoint :exec
-- min_received_at and max_received_at (032) are NULL when the checkpoint
-- seals no event, only skipped ids.
INSERT INTO webhook_ingress.audit_checkpoints
    (seq, first_event_id, last_event_id, tree_size, root_hash, prev_hash, skipped_ids, leaf_hashes, frontier, created_at, hash,
     min_received_at, max_received_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13);

-- name: AuditCheckpoints :many
-- Checkpoints after seq after_seq, batch_size at a time, in order.
SELECT seq, first_event_id, last_event_id, tree_size, root_hash, prev_hash, skipped_ids,
       leaf_hashes, frontier, created_at, hash, min_received_at, max_received_at
FROM webhook_ingress.audit_checkpoints
WHERE seq > sqlc.arg(after_seq)
ORDER BY seq
LIMIT sqlc.arg(batch_size)::bigint;

-- name: AuditEventsToVerify :many
-- What verify recomputes, batch_size events after (after_id,
-- after_received_at) in primary key order: the sealed columns (occurred_at
-- too, sealed in leaf format v2: 075_audit_occurred_at; whether payload is
-- stored, sealed in v3: 078_audit_payload_stored), and whether raw_body
-- still hashes to body_sha256 and payload, when kept, is still raw_body
-- parsed (051). Paged on the whole key, not the id
-- alone: a second row with an id already read (the key is (id,
-- received_at), so only the owner's INSERT … OVERRIDING SYSTEM VALUE makes
-- one) must be read too, to be reported.
SELECT id, provider, external_event_id, event_type, received_at, body_sha256,
       sha256(convert_to(headers::text, 'UTF8')) AS headers_sha256,
       scheme, request_uri, signature_verified, coalesce(secret_index, -1) AS secret_index,
       occurred_at,
       (payload IS NOT NULL)::boolean AS payload_stored,
       coalesce(sha256(raw_body) = body_sha256, false)::boolean AS body_intact,
       (payload IS NULL OR coalesce(payload = webhook_ingress.jsonb_of(raw_body), false))::boolean AS payload_intact
FROM webhook_ingress.events
WHERE (id, received_at) > (sqlc.arg(after_id)::bigint, sqlc.arg(after_received_at)::timestamptz)
ORDER BY id, received_at
LIMIT sqlc.arg(batch_size)::bigint;

-- name: AuditPrunedIDs :many
-- Ids of events inlet retention says it dropped with their partitions, as
-- runs [lo, hi) in lo order, each with the retention_log row that names it
-- (log_id, its period) and what contradicts the row in the table: a period
-- really dropped is no longer a partition (period_is_partition: it overlaps
-- a period partition still attached, which also stops a claim of a sliver
-- of a live period around one deleted event) and holds no event
-- (period_has_events, the default partition included). Verify checks each
-- run against its checkpoints' received_at range too (package audit).
-- partitions() reads the catalog once; one probe of idx_events_received_at
-- per row with ids, its bounds pruning the partitions; rows of empty
-- periods (no ids) are not probed. Verify runs it as a cursor in its
-- snapshot (DECLARE … CURSOR FOR this text, then FETCH a page at a time:
-- audit/verify.go) and holds one page of runs, not the whole pruned
-- history: the sort is done once, by the server (on disk past work_mem).
WITH parts AS MATERIALIZED (
    SELECT p.period_start, p.period_end FROM webhook_ingress.partitions() p
), claims AS MATERIALIZED (
    SELECT l.id, l.period_start, l.period_end, l.event_ids,
           EXISTS (SELECT FROM parts p
                   WHERE p.period_start < l.period_end AND l.period_start < p.period_end) AS period_is_partition,
           EXISTS (SELECT FROM webhook_ingress.events e
                   WHERE e.received_at >= l.period_start AND e.received_at < l.period_end) AS period_has_events
    FROM webhook_ingress.retention_log l
    WHERE cardinality(l.event_ids) > 0
)
SELECT lower(r)::bigint AS lo, upper(r)::bigint AS hi, c.id AS log_id, c.period_start, c.period_end,
       c.period_is_partition::boolean AS period_is_partition, c.period_has_events::boolean AS period_has_events
FROM claims c, unnest(c.event_ids) r
ORDER BY 1, 3;

-- name: AuditRecordVerification :exec
-- One verification's outcome (016_audit_verifications), as webhook_operator.
INSERT INTO webhook_ingress.audit_verifications
    (ok, checkpoints, sealed_through, events, unsealed, pruned, problems_found, problems_truncated, chain_broken, problems, head)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

-- name: AuditLastVerification :one
-- The newest verification: what the dashboard and the metrics show.
SELECT id, verified_at, verified_by, ok, checkpoints, sealed_through, events, unsealed, pruned,
       problems_found, problems_truncated, chain_broken, problems, head
FROM webhook_ingress.audit_verifications
ORDER BY id DESC
LIMIT 1;

-- name: AuditRecentVerifications :many
-- The newest max_rows verifications, newest first, without their problem
-- lists (the audit page's history).
SELECT id, verified_at, verified_by, ok, checkpoints, sealed_through, events, problems_found, chain_broken
FROM webhook_ingress.audit_verifications
ORDER BY id DESC
LIMIT sqlc.arg(max_rows)::bigint;

-- name: AuditSealedThrough :one
-- The newest checkpoint's seq and last event id; 0, 0 when none.
SELECT coalesce(max(seq), 0)::bigint AS seq, coalesce(max(last_event_id), 0)::bigint AS last_event_id
FROM webhook_ingress.audit_checkpoints;
