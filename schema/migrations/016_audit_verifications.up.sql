-- 016_audit_verifications: the outcome of each inlet audit verify, so that
-- what the last verification found is visible where operators look: the
-- dashboard (an altered event shows as altered, not verified; the audit page)
-- and the inlet_audit_* metrics of inlet streamer. Verification itself
-- stays a recomputation from events and audit_checkpoints; a row here is
-- only a note of what one found, written by the operator who ran it.

CREATE TABLE webhook_ingress.audit_verifications (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    verified_at        timestamptz NOT NULL DEFAULT now(),
    verified_by        text        NOT NULL DEFAULT current_user,
    ok                 boolean     NOT NULL,
    checkpoints        bigint      NOT NULL,
    sealed_through     bigint      NOT NULL,
    events             bigint      NOT NULL,
    unsealed           bigint      NOT NULL,
    pruned             bigint      NOT NULL,
    problems_found     bigint      NOT NULL,
    problems_truncated boolean     NOT NULL,
    chain_broken       boolean     NOT NULL,
    problems           jsonb       NOT NULL DEFAULT '[]',
    head               text        NOT NULL DEFAULT '',
    CONSTRAINT audit_verifications_ok CHECK (ok = (problems_found = 0))
);

COMMENT ON TABLE webhook_ingress.audit_verifications IS
    'One row per inlet audit verify run by webhook_operator: what it checked and found. The newest row is what the dashboard and the inlet_audit_* metrics show. A note, not evidence: verify recomputes from events and audit_checkpoints.';
COMMENT ON COLUMN webhook_ingress.audit_verifications.verified_by IS
    'The role the verification ran as (current_user).';
COMMENT ON COLUMN webhook_ingress.audit_verifications.checkpoints IS
    'Checkpoints checked and found sound; the pass stops at a broken one (chain_broken).';
COMMENT ON COLUMN webhook_ingress.audit_verifications.events IS
    'Events checked: those the sound checkpoints cover, and (unless the chain broke) those not yet sealed (unsealed).';
COMMENT ON COLUMN webhook_ingress.audit_verifications.problems_found IS
    'Every problem found; problems lists at most inlet audit verify --max-problems of them (problems_truncated when some were cut).';
COMMENT ON COLUMN webhook_ingress.audit_verifications.problems IS
    'The problems listed, in id order: [{kind, checkpoint, event_id, reason}], kind altered_event, missing_event, out_of_order_event or broken_chain.';
COMMENT ON COLUMN webhook_ingress.audit_verifications.head IS
    'The newest sound checkpoint''s hash (hex), '''' when none.';

-- privileges ---------------------------------------------------------------------

REVOKE ALL ON webhook_ingress.audit_verifications FROM PUBLIC;
-- The operator verifies and records; the streamer reads the newest row for
-- its metrics; auditors read everything and write nothing (their verify is
-- not recorded).
GRANT SELECT, INSERT ON webhook_ingress.audit_verifications TO webhook_operator;
GRANT SELECT ON webhook_ingress.audit_verifications TO webhook_streamer, webhook_auditor;
