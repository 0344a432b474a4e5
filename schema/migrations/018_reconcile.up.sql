-- 018_reconcile: inlet reconcile compares a provider's own list of events
-- (Stripe's events API, a GitHub webhook's deliveries) for a window with the
-- log and stores what never arrived, through ingress's write path.
--
-- Which keys are already stored is asked of event_keys (its primary key is
-- the dedupe key; events has no index on it, being partitioned by time): the
-- ingress role, which reconcile writes as, may now read event_keys' two key
-- columns, the same two it could already read on events.
--
-- A reconciled event is an ordinary events row: signature_verified = false,
-- headers Inlet-Backfill (the API it came from) and Inlet-Reconcile (the run,
-- a reconcile_runs id) — see docs/database.md. reconcile_runs keeps what each
-- run found, for the dashboard and for an auditor.
--
-- Upgrade safety: one new small table and a column-level grant; events is
-- untouched.

GRANT SELECT (provider, external_event_id) ON webhook_ingress.event_keys TO webhook_ingress_writer;

CREATE TABLE webhook_ingress.reconcile_runs (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source          text        NOT NULL,
    api             text        NOT NULL,
    window_since    timestamptz NOT NULL,
    window_until    timestamptz NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    dry_run         boolean     NOT NULL,
    listed          bigint      NOT NULL DEFAULT 0,
    already_stored  bigint      NOT NULL DEFAULT 0,
    missing         bigint      NOT NULL DEFAULT 0,
    stored          bigint      NOT NULL DEFAULT 0,
    duplicates      bigint      NOT NULL DEFAULT 0,
    by_type         jsonb       NOT NULL DEFAULT '[]',
    error           text
);
COMMENT ON TABLE webhook_ingress.reconcile_runs IS
    'One row per inlet reconcile run (the command, or the streamer''s schedule): the window compared and what was found. The events a run stored carry its id in their Inlet-Reconcile header.';
COMMENT ON COLUMN webhook_ingress.reconcile_runs.finished_at IS
    'When the run ended, with error set if it stopped early; NULL while it runs, or when it was killed (its counts are then those of its start: none).';
COMMENT ON COLUMN webhook_ingress.reconcile_runs.api IS
    'The provider API listed: stripe-events-api or github-hook-deliveries (the Inlet-Backfill header of the events it stored).';
COMMENT ON COLUMN webhook_ingress.reconcile_runs.listed IS
    'Distinct events the provider listed in the window.';
COMMENT ON COLUMN webhook_ingress.reconcile_runs.missing IS
    'Of those, events not in the log when the run looked (stored, unless dry_run or the run failed; stored counts them).';
COMMENT ON COLUMN webhook_ingress.reconcile_runs.stored IS
    'Missing events this run stored, marked Inlet-Reconcile: <id>. A missing event that arrived by webhook meanwhile counts in already_stored.';
COMMENT ON COLUMN webhook_ingress.reconcile_runs.duplicates IS
    'Extra listings of an event the provider listed more than once (GitHub redeliveries): not counted in listed.';
COMMENT ON COLUMN webhook_ingress.reconcile_runs.by_type IS
    'The same counts per event type: [{"type", "listed", "already_stored", "missing", "stored", "duplicates"}].';
COMMENT ON COLUMN webhook_ingress.reconcile_runs.error IS
    'Why the run stopped early; NULL for a finished run. The counts are those reached.';
CREATE INDEX idx_reconcile_runs_source ON webhook_ingress.reconcile_runs (source, id);

REVOKE ALL ON webhook_ingress.reconcile_runs FROM PUBLIC;
-- A run is inserted when it starts (its id marks the events it stores) and
-- updated once when it ends.
GRANT SELECT, INSERT (source, api, window_since, window_until, dry_run) ON webhook_ingress.reconcile_runs TO webhook_ingress_writer;
GRANT UPDATE (finished_at, listed, already_stored, missing, stored, duplicates, by_type, error)
    ON webhook_ingress.reconcile_runs TO webhook_ingress_writer;
GRANT SELECT ON webhook_ingress.reconcile_runs TO webhook_operator, webhook_auditor;
