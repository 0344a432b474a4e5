-- 005_partitions: events, jobs and job_attempts partitioned by the time the
-- event arrived, so retention (package retention, inlet retention) drops whole
-- partitions instead of deleting rows from an append-only log.
--
-- events is PARTITION BY RANGE (received_at); a job and its attempts carry their
-- event's received_at (event_received_at) and live in the partition of the same
-- period, so one period of events, jobs and history leaves together. Partition
-- keys must be part of every unique constraint, so the dedupe key (provider,
-- external_event_id) moves to its own unpartitioned table, event_keys, written
-- by a BEFORE INSERT trigger: a duplicate inserts nothing, exactly as ON
-- CONFLICT DO NOTHING did, including between concurrent inserts.
--
-- A DEFAULT partition takes any row no period partition covers, so an insert
-- never fails for want of a partition; retention never drops it.
--
-- Existing rows are copied aside, the tables re-created partitioned and the rows
-- copied back with their ids; the identity sequences continue where they were.
-- Runs inside one transaction under the migrator's advisory lock.

-- Copy aside ---------------------------------------------------------------------

CREATE TEMP TABLE old_events ON COMMIT DROP AS
    SELECT id, provider, scheme, external_event_id, event_type, received_at, headers, request_uri,
           raw_body, signature_verified, secret_index
    FROM webhook_ingress.events;
CREATE TEMP TABLE old_jobs ON COMMIT DROP AS
    SELECT j.*, e.received_at AS event_received_at
    FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id;
CREATE TEMP TABLE old_attempts ON COMMIT DROP AS
    SELECT a.id, a.job_id, a.attempt, a.worker_id, a.started_at, a.finished_at, a.outcome, a.error_class, a.error,
           j.event_received_at
    FROM webhook_ingress.job_attempts a JOIN old_jobs j ON j.id = a.job_id;
CREATE TEMP TABLE old_sequences ON COMMIT DROP AS
    SELECT 'events' AS tbl, last_value, is_called FROM webhook_ingress.events_id_seq
    UNION ALL SELECT 'jobs', last_value, is_called FROM webhook_ingress.jobs_id_seq
    UNION ALL SELECT 'job_attempts', last_value, is_called FROM webhook_ingress.job_attempts_id_seq;

DROP TABLE webhook_ingress.job_attempts;
DROP TABLE webhook_ingress.jobs;
DROP TABLE webhook_ingress.events;

-- events -----------------------------------------------------------------------

CREATE TABLE webhook_ingress.events (
    id                 bigint      GENERATED ALWAYS AS IDENTITY,
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
    CONSTRAINT events_pkey PRIMARY KEY (id, received_at),
    CONSTRAINT events_provider_not_empty CHECK (provider <> ''),
    CONSTRAINT events_external_event_id_not_empty CHECK (external_event_id <> '')
) PARTITION BY RANGE (received_at);
CREATE TABLE webhook_ingress.events_default PARTITION OF webhook_ingress.events DEFAULT;

COMMENT ON TABLE webhook_ingress.events IS
    'Append-only log of every accepted webhook, partitioned by received_at. No application role may UPDATE, DELETE or TRUNCATE it; triggers enforce this even for the owner. Only the owner''s retention step (inlet retention) drops whole old partitions, recorded in retention_log.';
COMMENT ON COLUMN webhook_ingress.events.id IS
    'Insertion order; unique (an identity). The primary key includes received_at because it is the partition key.';
COMMENT ON COLUMN webhook_ingress.events.provider IS
    'The configured source name the webhook arrived on (POST /webhooks/{source}), e.g. stripe, github, acme.';
COMMENT ON COLUMN webhook_ingress.events.scheme IS
    'The signature scheme the source is configured with (stripe, github, standard-webhooks, ...).';
COMMENT ON COLUMN webhook_ingress.events.external_event_id IS
    'The provider''s own event id (Stripe id, X-GitHub-Delivery, webhook-id); with provider, the dedupe key (kept unique by event_keys).';
COMMENT ON COLUMN webhook_ingress.events.received_at IS
    'When ingress stored the event (its transaction''s start); the partition key.';
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

-- The dedupe key, unpartitioned so it is unique across every period.
CREATE TABLE webhook_ingress.event_keys (
    provider          text        NOT NULL,
    external_event_id text        NOT NULL,
    event_id          bigint      NOT NULL,
    received_at       timestamptz NOT NULL,
    CONSTRAINT event_keys_pkey PRIMARY KEY (provider, external_event_id)
);
COMMENT ON TABLE webhook_ingress.event_keys IS
    'One row per stored event: its dedupe key (provider, external_event_id). Written by the events_dedupe trigger; rows leave only with their event''s partition (inlet retention).';

-- Before each event row: claim its key. A key already claimed (committed, or
-- by a concurrent insert that then commits) makes the row a duplicate and it
-- is not inserted; the statement's row count says so.
CREATE FUNCTION webhook_ingress.events_dedupe() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    INSERT INTO webhook_ingress.event_keys (provider, external_event_id, event_id, received_at)
    VALUES (NEW.provider, NEW.external_event_id, NEW.id, NEW.received_at)
    ON CONFLICT (provider, external_event_id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER events_dedupe
    BEFORE INSERT ON webhook_ingress.events
    FOR EACH ROW EXECUTE FUNCTION webhook_ingress.events_dedupe();
ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_dedupe;

-- jobs -----------------------------------------------------------------------

CREATE TABLE webhook_ingress.jobs (
    id                bigint      GENERATED ALWAYS AS IDENTITY,
    event_id          bigint      NOT NULL,
    event_received_at timestamptz NOT NULL,
    handler           text        NOT NULL,
    provider          text        NOT NULL,
    event_type        text        NOT NULL DEFAULT '',
    status            text        NOT NULL DEFAULT 'pending',
    attempt_count     integer     NOT NULL DEFAULT 0,
    max_attempts      integer     NOT NULL DEFAULT 25,
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    lease_holder_id   text,
    lease_expires_at  timestamptz,
    attempted_at      timestamptz,
    worker_id         text,
    last_error        text,
    last_error_class  text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    completed_at      timestamptz,
    CONSTRAINT jobs_pkey PRIMARY KEY (id, event_received_at),
    CONSTRAINT jobs_event_handler_key UNIQUE (event_id, handler, event_received_at),
    CONSTRAINT jobs_event_fkey FOREIGN KEY (event_id, event_received_at)
        REFERENCES webhook_ingress.events (id, received_at),
    CONSTRAINT jobs_status_check CHECK (status IN ('pending', 'leased', 'completed', 'failed', 'dead_letter')),
    CONSTRAINT jobs_lease_consistent CHECK (status <> 'leased' OR (lease_holder_id IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CONSTRAINT jobs_max_attempts_positive CHECK (max_attempts > 0)
) PARTITION BY RANGE (event_received_at);
CREATE TABLE webhook_ingress.jobs_default PARTITION OF webhook_ingress.jobs DEFAULT;

COMMENT ON TABLE webhook_ingress.jobs IS
    'One row per (event, handler): the unit of lease, retry, backoff and dead-letter, so one handler failing never retries another. Partitioned with its event (event_received_at).';
COMMENT ON COLUMN webhook_ingress.jobs.event_received_at IS
    'The event''s received_at: the partition key, so a job lives and is dropped with its event''s period.';
COMMENT ON COLUMN webhook_ingress.jobs.status IS
    'pending: waiting to be claimed. leased: claimed by a streamer and handed to a consumer until lease_expires_at. completed: handler succeeded. failed: last attempt failed, retried at next_attempt_at. dead_letter: attempts spent or permanently failed; only a replay revives it.';
COMMENT ON COLUMN webhook_ingress.jobs.attempted_at IS
    'When the current (or last) attempt''s lease was taken: the start of that attempt in job_attempts.';
COMMENT ON COLUMN webhook_ingress.jobs.worker_id IS
    'The consumer that took the current attempt; NULL until one does. Only one consumer can take an attempt, even if the bus delivers its reference twice.';
COMMENT ON COLUMN webhook_ingress.jobs.attempt_count IS
    'Attempts started so far; incremented when a lease is taken. A replay sets it back to 0 so the handler gets max_attempts again; earlier attempts stay in job_attempts.';
COMMENT ON COLUMN webhook_ingress.jobs.last_error IS
    'Error text of the last failed attempt. It stays in Postgres; outside it only last_error_class travels.';
COMMENT ON COLUMN webhook_ingress.jobs.provider IS
    'Copy of events.provider so the streamer publishes without reading events.';

CREATE INDEX idx_jobs_claimable ON webhook_ingress.jobs (next_attempt_at, id)
    WHERE status IN ('pending', 'failed');
COMMENT ON INDEX webhook_ingress.idx_jobs_claimable IS
    'Jobs a streamer may claim (pending, or failed awaiting retry), by due time. Partial so finished jobs cost nothing.';
CREATE INDEX idx_jobs_leased ON webhook_ingress.jobs (lease_expires_at)
    WHERE status = 'leased';
CREATE INDEX idx_jobs_dead_letter ON webhook_ingress.jobs (handler, updated_at)
    WHERE status = 'dead_letter';
CREATE INDEX idx_jobs_event_id ON webhook_ingress.jobs (event_id);
CREATE INDEX idx_jobs_id ON webhook_ingress.jobs (id);

-- job attempt history ------------------------------------------------------------

CREATE TABLE webhook_ingress.job_attempts (
    id                bigint      GENERATED ALWAYS AS IDENTITY,
    job_id            bigint      NOT NULL,
    event_received_at timestamptz NOT NULL,
    attempt           integer     NOT NULL,
    worker_id         text,
    started_at        timestamptz NOT NULL,
    finished_at       timestamptz NOT NULL DEFAULT now(),
    outcome           text        NOT NULL,
    error_class       text,
    error             text,
    duration_ms       double precision GENERATED ALWAYS AS (extract(epoch FROM finished_at - started_at) * 1000) STORED,
    CONSTRAINT job_attempts_pkey PRIMARY KEY (id, event_received_at),
    CONSTRAINT job_attempts_job_fkey FOREIGN KEY (job_id, event_received_at)
        REFERENCES webhook_ingress.jobs (id, event_received_at),
    CONSTRAINT job_attempts_outcome_check
        CHECK (outcome IN ('completed', 'failed', 'dead_letter', 'lease_expired', 'replayed'))
) PARTITION BY RANGE (event_received_at);
CREATE TABLE webhook_ingress.job_attempts_default PARTITION OF webhook_ingress.job_attempts DEFAULT;
CREATE INDEX idx_job_attempts_job_id ON webhook_ingress.job_attempts (job_id, attempt);

COMMENT ON TABLE webhook_ingress.job_attempts IS
    'One row per finished attempt of a job: when it started and ended, how it ended, and the error class. Partitioned with its job''s event.';
COMMENT ON COLUMN webhook_ingress.job_attempts.outcome IS
    'completed, failed (will be retried), dead_letter (last attempt failed or the error was permanent), lease_expired (the consumer never reported; the reaper closed the attempt), replayed (not an attempt: an operator re-queued the job, or created it from the log; attempt is the attempt count before the replay, 0 for a created job, and worker_id the login role that replayed).';
COMMENT ON COLUMN webhook_ingress.job_attempts.event_received_at IS
    'The job''s event_received_at: the partition key.';

-- Guards -------------------------------------------------------------

CREATE TRIGGER events_append_only_row
    BEFORE UPDATE OR DELETE ON webhook_ingress.events
    FOR EACH ROW EXECUTE FUNCTION webhook_ingress.forbid_change();
CREATE TRIGGER events_append_only_truncate
    BEFORE TRUNCATE ON webhook_ingress.events
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_ingress.forbid_change();
ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row;
ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_truncate;
-- A partition is a table of its own: TRUNCATE of one does not fire the parent's
-- statement trigger, so each partition gets its own (see create_partitions).
CREATE TRIGGER events_append_only_truncate
    BEFORE TRUNCATE ON webhook_ingress.events_default
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_ingress.forbid_change();
ALTER TABLE webhook_ingress.events_default ENABLE ALWAYS TRIGGER events_append_only_truncate;

CREATE TRIGGER event_keys_append_only_row
    BEFORE UPDATE ON webhook_ingress.event_keys
    FOR EACH ROW EXECUTE FUNCTION webhook_ingress.forbid_change();
CREATE TRIGGER event_keys_append_only_truncate
    BEFORE TRUNCATE ON webhook_ingress.event_keys
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_ingress.forbid_change();
ALTER TABLE webhook_ingress.event_keys ENABLE ALWAYS TRIGGER event_keys_append_only_row;
ALTER TABLE webhook_ingress.event_keys ENABLE ALWAYS TRIGGER event_keys_append_only_truncate;

-- The retention record -----------------------------------------------------------

CREATE TABLE webhook_ingress.retention_log (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    period_start   timestamptz NOT NULL,
    period_end     timestamptz NOT NULL,
    events         bigint      NOT NULL,
    jobs           bigint      NOT NULL,
    attempts       bigint      NOT NULL,
    event_ids      int8range[] NOT NULL,
    sealed_through bigint      NOT NULL,
    dropped_at     timestamptz NOT NULL DEFAULT now(),
    dropped_by     text        NOT NULL DEFAULT session_user,
    CONSTRAINT retention_log_period CHECK (period_start < period_end)
);
COMMENT ON TABLE webhook_ingress.retention_log IS
    'Append-only: one row per period partition inlet retention dropped. event_ids are the ids the dropped events had (ranges, inclusive); inlet audit verify accepts those ids as pruned, every other sealed id must still be there.';
COMMENT ON COLUMN webhook_ingress.retention_log.sealed_through IS
    'The last event id sealed when the partition was dropped; every id in event_ids is at or below it.';

CREATE TRIGGER retention_log_append_only_row
    BEFORE UPDATE OR DELETE ON webhook_ingress.retention_log
    FOR EACH ROW EXECUTE FUNCTION webhook_ingress.forbid_change();
CREATE TRIGGER retention_log_append_only_truncate
    BEFORE TRUNCATE ON webhook_ingress.retention_log
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_ingress.forbid_change();
ALTER TABLE webhook_ingress.retention_log ENABLE ALWAYS TRIGGER retention_log_append_only_row;
ALTER TABLE webhook_ingress.retention_log ENABLE ALWAYS TRIGGER retention_log_append_only_truncate;

-- Partition maintenance (owner only) ---------------------------------------------

-- The period partitions of events: [period_start, period_end), oldest first.
CREATE FUNCTION webhook_ingress.partitions()
    RETURNS TABLE (period_start timestamptz, period_end timestamptz, events_partition text)
    LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS
$$
    SELECT substring(b FROM 'FROM \(''([^'']*)''\)')::timestamptz,
           substring(b FROM 'TO \(''([^'']*)''\)')::timestamptz,
           relname::text
    FROM (SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS b
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
          WHERE i.inhparent = 'webhook_ingress.events'::regclass) p
    WHERE b <> 'DEFAULT'
    ORDER BY 1
$$;

-- The name of the period partition of table t starting at s: events_p20260105.
CREATE FUNCTION webhook_ingress.partition_name(t text, s timestamptz) RETURNS text
    LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS
$$ SELECT t || '_p' || to_char(s AT TIME ZONE 'UTC', 'YYYYMMDD') $$;

-- Create period partitions of events, jobs and job_attempts (p_interval: day,
-- week or month, on UTC boundaries) from the end of the newest one (or, when
-- there is none, the period holding p_from, else the current period) through
-- p_ahead periods past the current one. A period with rows already in the
-- default partition is skipped (creating it would fail); those rows stay in the
-- default partition. Returns the periods created.
CREATE FUNCTION webhook_ingress.create_partitions(p_interval text, p_ahead integer, p_from timestamptz DEFAULT NULL)
    RETURNS TABLE (period_start timestamptz, period_end timestamptz)
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS
$$
DECLARE
    step  interval;
    start timestamptz;
    stop  timestamptz;
    nxt   timestamptz;
    dflt  timestamptz;
    t     text;
BEGIN
    IF p_interval NOT IN ('day', 'week', 'month') THEN
        RAISE EXCEPTION 'partition interval %: must be day, week or month', p_interval
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_ahead < 0 OR p_ahead > 366 THEN
        RAISE EXCEPTION 'partitions ahead %: must be 0..366', p_ahead
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    step := ('1 ' || p_interval)::interval;
    stop := date_trunc(p_interval, now(), 'UTC') + step * (p_ahead + 1);
    SELECT max(p.period_end) INTO start FROM webhook_ingress.partitions() p;
    start := coalesce(start, date_trunc(p_interval, least(coalesce(p_from, now()), now()), 'UTC'));
    SELECT max(received_at) INTO dflt FROM webhook_ingress.events_default WHERE received_at >= start;
    IF dflt IS NOT NULL THEN
        start := date_trunc(p_interval, dflt, 'UTC') + step;
    END IF;
    WHILE start < stop LOOP
        nxt := date_trunc(p_interval, start, 'UTC') + step;
        FOREACH t IN ARRAY ARRAY['events', 'jobs', 'job_attempts'] LOOP
            EXECUTE format('CREATE TABLE webhook_ingress.%I PARTITION OF webhook_ingress.%I FOR VALUES FROM (%L) TO (%L)',
                           webhook_ingress.partition_name(t, start), t, start, nxt);
        END LOOP;
        EXECUTE format('CREATE TRIGGER events_append_only_truncate BEFORE TRUNCATE ON webhook_ingress.%I '
                       'FOR EACH STATEMENT EXECUTE FUNCTION webhook_ingress.forbid_change()',
                       webhook_ingress.partition_name('events', start));
        -- Cloned row triggers take the parent's ENABLE ALWAYS on current
        -- releases; say so explicitly for every release.
        FOREACH t IN ARRAY ARRAY['events_append_only_row', 'events_append_only_truncate', 'events_dedupe'] LOOP
            EXECUTE format('ALTER TABLE webhook_ingress.%I ENABLE ALWAYS TRIGGER %I',
                           webhook_ingress.partition_name('events', start), t);
        END LOOP;
        period_start := start;
        period_end := nxt;
        RETURN NEXT;
        start := nxt;
    END LOOP;
END
$$;

-- What dropping the period partition starting at p_start would take, and why
-- it may not: open (pending, leased, failed) jobs, or events not yet sealed.
CREATE FUNCTION webhook_ingress.partition_status(p_start timestamptz)
    RETURNS TABLE (events bigint, min_event_id bigint, max_event_id bigint, jobs bigint, open_jobs bigint,
                   dead_letters bigint, attempts bigint, sealed_through bigint)
    LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    IF NOT EXISTS (SELECT FROM webhook_ingress.partitions() p WHERE p.period_start = p_start) THEN
        RAISE EXCEPTION 'no partition of webhook_ingress.events starts at %', p_start
            USING ERRCODE = 'undefined_table';
    END IF;
    EXECUTE format('SELECT count(*), min(id), max(id) FROM webhook_ingress.%I', webhook_ingress.partition_name('events', p_start))
        INTO events, min_event_id, max_event_id;
    EXECUTE format('SELECT count(*), count(*) FILTER (WHERE status IN (''pending'', ''leased'', ''failed'')), '
                   'count(*) FILTER (WHERE status = ''dead_letter'') FROM webhook_ingress.%I',
                   webhook_ingress.partition_name('jobs', p_start))
        INTO jobs, open_jobs, dead_letters;
    EXECUTE format('SELECT count(*) FROM webhook_ingress.%I', webhook_ingress.partition_name('job_attempts', p_start))
        INTO attempts;
    SELECT coalesce(max(c.last_event_id), 0) INTO sealed_through FROM webhook_ingress.audit_checkpoints c;
    RETURN NEXT;
END
$$;

-- Drop the period partition starting at p_start of events, jobs and
-- job_attempts, with its events' dedupe keys, and record it in retention_log.
-- Refused (and nothing changes) while any of its jobs is open or any of its
-- events is not sealed. Locks the three partitions first (lock_timeout applies),
-- so nothing changes between the check and the drop.
CREATE FUNCTION webhook_ingress.drop_partition(p_start timestamptz)
    RETURNS SETOF webhook_ingress.retention_log
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS
$$
DECLARE
    p  record;
    s  record;
    ev text := webhook_ingress.partition_name('events', p_start);
    jb text := webhook_ingress.partition_name('jobs', p_start);
    at text := webhook_ingress.partition_name('job_attempts', p_start);
    ids int8range[];
BEGIN
    SELECT * INTO p FROM webhook_ingress.partitions() x WHERE x.period_start = p_start;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no partition of webhook_ingress.events starts at %', p_start
            USING ERRCODE = 'undefined_table';
    END IF;
    EXECUTE format('LOCK TABLE webhook_ingress.%I, webhook_ingress.%I, webhook_ingress.%I IN ACCESS EXCLUSIVE MODE', at, jb, ev);
    SELECT * INTO s FROM webhook_ingress.partition_status(p_start);
    IF s.open_jobs > 0 THEN
        RAISE EXCEPTION 'partition % has % jobs not finished (pending, leased or failed)', ev, s.open_jobs
            USING ERRCODE = 'object_in_use';
    END IF;
    IF s.max_event_id > s.sealed_through THEN
        RAISE EXCEPTION 'partition % has events not sealed yet (ids up to %, sealed through %)', ev, s.max_event_id, s.sealed_through
            USING ERRCODE = 'object_in_use';
    END IF;
    -- The ids, as runs of consecutive ids present in the partition.
    EXECUTE format('SELECT coalesce(array_agg(int8range(lo, hi, ''[]'') ORDER BY lo), ''{}'') FROM ('
                   '  SELECT min(id) AS lo, max(id) AS hi FROM ('
                   '    SELECT id, id - row_number() OVER (ORDER BY id) AS run FROM webhook_ingress.%I) r'
                   '  GROUP BY run) g', ev)
        INTO ids;
    EXECUTE format('DELETE FROM webhook_ingress.event_keys k USING webhook_ingress.%I e '
                   'WHERE k.provider = e.provider AND k.external_event_id = e.external_event_id AND k.event_id = e.id', ev);
    EXECUTE format('ALTER TABLE webhook_ingress.job_attempts DETACH PARTITION webhook_ingress.%I', at);
    EXECUTE format('DROP TABLE webhook_ingress.%I', at);
    EXECUTE format('ALTER TABLE webhook_ingress.jobs DETACH PARTITION webhook_ingress.%I', jb);
    EXECUTE format('DROP TABLE webhook_ingress.%I', jb);
    EXECUTE format('ALTER TABLE webhook_ingress.events DETACH PARTITION webhook_ingress.%I', ev);
    EXECUTE format('DROP TABLE webhook_ingress.%I', ev);
    RETURN QUERY
    INSERT INTO webhook_ingress.retention_log (period_start, period_end, events, jobs, attempts, event_ids, sealed_through)
    VALUES (p.period_start, p.period_end, s.events, s.jobs, s.attempts, ids, s.sealed_through)
    RETURNING *;
END
$$;

-- The current period and four ahead, a week each: enough until inlet retention
-- (or inlet dev) creates more on the configured interval.
SELECT count(*) FROM webhook_ingress.create_partitions('week', 4, (SELECT min(received_at) FROM old_events));
-- Weeks back to the oldest event copied, so the rows copied back land in
-- period partitions, which retention can drop.

-- Copy back ----------------------------------------------------------------------

-- Through the parents, so every row lands in its partition and every event
-- claims its key. Before the fan-out trigger exists: the jobs are copied too.
INSERT INTO webhook_ingress.events
    (id, provider, scheme, external_event_id, event_type, received_at, headers, request_uri, raw_body, signature_verified, secret_index)
OVERRIDING SYSTEM VALUE
SELECT * FROM old_events ORDER BY id;
INSERT INTO webhook_ingress.jobs
    (id, event_id, event_received_at, handler, provider, event_type, status, attempt_count, max_attempts, next_attempt_at,
     lease_holder_id, lease_expires_at, attempted_at, worker_id, last_error, last_error_class, created_at, updated_at, completed_at)
OVERRIDING SYSTEM VALUE
SELECT id, event_id, event_received_at, handler, provider, event_type, status, attempt_count, max_attempts, next_attempt_at,
       lease_holder_id, lease_expires_at, attempted_at, worker_id, last_error, last_error_class, created_at, updated_at, completed_at
FROM old_jobs ORDER BY id;
INSERT INTO webhook_ingress.job_attempts
    (id, job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome, error_class, error)
OVERRIDING SYSTEM VALUE
SELECT id, job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome, error_class, error
FROM old_attempts ORDER BY id;

-- The identities continue where they were: ids a rolled-back insert used stay
-- used (the audit seals name them as skipped).
SELECT setval(pg_get_serial_sequence('webhook_ingress.' || tbl, 'id'), last_value, is_called) FROM old_sequences;

-- Fan-out, now that the jobs are back ---------------------------------------------

CREATE OR REPLACE FUNCTION webhook_ingress.events_fan_out() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts)
    SELECT e.id, e.received_at, s.handler, e.provider, e.event_type, max(s.max_attempts)
    FROM new_events e
    JOIN webhook_ingress.subscriptions s
      ON s.enabled
     AND e.provider LIKE s.provider_like
     AND e.event_type LIKE s.event_type_like
    GROUP BY e.id, e.received_at, s.handler, e.provider, e.event_type
    ON CONFLICT (event_id, handler, event_received_at) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER events_fan_out
    AFTER INSERT ON webhook_ingress.events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_ingress.events_fan_out();
ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_fan_out;

-- privileges ---------------------------------------------------------------------

REVOKE ALL ON webhook_ingress.events, webhook_ingress.jobs, webhook_ingress.job_attempts,
    webhook_ingress.event_keys, webhook_ingress.retention_log FROM PUBLIC;
REVOKE ALL ON FUNCTION webhook_ingress.events_dedupe(), webhook_ingress.partitions(),
    webhook_ingress.partition_name(text, timestamptz), webhook_ingress.create_partitions(text, integer, timestamptz),
    webhook_ingress.partition_status(timestamptz), webhook_ingress.drop_partition(timestamptz) FROM PUBLIC;

GRANT INSERT (provider, scheme, external_event_id, event_type, received_at, headers, request_uri, raw_body, signature_verified, secret_index)
    ON webhook_ingress.events TO webhook_ingress_writer;
GRANT SELECT (provider, external_event_id) ON webhook_ingress.events TO webhook_ingress_writer;

GRANT SELECT (id, provider, scheme, external_event_id, event_type, received_at, signature_verified)
    ON webhook_ingress.events TO webhook_streamer;
GRANT SELECT ON webhook_ingress.jobs TO webhook_streamer;
GRANT UPDATE (status, attempt_count, next_attempt_at, lease_holder_id, lease_expires_at, attempted_at, worker_id, last_error, last_error_class, updated_at)
    ON webhook_ingress.jobs TO webhook_streamer;
GRANT SELECT, INSERT (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome, error_class, error)
    ON webhook_ingress.job_attempts TO webhook_streamer;

GRANT SELECT ON webhook_ingress.events TO webhook_worker;
GRANT SELECT ON webhook_ingress.jobs TO webhook_worker;
GRANT UPDATE (status, next_attempt_at, lease_expires_at, lease_holder_id, worker_id, last_error, last_error_class, updated_at, completed_at)
    ON webhook_ingress.jobs TO webhook_worker;
GRANT SELECT, INSERT (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome, error_class, error)
    ON webhook_ingress.job_attempts TO webhook_worker;

GRANT SELECT ON webhook_ingress.events, webhook_ingress.jobs, webhook_ingress.job_attempts,
    webhook_ingress.event_keys, webhook_ingress.retention_log
    TO webhook_auditor, webhook_operator;
GRANT INSERT (event_id, event_received_at, handler, provider, event_type, max_attempts)
    ON webhook_ingress.jobs TO webhook_operator;
GRANT UPDATE (status, attempt_count, next_attempt_at, lease_holder_id, lease_expires_at, worker_id, last_error, last_error_class, updated_at, completed_at)
    ON webhook_ingress.jobs TO webhook_operator;
GRANT INSERT (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome)
    ON webhook_ingress.job_attempts TO webhook_operator;

GRANT SELECT (id, provider, external_event_id, event_type, received_at, headers, body_sha256,
               scheme, request_uri, signature_verified, secret_index)
    ON webhook_ingress.events TO webhook_sealer;

-- The publication the replication wake source follows lost jobs with the old
-- table; put the new one back, published under its own name rather than its
-- partitions'. Only its owner may: otherwise the streamer names the statement.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_publication WHERE pubname = 'inlet_jobs') THEN
        ALTER PUBLICATION inlet_jobs SET TABLE webhook_ingress.jobs;
        ALTER PUBLICATION inlet_jobs SET (publish_via_partition_root = true);
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'publication inlet_jobs: not its owner; as its owner run: ALTER PUBLICATION inlet_jobs SET TABLE webhook_ingress.jobs';
END
$$;

-- No role may change the log, whatever was granted elsewhere.
REVOKE UPDATE, DELETE, TRUNCATE ON webhook_ingress.events, webhook_ingress.event_keys, webhook_ingress.retention_log
    FROM PUBLIC, webhook_ingress_writer, webhook_streamer, webhook_worker, webhook_auditor, webhook_operator, webhook_sealer;
