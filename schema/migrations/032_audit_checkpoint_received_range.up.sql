-- 032_audit_checkpoint_received_range: a prune in retention_log must agree
-- with what was sealed.
--
-- inlet audit verify accepted every sealed id that a retention_log row names
-- as pruned, and nothing sealed says when a pruned event was received. A
-- database owner who deleted a sealed event from a live partition (append-
-- only trigger disabled) and appended a retention_log row naming its id,
-- with any period, made verify pass, even with --head (audit
-- TestVerifyFindsAForgedPrune).
--
-- Now each checkpoint records the least and greatest received_at of the
-- events it seals, inside its hash (checkpoint format v2, package audit),
-- so nulling or moving them breaks the chain. Verify accepts a missing id
-- that a retention_log row claims only when the row's period
-- [period_start, period_end) overlaps its checkpoint's [min_received_at,
-- max_received_at], overlaps no period partition still attached and holds
-- no event (a period really dropped is none of these). Verify reads the
-- partitions' bounds through partitions(), which auditors and operators
-- may now execute (it reads the catalog only). What stays open is in the
-- package doc of audit ("What it does not prove").
--
-- Both columns are NULL for checkpoints sealed before this migration (their
-- hash is the v1 form; a prune of their ids gets the partition and event
-- checks, not the range check) and for a checkpoint that covers only
-- skipped ids. webhook_sealer's INSERT and SELECT on audit_checkpoints are
-- table-wide (003_audit) and cover the new columns.
--
-- Upgrading: migrate first. A sealer of this version names the columns; a
-- sealer of the previous version still works and writes v1 checkpoints,
-- whose ids get no range check. A verify of the previous version
-- rejects every v2 checkpoint as altered: upgrade verifiers with sealers.
--
-- Cost: two nullable columns without default (catalog only, no rewrite) and
-- a CHECK that scans audit_checkpoints once (one row per checkpoint, the
-- hashes TOASTed and not read), under an ACCESS EXCLUSIVE lock that holds
-- sealers and verifiers back for as long.

ALTER TABLE webhook_ingress.audit_checkpoints
    ADD COLUMN min_received_at timestamptz,
    ADD COLUMN max_received_at timestamptz,
    ADD CONSTRAINT audit_checkpoints_received_range
        CHECK ((min_received_at IS NULL) = (max_received_at IS NULL) AND min_received_at <= max_received_at);

COMMENT ON COLUMN webhook_ingress.audit_checkpoints.min_received_at IS
    'Least received_at of the events this checkpoint seals, in its hash (v2). NULL for a checkpoint sealed before 032 or covering only skipped ids. A retention_log period that claims one of its ids must overlap [min_received_at, max_received_at].';
COMMENT ON COLUMN webhook_ingress.audit_checkpoints.max_received_at IS
    'Greatest received_at of the events this checkpoint seals; NULL exactly when min_received_at is.';
COMMENT ON COLUMN webhook_ingress.audit_checkpoints.hash IS
    'SHA-256 over seq, the range, tree_size, root_hash, prev_hash, created_at, skipped_ids and, when set (v2), min_received_at and max_received_at (package audit, checkpointHash).';

GRANT EXECUTE ON FUNCTION webhook_ingress.partitions() TO webhook_auditor, webhook_operator;
