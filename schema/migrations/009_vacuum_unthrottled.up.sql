-- 009_vacuum_unthrottled: autovacuum keeps up with the hot queue.
--
-- go run ./bench -only scale (1M events through insert, claim, take and
-- complete at ~12k/s) found the default cost-based throttling
-- (autovacuum_vacuum_cost_delay 2ms) left no autovacuum of jobs finished in
-- the 83 s run: 2.8M dead versions, a 614 MB heap and the claim at 5.8 ms
-- instead of 1.6 ms. Unthrottled on the jobs partitions (cost_delay 0) a
-- vacuum finished within the run: 365k dead, the claim at 2.2 ms. jobs is the
-- only table updated in place, and one partition is hot at a time, so the
-- I/O it costs is bounded. (autovacuum_naptime is cluster-wide; see
-- deployments/README.md.)
--
-- The storage settings of a jobs partition now live in one function, so
-- create_partitions (and a later migration) need not repeat them.

CREATE FUNCTION webhook_ingress.jobs_partition_options()
    RETURNS text LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS
$$
    SELECT 'fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, '
           'autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0'
$$;
REVOKE ALL ON FUNCTION webhook_ingress.jobs_partition_options() FROM PUBLIC;
COMMENT ON FUNCTION webhook_ingress.jobs_partition_options() IS
    'Storage settings of every jobs partition: room for HOT updates, vacuum and analyze at 2 %, vacuum unthrottled. Set by create_partitions.';

DO $$
DECLARE
    p regclass;
BEGIN
    FOR p IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'webhook_ingress.jobs'::regclass LOOP
        EXECUTE format('ALTER TABLE %s SET (%s)', p, webhook_ingress.jobs_partition_options());
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
        EXECUTE format('ALTER TABLE webhook_ingress.%I SET (%s)',
                       webhook_ingress.partition_name('jobs', start), webhook_ingress.jobs_partition_options());
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
