-- 047_create_partitions_default_rows: create_partitions skips exactly the
-- periods that hold rows in the default partition, judged under the lock
-- its CREATE takes anyway.
--
-- Two faults (review helper-81, retention/default_partition_test.go):
--
-- * It read events_default before taking any lock, so an insert routed
--   there and not yet committed was not seen; CREATE TABLE … PARTITION OF
--   then waited for it, found the row once it committed, and failed the
--   whole run (23514, "updated partition constraint for default partition
--   would be violated"): inlet retention dropped nothing that run, and an
--   inlet migrate init container exited non-zero. The parent is now locked
--   first (ACCESS EXCLUSIVE, what CREATE TABLE … PARTITION OF takes on it;
--   events before jobs, the order ingest locks them), only when there is a
--   period to create, so in-flight inserts finish before the check.
--
-- * It skipped every period up to the newest default row: one row dated a
--   year ahead (a host clock stepped forward, an import with a mistyped
--   time) stopped partition creation for a year, and everything ingested
--   meanwhile went to the default partition, which retention never drops.
--   Now only a period with default rows of its own is skipped.
--
-- The function keeps 039's settings (CREATE OR REPLACE resets them).

CREATE OR REPLACE FUNCTION webhook_ingress.create_partitions(p_interval text, p_ahead integer, p_from timestamptz DEFAULT NULL)
    RETURNS TABLE (period_start timestamptz, period_end timestamptz)
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET TimeZone = 'UTC' SET DateStyle = 'ISO, MDY' AS
$$
DECLARE
    step  interval;
    start timestamptz;
    stop  timestamptz;
    nxt   timestamptz;
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
    IF start >= stop THEN
        RETURN;
    END IF;
    -- What CREATE TABLE … PARTITION OF takes below, taken before the
    -- default partition is read: an insert routed there finishes first.
    LOCK TABLE webhook_ingress.events IN ACCESS EXCLUSIVE MODE;
    WHILE start < stop LOOP
        nxt := date_trunc(p_interval, start, 'UTC') + step;
        IF EXISTS (SELECT FROM webhook_ingress.events_default WHERE received_at >= start AND received_at < nxt) THEN
            -- Creating it would fail: its rows stay in the default partition.
            start := nxt;
            CONTINUE;
        END IF;
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
