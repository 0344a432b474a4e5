-- 001_initial: the control plane's own schema. One row per reported attempt
-- per tenant; nothing else is ever received.

CREATE TABLE control_plane.attempts (
    tenant      text             NOT NULL,
    attempt_id  bigint           NOT NULL,
    job         text             NOT NULL,
    outcome     text             NOT NULL,
    attempt     integer          NOT NULL,
    duration_ms double precision NOT NULL,
    error_class text,
    started_at  timestamptz      NOT NULL,
    finished_at timestamptz      NOT NULL,
    provider    text,
    event_type  text,
    received_at timestamptz      NOT NULL DEFAULT now(),
    CONSTRAINT attempts_pkey PRIMARY KEY (tenant, attempt_id),
    CONSTRAINT attempts_outcome_check
        CHECK (outcome IN ('completed', 'failed', 'dead_letter', 'lease_expired', 'replayed'))
);
CREATE INDEX idx_attempts_tenant_job ON control_plane.attempts (tenant, job, attempt_id);

COMMENT ON TABLE control_plane.attempts IS
    'One row per attempt a data plane (tenant) reported; the primary key makes a resent batch harmless.';
COMMENT ON COLUMN control_plane.attempts.attempt_id IS
    'The data plane''s job_attempts.id: its reporter''s cursor.';
COMMENT ON COLUMN control_plane.attempts.job IS
    'Opaque job id (HMAC of the data plane''s jobs.id under its own key), or jobs.id when the tenant sends database ids.';
COMMENT ON COLUMN control_plane.attempts.provider IS
    'Source name; NULL unless the tenant opted in (reporter.include_provider). event_type likewise.';
