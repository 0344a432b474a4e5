-- 003_audit: tamper evidence. The sealer (package audit, inlet audit seal)
-- appends checkpoints: each covers the next contiguous range of event ids,
-- extends an RFC 6962 Merkle tree whose leaves are the events (and the ids a
-- rolled-back insert skipped), and names the previous checkpoint's hash, so a
-- changed, removed or late-inserted event, or a changed or removed
-- checkpoint, shows in inlet audit verify.
--
-- Runs inside one transaction under the migrator's advisory lock; the role is
-- cluster-wide, so it is created only when missing.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'webhook_sealer') THEN
        CREATE ROLE webhook_sealer NOLOGIN;
    END IF;
END
$$;

CREATE TABLE webhook_ingress.audit_checkpoints (
    seq            bigint      PRIMARY KEY,
    first_event_id bigint      NOT NULL,
    last_event_id  bigint      NOT NULL,
    tree_size      bigint      NOT NULL,
    root_hash      bytea       NOT NULL,
    prev_hash      bytea       NOT NULL,
    skipped_ids    bigint[]    NOT NULL DEFAULT '{}',
    leaf_hashes    bytea       NOT NULL,
    frontier       bytea       NOT NULL,
    created_at     timestamptz NOT NULL,
    hash           bytea       NOT NULL,
    CONSTRAINT audit_checkpoints_hash_key UNIQUE (hash),
    CONSTRAINT audit_checkpoints_seq_positive CHECK (seq > 0),
    CONSTRAINT audit_checkpoints_range CHECK (first_event_id <= last_event_id),
    CONSTRAINT audit_checkpoints_hash_sizes CHECK (octet_length(root_hash) = 32 AND octet_length(prev_hash) = 32 AND octet_length(hash) = 32),
    CONSTRAINT audit_checkpoints_leaf_count CHECK (octet_length(leaf_hashes) = 32 * (last_event_id - first_event_id + 1))
);

COMMENT ON TABLE webhook_ingress.audit_checkpoints IS
    'Append-only seals over webhook_ingress.events in id order (see package audit). Checkpoint seq covers event ids first_event_id..last_event_id, contiguous with seq-1. inlet audit verify recomputes every field from events.';
COMMENT ON COLUMN webhook_ingress.audit_checkpoints.tree_size IS
    'Leaves in the Merkle tree after this checkpoint: one per event id from 1 to last_event_id (an event, or a skipped id).';
COMMENT ON COLUMN webhook_ingress.audit_checkpoints.root_hash IS
    'RFC 6962 Merkle tree hash (SHA-256) of the first tree_size leaves (golang.org/x/mod/sumdb/tlog).';
COMMENT ON COLUMN webhook_ingress.audit_checkpoints.prev_hash IS
    'hash of checkpoint seq-1; 32 zero bytes for seq 1.';
COMMENT ON COLUMN webhook_ingress.audit_checkpoints.skipped_ids IS
    'Ids in the range with no event when sealed: identity values of inserts that rolled back (or lost to a crash). An event with one of these ids appearing later was inserted out of order.';
COMMENT ON COLUMN webhook_ingress.audit_checkpoints.leaf_hashes IS
    'The range''s leaf hashes, 32 bytes each in id order: lets verify name the event that changed. Authenticated by root_hash.';
COMMENT ON COLUMN webhook_ingress.audit_checkpoints.frontier IS
    'The tree''s right frontier (roots of its perfect subtrees, largest first, 32 bytes each): what the next seal extends. Derived data; checked against root_hash.';
COMMENT ON COLUMN webhook_ingress.audit_checkpoints.hash IS
    'SHA-256 over seq, the range, tree_size, root_hash, prev_hash, created_at and skipped_ids (package audit, checkpointHash).';

CREATE TRIGGER audit_checkpoints_append_only_row
    BEFORE UPDATE OR DELETE ON webhook_ingress.audit_checkpoints
    FOR EACH ROW EXECUTE FUNCTION webhook_ingress.forbid_change();
CREATE TRIGGER audit_checkpoints_append_only_truncate
    BEFORE TRUNCATE ON webhook_ingress.audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_ingress.forbid_change();
-- ENABLE ALWAYS: otherwise session_replication_role = replica would skip them.
ALTER TABLE webhook_ingress.audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_append_only_row;
ALTER TABLE webhook_ingress.audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_append_only_truncate;

-- privileges ---------------------------------------------------------------------

REVOKE ALL ON webhook_ingress.audit_checkpoints FROM PUBLIC;
GRANT USAGE ON SCHEMA webhook_ingress TO webhook_sealer;

-- Sealer: the sealed columns of events (body_sha256 stands for the body, which
-- it never reads); read and append checkpoints.
GRANT SELECT (id, provider, external_event_id, event_type, received_at, headers, body_sha256,
               scheme, request_uri, signature_verified, secret_index)
    ON webhook_ingress.events TO webhook_sealer;
GRANT SELECT, INSERT ON webhook_ingress.audit_checkpoints TO webhook_sealer;
GRANT SELECT ON webhook_ingress.schema_migrations TO webhook_sealer;

-- Auditors and operators verify.
GRANT SELECT ON webhook_ingress.audit_checkpoints TO webhook_auditor, webhook_operator;

-- No role may change the seals or the log, whatever was granted elsewhere.
REVOKE UPDATE, DELETE, TRUNCATE ON webhook_ingress.audit_checkpoints
    FROM PUBLIC, webhook_ingress_writer, webhook_streamer, webhook_worker, webhook_auditor, webhook_operator, webhook_sealer;
REVOKE UPDATE, DELETE, TRUNCATE ON webhook_ingress.events FROM webhook_sealer;
