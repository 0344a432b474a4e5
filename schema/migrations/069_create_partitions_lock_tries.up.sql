-- 069_create_partitions_lock_tries: creating partitions ahead no longer
-- stops ingest while a reader holds the log.
--
-- create_partitions (047, 060) asked for events' ACCESS EXCLUSIVE lock once
-- and waited the caller's whole lock_timeout for it (inlet retention's
-- retention.lock_timeout, 5 s by default). While any transaction held events
-- (an inlet audit verify of a large log, a report, pg_dump), every insert
-- queued behind that request (PostgreSQL grants locks in order), so ingest
-- stood still for those 5 s, ingress answered 503 at its own 5 s store
-- timeout, and the run then failed having created nothing; once a period
-- (weekly by default), on the routine path (review helper-192:
-- retention/create_ahead_stall_test.go).
--
-- The locks are now taken as drop_partition takes them since 044: the
-- parents in drop_partition's order (events, jobs, job_attempts; so neither
-- deadlocks with the other, nor with ingest or claims, which take them in
-- other orders), each with its partitions (LOCK TABLE without ONLY; CREATE
-- TABLE … PARTITION OF then waits for nothing more, the default partition
-- it scans included), in tries of at most 100 ms (below deadlock_timeout)
-- in subtransactions, sleeping between tries, all within the caller's
-- lock_timeout (0: no limit, as before), then lock_not_available as
-- before. An insert waits at most one try. Everything
-- else is 060's: the same periods, the default-row check of 047 under the
-- locks, the owner of the parent, triggers and storage settings, and 039's
-- settings (CREATE OR REPLACE resets them, so they are given here again).
-- CREATE OR REPLACE keeps the function's owner and grants, and running this
-- migration twice changes nothing.

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
    saved_timeout text;
    try_timeout   text;
    deadline      timestamptz;
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
    -- default partition is read (an insert routed there finishes first), in
    -- tries: a try waits at most 100 ms (less when the caller's lock_timeout
    -- is shorter), so an insert queued behind our request waits at most
    -- that, and crossing waits with a transaction that takes the parents in
    -- another order make us give up (a subtransaction: its locks go with
    -- it) and try again, below deadlock_timeout, rather than abort the other
    -- side.
    saved_timeout := current_setting('lock_timeout');
    IF saved_timeout = '0' THEN
        try_timeout := '100ms';
    ELSE
        deadline := clock_timestamp() + saved_timeout::interval;
        try_timeout := greatest(1, least(100, ceil(extract(epoch FROM saved_timeout::interval) * 1000)))::integer || 'ms';
    END IF;
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', try_timeout, true);
            LOCK TABLE webhook_ingress.events, webhook_ingress.jobs, webhook_ingress.job_attempts IN ACCESS EXCLUSIVE MODE;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            IF clock_timestamp() >= deadline THEN
                RAISE EXCEPTION 'the tables to create % partitions on (events, jobs, job_attempts) were not free within lock_timeout %', p_interval, saved_timeout
                    USING ERRCODE = 'lock_not_available';
            END IF;
            PERFORM pg_sleep(0.02);
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', saved_timeout, true);
    -- The newest period asked again under the locks: one created while we
    -- tried (by a caller outside inlet's advisory lock) would make ours
    -- fail with "relation already exists".
    SELECT greatest(start, max(p.period_end)) INTO start FROM webhook_ingress.partitions() p;
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
        -- Last, once its creator is done with it: the owner's (a no-op when
        -- the owner created it), so every member of the owner may read and
        -- drop it.
        FOREACH t IN ARRAY ARRAY['events', 'jobs', 'job_attempts'] LOOP
            EXECUTE format('ALTER TABLE webhook_ingress.%I OWNER TO %I',
                           webhook_ingress.partition_name(t, start),
                           (SELECT pg_get_userbyid(c.relowner) FROM pg_class c WHERE c.oid = format('webhook_ingress.%I', t)::regclass));
        END LOOP;
        period_start := start;
        period_end := nxt;
        RETURN NEXT;
        start := nxt;
    END LOOP;
END
$$;
