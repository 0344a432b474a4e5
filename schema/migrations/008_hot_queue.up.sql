-- 008_hot_queue: table settings that keep the hot queue table small.
--
-- A job row is updated three times (claimed, taken, completed). Every update
-- that changes an indexed column writes a new entry into every index of the
-- table; one that changes none can be a HOT update (the new version on the
-- same page, no index entries) if the page has room. So:
--
-- * idx_jobs_id and idx_jobs_event_id go: jobs_pkey (id, event_received_at)
--   and jobs_event_handler_key (event_id, handler, event_received_at) already
--   serve lookups by id and by event, and each extra index costs an entry on
--   every non-HOT update.
-- * idx_jobs_dead_letter no longer holds updated_at (every update sets it, so
--   no update could be HOT): dead letters are found by handler and sorted.
--   Taking a job (worker_id, updated_at; the lease only grows when the
--   streamer's is shorter than the consumer's extension) is then a HOT update.
-- * jobs partitions get fillfactor 80 (room on the page for HOT versions) and
--   vacuum/analyze at 2 % dead rows instead of 20 %, as the unpartitioned
--   table had in 001; partitioned parents cannot hold storage settings, so
--   each partition gets them, and create_partitions sets them on new ones.
--   Existing pages fill to 80 % only as they are rewritten.

DROP INDEX webhook_ingress.idx_jobs_id;
DROP INDEX webhook_ingress.idx_jobs_event_id;
DROP INDEX webhook_ingress.idx_jobs_dead_letter;
CREATE INDEX idx_jobs_dead_letter ON webhook_ingress.jobs (handler)
    WHERE status = 'dead_letter';
COMMENT ON INDEX webhook_ingress.idx_jobs_dead_letter IS
    'Dead letters by handler. Holds no column an update changes, so taking a job can be a HOT update.';

DO $$
DECLARE
    p regclass;
BEGIN
    FOR p IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'webhook_ingress.jobs'::regclass LOOP
        EXECUTE format('ALTER TABLE %s SET (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, '
                       'autovacuum_analyze_scale_factor = 0.02)', p);
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION webhook_ingress.create_partitions(p_interval text, p_ahead integer, p_from timestamptz DEFAULT NULL)
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
        EXECUTE format('ALTER TABLE webhook_ingress.%I SET (fillfactor = 80, '
                       'autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02)',
                       webhook_ingress.partition_name('jobs', start));
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
