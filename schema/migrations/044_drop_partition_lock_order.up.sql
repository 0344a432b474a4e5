-- 044_drop_partition_lock_order: inlet retention neither deadlocks with
-- ingest or delivery nor stops them while it works through a period.
--
-- drop_partition locked the period's partitions exclusively first, did its
-- checks, listed the ids and deleted the period's dedupe keys and lanes
-- under those locks, then locked the parents to detach. But an insert's
-- check that a job's event exists, the streamer's claims and consumers'
-- outcomes run generic plans (021) that lock every partition, the old
-- period's too: a transaction holding a parent waited for the old partition
-- while retention, holding it, waited for the parent (deadlock detected:
-- ingress answered 503, a claim failed, or retention did); and everything
-- waited for the whole of that work, in proportion to the period (585 ms for
-- 300,000 events with a 50 ms lock_timeout, which bounds waits, not
-- holding).
--
-- Now the checks and the id list run before any lock but the reads' own;
-- then the parents are locked first (in tries of at most 100 ms, below
-- deadlock_timeout, so crossing waits make retention try again rather than
-- abort the other side), then the partitions; open jobs are asked again through their partial indexes
-- (cheap: empty), the lanes deleted and the partitions detached and
-- dropped. The period's dedupe keys are deleted by inlet retention after
-- the drop, in a statement of its own (an old key arriving meanwhile then
-- waits on a row, not on a table). inlet retention also reports a deadlock,
-- should one still happen, as a busy period, kept.

CREATE OR REPLACE FUNCTION webhook_ingress.drop_partition(p_start timestamptz)
    RETURNS SETOF webhook_ingress.retention_log
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, MDY' AS -- as 039 set them
$$
DECLARE
    p  record;
    s  record;
    ev text := webhook_ingress.partition_name('events', p_start);
    jb text := webhook_ingress.partition_name('jobs', p_start);
    at text := webhook_ingress.partition_name('job_attempts', p_start);
    ids int8range[];
    open_now boolean;
    saved_timeout text;
    deadline timestamptz;
BEGIN
    SELECT * INTO p FROM webhook_ingress.partitions() x WHERE x.period_start = p_start;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no partition of webhook_ingress.events starts at %', p_start
            USING ERRCODE = 'undefined_table';
    END IF;
    -- The checks and the ids first, holding only the reads' own locks
    -- (ACCESS SHARE, which no writer waits for): the counts and the id list
    -- are the work that grows with the period.
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
    -- Then the parents, and only then the partitions: a transaction that
    -- holds a parent and reaches for the period's partitions (ingest's
    -- check of a job's event, a claim or an outcome on a generic plan, 021)
    -- is waited out; writers wait only for what follows, which is cheap.
    -- Those transactions take the parents in different orders (ingest
    -- events then jobs, a claim jobs then events), so no one order is safe:
    -- each try waits at most 100 ms, below deadlock_timeout (1 s by
    -- default), so when our waits cross another transaction's, ours gives
    -- up (a subtransaction: its locks go with it) and tries again, and the
    -- other is never aborted; all tries together within the caller's
    -- lock_timeout (inlet retention's retention.lock_timeout), then
    -- lock_not_available as before.
    saved_timeout := current_setting('lock_timeout');
    deadline := clock_timestamp() + coalesce(nullif(saved_timeout, '0')::interval, interval '5 seconds');
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '100ms', true);
            LOCK TABLE webhook_ingress.events, webhook_ingress.jobs, webhook_ingress.job_attempts IN ACCESS EXCLUSIVE MODE;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            IF clock_timestamp() >= deadline THEN
                RAISE EXCEPTION 'the tables of partition % were not free within lock_timeout %', ev, saved_timeout
                    USING ERRCODE = 'lock_not_available';
            END IF;
            PERFORM pg_sleep(0.02);
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', saved_timeout, true);
    EXECUTE format('LOCK TABLE webhook_ingress.%I, webhook_ingress.%I, webhook_ingress.%I IN ACCESS EXCLUSIVE MODE', ev, jb, at);
    -- Only a replay or a catch-up can have opened one of its jobs since the
    -- check (no event is ever stored into a past period): asked again
    -- through the partial indexes of open jobs, which are empty here.
    EXECUTE format('SELECT EXISTS (SELECT FROM webhook_ingress.%I WHERE status IN (''pending'', ''failed'')) '
                   'OR EXISTS (SELECT FROM webhook_ingress.%I WHERE status = ''leased'')', jb, jb)
        INTO open_now;
    IF open_now THEN
        RAISE EXCEPTION 'partition % has jobs not finished (pending, leased or failed)', jb
            USING ERRCODE = 'object_in_use';
    END IF;
    -- The period's dedupe keys are deleted after the drop, by inlet
    -- retention, outside these locks (RetentionDeleteKeys).
    DELETE FROM webhook_ingress.order_lanes l
    WHERE l.event_received_at >= p.period_start AND l.event_received_at < p.period_end;
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
