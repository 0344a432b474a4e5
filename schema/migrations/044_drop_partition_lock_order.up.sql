-- 044_drop_partition_lock_order: inlet retention no longer deadlocks with
-- ingest, nor stops it while it works through a period.
--
-- drop_partition took ACCESS EXCLUSIVE locks on the period's partitions
-- first, did its checks, listed the ids and deleted the period's dedupe keys
-- and lanes under them, then locked the parents to detach. But every insert
-- of a job checks that its event exists with a generic plan (021) that locks
-- every events partition, the old period's too: an insert holding the
-- parents waited for the old partition while retention, holding it, waited
-- for the parents (deadlock detected: ingress answered 503, or retention
-- failed), and every insert waited for the whole of that work, in proportion
-- to the period's size (585 ms for 300,000 events with a 50 ms
-- lock_timeout: lock_timeout bounds the waits, not the holding).
--
-- Now the checks and the deletes run under SHARE locks on the partitions
-- (writes to the period wait; ingest's reads do not), and the detach takes
-- the parents first, in ingest's order, then the partitions exclusively:
-- ingest waits only for the detaches and drops themselves. inlet retention
-- also reports a deadlock, should one still happen, as a busy period, kept.

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
BEGIN
    SELECT * INTO p FROM webhook_ingress.partitions() x WHERE x.period_start = p_start;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no partition of webhook_ingress.events starts at %', p_start
            USING ERRCODE = 'undefined_table';
    END IF;
    -- SHARE first: nothing writes to the period (a replay, an outcome: they
    -- wait), while ingest, whose check that a new job's event exists locks
    -- every events partition (a generic plan, 021), goes on.
    EXECUTE format('LOCK TABLE webhook_ingress.%I, webhook_ingress.%I, webhook_ingress.%I IN SHARE MODE', at, jb, ev);
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
    DELETE FROM webhook_ingress.order_lanes l
    WHERE l.event_received_at >= p.period_start AND l.event_received_at < p.period_end;
    -- The detach needs the parents exclusively: them first, in ingest's
    -- order (events, jobs, then job_attempts), then the partitions, so a
    -- transaction that holds a parent and reaches for the period's
    -- partitions is waited out, never deadlocked with.
    LOCK TABLE webhook_ingress.events, webhook_ingress.jobs, webhook_ingress.job_attempts IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('LOCK TABLE webhook_ingress.%I, webhook_ingress.%I, webhook_ingress.%I IN ACCESS EXCLUSIVE MODE', ev, jb, at);
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
