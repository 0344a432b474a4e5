-- 001_initial: the immutable event log, per-handler jobs, subscriptions, attempt
-- history, the application roles and their column-level grants.
--
-- Runs inside one transaction under the migrator's advisory lock. Roles are
-- cluster-wide objects, so they are created only when missing.

-- Created only when missing (the migrator has made it already): CREATE SCHEMA
-- IF NOT EXISTS would need CREATE on the database even when it exists.
DO $$
BEGIN
    IF to_regnamespace('webhook_ingress') IS NULL THEN
        CREATE SCHEMA webhook_ingress;
    END IF;
END
$$;

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['webhook_ingress_writer', 'webhook_streamer', 'webhook_worker', 'webhook_auditor'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$$;

COMMENT ON SCHEMA webhook_ingress IS
    'Inlet: verified provider webhooks (events), one job per subscribed handler (jobs). Table and column names are a public contract for auditors.';

-- events ---------------------------------------------------------------------

CREATE TABLE webhook_ingress.events (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider           text        NOT NULL,
    scheme             text        NOT NULL,
    external_event_id  text        NOT NULL,
    event_type         text        NOT NULL DEFAULT '',
    received_at        timestamptz NOT NULL DEFAULT now(),
    headers            jsonb       NOT NULL DEFAULT '{}',
    request_uri        text        NOT NULL DEFAULT '',
    raw_body           bytea       NOT NULL,
    body_sha256        bytea       GENERATED ALWAYS AS (sha256(raw_body)) STORED,
    signature_verified boolean     NOT NULL,
    secret_index       smallint,
    CONSTRAINT events_provider_external_event_id_key UNIQUE (provider, external_event_id),
    CONSTRAINT events_provider_not_empty CHECK (provider <> ''),
    CONSTRAINT events_external_event_id_not_empty CHECK (external_event_id <> '')
);

COMMENT ON TABLE webhook_ingress.events IS
    'Append-only log of every accepted webhook. No application role may UPDATE, DELETE or TRUNCATE it; triggers enforce this even for the owner.';
COMMENT ON COLUMN webhook_ingress.events.provider IS
    'The configured source name the webhook arrived on (POST /webhooks/{source}), e.g. stripe, github, acme.';
COMMENT ON COLUMN webhook_ingress.events.scheme IS
    'The signature scheme the source is configured with (stripe, github, standard-webhooks, ...).';
COMMENT ON COLUMN webhook_ingress.events.external_event_id IS
    'The provider''s own event id (Stripe id, X-GitHub-Delivery, webhook-id); with provider, the dedupe key.';
COMMENT ON COLUMN webhook_ingress.events.headers IS
    'Request headers as received: {"Canonical-Name": ["value", ...]}. Kept so signatures can be re-verified. A secret sent as a header (GitLab''s X-Gitlab-Token) is stored as its sha256 only.';
COMMENT ON COLUMN webhook_ingress.events.request_uri IS
    'Path and query string as received; schemes that sign the URL (Twilio) need it to re-verify.';
COMMENT ON COLUMN webhook_ingress.events.raw_body IS
    'The exact bytes the provider signed. Never rewritten; the only input to re-verification.';
COMMENT ON COLUMN webhook_ingress.events.body_sha256 IS
    'SHA-256 of raw_body, computed by Postgres; lets auditors compare bodies without reading them.';
COMMENT ON COLUMN webhook_ingress.events.signature_verified IS
    'True when ingress verified the signature before storing; false for events backfilled from a provider''s API (nothing was signed).';
COMMENT ON COLUMN webhook_ingress.events.secret_index IS
    'Index of the configured secret that matched (rotation visibility); never the secret.';

CREATE INDEX idx_events_received_at ON webhook_ingress.events (received_at);
CREATE INDEX idx_events_provider_type ON webhook_ingress.events (provider, event_type, received_at);

-- Refuses any change to the table it guards (append-only tables: events, and
-- later audit_checkpoints).
CREATE FUNCTION webhook_ingress.forbid_change() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    RAISE EXCEPTION '%.% is append-only: % is not allowed', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER events_append_only_row
    BEFORE UPDATE OR DELETE ON webhook_ingress.events
    FOR EACH ROW EXECUTE FUNCTION webhook_ingress.forbid_change();
CREATE TRIGGER events_append_only_truncate
    BEFORE TRUNCATE ON webhook_ingress.events
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_ingress.forbid_change();
-- ENABLE ALWAYS: otherwise session_replication_role = replica would skip them.
ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row;
ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_truncate;

-- subscriptions ----------------------------------------------------------------

CREATE TABLE webhook_ingress.subscriptions (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    handler            text        NOT NULL,
    provider_pattern   text        NOT NULL DEFAULT '*',
    event_type_pattern text        NOT NULL DEFAULT '*',
    max_attempts       integer     NOT NULL DEFAULT 25,
    enabled            boolean     NOT NULL DEFAULT true,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    -- Glob patterns ('*' matches any run of characters) turned into LIKE patterns once.
    provider_like      text        GENERATED ALWAYS AS (
        replace(replace(replace(replace(provider_pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%')) STORED,
    event_type_like    text        GENERATED ALWAYS AS (
        replace(replace(replace(replace(event_type_pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%')) STORED,
    CONSTRAINT subscriptions_handler_patterns_key UNIQUE (handler, provider_pattern, event_type_pattern),
    CONSTRAINT subscriptions_handler_not_empty CHECK (handler <> ''),
    CONSTRAINT subscriptions_max_attempts_positive CHECK (max_attempts > 0)
);

COMMENT ON TABLE webhook_ingress.subscriptions IS
    'Which handler receives which events. Consumers register their rows at start; a new event gets one job per matching enabled handler.';
COMMENT ON COLUMN webhook_ingress.subscriptions.provider_pattern IS
    'Glob over events.provider: * matches any characters (stripe, stri*, *).';
COMMENT ON COLUMN webhook_ingress.subscriptions.event_type_pattern IS
    'Glob over events.event_type: invoice.* matches invoice.paid; * matches everything, including an empty type.';

-- jobs -----------------------------------------------------------------------

CREATE TABLE webhook_ingress.jobs (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id         bigint      NOT NULL REFERENCES webhook_ingress.events (id),
    handler          text        NOT NULL,
    provider         text        NOT NULL,
    event_type       text        NOT NULL DEFAULT '',
    status           text        NOT NULL DEFAULT 'pending',
    attempt_count    integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 25,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_holder_id  text,
    lease_expires_at timestamptz,
    attempted_at     timestamptz,
    worker_id        text,
    last_error       text,
    last_error_class text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    CONSTRAINT jobs_event_handler_key UNIQUE (event_id, handler),
    CONSTRAINT jobs_status_check CHECK (status IN ('pending', 'leased', 'completed', 'failed', 'dead_letter')),
    CONSTRAINT jobs_lease_consistent CHECK (status <> 'leased' OR (lease_holder_id IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CONSTRAINT jobs_max_attempts_positive CHECK (max_attempts > 0)
) WITH (fillfactor = 80);

COMMENT ON TABLE webhook_ingress.jobs IS
    'One row per (event, handler): the unit of lease, retry, backoff and dead-letter, so one handler failing never retries another.';
COMMENT ON COLUMN webhook_ingress.jobs.status IS
    'pending: waiting to be claimed. leased: claimed by a streamer and handed to a consumer until lease_expires_at. completed: handler succeeded. failed: last attempt failed, retried at next_attempt_at. dead_letter: attempts spent or permanently failed; only a replay revives it.';
COMMENT ON COLUMN webhook_ingress.jobs.attempted_at IS
    'When the current (or last) attempt''s lease was taken: the start of that attempt in job_attempts.';
COMMENT ON COLUMN webhook_ingress.jobs.worker_id IS
    'The consumer that took the current attempt; NULL until one does. Only one consumer can take an attempt, even if the bus delivers its reference twice.';
COMMENT ON COLUMN webhook_ingress.jobs.attempt_count IS
    'Attempts started so far; incremented when a lease is taken.';
COMMENT ON COLUMN webhook_ingress.jobs.last_error IS
    'Error text of the last failed attempt. It stays in Postgres; outside it only last_error_class travels.';
COMMENT ON COLUMN webhook_ingress.jobs.provider IS
    'Copy of events.provider so the streamer publishes without reading events.';

-- Partial: finished jobs (the vast majority over time) are not in it, so claiming
-- stays cheap however many completed rows the table holds.
CREATE INDEX idx_jobs_claimable ON webhook_ingress.jobs (next_attempt_at, id)
    WHERE status IN ('pending', 'failed');
COMMENT ON INDEX webhook_ingress.idx_jobs_claimable IS
    'Jobs a streamer may claim (pending, or failed awaiting retry), by due time. Partial so finished jobs cost nothing.';
CREATE INDEX idx_jobs_leased ON webhook_ingress.jobs (lease_expires_at)
    WHERE status = 'leased';
CREATE INDEX idx_jobs_dead_letter ON webhook_ingress.jobs (handler, updated_at)
    WHERE status = 'dead_letter';
CREATE INDEX idx_jobs_event_id ON webhook_ingress.jobs (event_id);

ALTER TABLE webhook_ingress.jobs SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);

-- job attempt history ------------------------------------------------------------

CREATE TABLE webhook_ingress.job_attempts (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      bigint      NOT NULL REFERENCES webhook_ingress.jobs (id),
    attempt     integer     NOT NULL,
    worker_id   text,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT now(),
    outcome     text        NOT NULL,
    error_class text,
    error       text,
    duration_ms double precision GENERATED ALWAYS AS (extract(epoch FROM finished_at - started_at) * 1000) STORED,
    CONSTRAINT job_attempts_outcome_check CHECK (outcome IN ('completed', 'failed', 'dead_letter', 'lease_expired'))
);
CREATE INDEX idx_job_attempts_job_id ON webhook_ingress.job_attempts (job_id, attempt);

COMMENT ON TABLE webhook_ingress.job_attempts IS
    'One row per finished attempt of a job: when it started and ended, how it ended, and the error class.';
COMMENT ON COLUMN webhook_ingress.job_attempts.outcome IS
    'completed, failed (will be retried), dead_letter (last attempt failed or the error was permanent), lease_expired (the consumer never reported; the reaper closed the attempt).';

-- fan-out ------------------------------------------------------------------------

-- One job per (new event, matching enabled handler), in the inserting statement's
-- transaction, whatever wrote the events. SECURITY DEFINER so the ingress role
-- needs no privilege on jobs or subscriptions.
CREATE FUNCTION webhook_ingress.events_fan_out() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    INSERT INTO webhook_ingress.jobs (event_id, handler, provider, event_type, max_attempts)
    SELECT e.id, s.handler, e.provider, e.event_type, max(s.max_attempts)
    FROM new_events e
    JOIN webhook_ingress.subscriptions s
      ON s.enabled
     AND e.provider LIKE s.provider_like
     AND e.event_type LIKE s.event_type_like
    GROUP BY e.id, s.handler, e.provider, e.event_type
    ON CONFLICT (event_id, handler) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER events_fan_out
    AFTER INSERT ON webhook_ingress.events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_ingress.events_fan_out();
ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_fan_out;

-- privileges ---------------------------------------------------------------------

REVOKE ALL ON ALL TABLES IN SCHEMA webhook_ingress FROM PUBLIC;
REVOKE ALL ON FUNCTION webhook_ingress.events_fan_out() FROM PUBLIC;
REVOKE ALL ON FUNCTION webhook_ingress.forbid_change() FROM PUBLIC;
GRANT USAGE ON SCHEMA webhook_ingress
    TO webhook_ingress_writer, webhook_streamer, webhook_worker, webhook_auditor;

-- Ingress: insert events; read only the dedupe key that ON CONFLICT and RETURNING need.
GRANT INSERT (provider, scheme, external_event_id, event_type, received_at, headers, request_uri, raw_body, signature_verified, secret_index)
    ON webhook_ingress.events TO webhook_ingress_writer;
GRANT SELECT (provider, external_event_id) ON webhook_ingress.events TO webhook_ingress_writer;

-- Streamer: event metadata only (never raw_body or headers); jobs' lease columns.
GRANT SELECT (id, provider, scheme, external_event_id, event_type, received_at, signature_verified)
    ON webhook_ingress.events TO webhook_streamer;
GRANT SELECT ON webhook_ingress.jobs TO webhook_streamer;
GRANT UPDATE (status, attempt_count, next_attempt_at, lease_holder_id, lease_expires_at, attempted_at, worker_id, last_error, last_error_class, updated_at)
    ON webhook_ingress.jobs TO webhook_streamer;
GRANT SELECT, INSERT (job_id, attempt, worker_id, started_at, finished_at, outcome, error_class, error)
    ON webhook_ingress.job_attempts TO webhook_streamer;

-- Worker (consumers): read events whole; update only a job's state columns; append attempts;
-- register their own subscriptions.
GRANT SELECT ON webhook_ingress.events TO webhook_worker;
GRANT SELECT ON webhook_ingress.jobs TO webhook_worker;
GRANT UPDATE (status, next_attempt_at, lease_expires_at, lease_holder_id, worker_id, last_error, last_error_class, updated_at, completed_at)
    ON webhook_ingress.jobs TO webhook_worker;
GRANT SELECT, INSERT (job_id, attempt, worker_id, started_at, finished_at, outcome, error_class, error)
    ON webhook_ingress.job_attempts TO webhook_worker;
GRANT SELECT, INSERT (handler, provider_pattern, event_type_pattern, max_attempts, enabled, updated_at),
    UPDATE (max_attempts, enabled, updated_at)
    ON webhook_ingress.subscriptions TO webhook_worker;

-- Every role may read which migrations are applied (readiness checks).
GRANT SELECT ON webhook_ingress.schema_migrations
    TO webhook_ingress_writer, webhook_streamer, webhook_worker, webhook_auditor;

-- Auditor: read everything, write nothing.
GRANT SELECT ON ALL TABLES IN SCHEMA webhook_ingress TO webhook_auditor;

-- No role may change the log, whatever was granted elsewhere.
REVOKE UPDATE, DELETE, TRUNCATE ON webhook_ingress.events
    FROM PUBLIC, webhook_ingress_writer, webhook_streamer, webhook_worker, webhook_auditor;
