-- Order lanes (issue 22): what the claim asks of an ordered handler's job,
-- "is an earlier job of my key unfinished?", is answered by one small table
-- instead of a partial index on every jobs partition.
--
-- 019 kept jobs_order_lane, a partial index of every jobs partition, and
-- order_blocked probed it: one index probe per partition (six here, more as
-- periods are created) for every keyed job the claim considered, and one
-- more index on the partitioned table planned and kept up for every jobs
-- statement, ordered handlers or not (bench/ab-20261204b: about half of a
-- ~10 % regression of unordered handlers).
--
-- order_lanes holds one row per ordered handler's job that is not completed:
-- pending, leased, failed, or dead lettered (dead, which blocks its key only
-- under order_policy 'block', read at claim time so a policy change applies
-- at once). Triggers on jobs keep it: a keyed job's insert adds its row; a
-- change of status into or out of completed or dead_letter removes, marks or
-- adds it; the claim's pending -> leased and a retry's leased -> failed
-- write nothing. Unordered jobs (order_key NULL) never fire them. Jobs leave
-- the table only through those triggers or drop_partition, which now removes
-- the rows of the period it drops (dead letters; it refuses open jobs).

CREATE TABLE webhook_ingress.order_lanes (
    job_id            bigint      NOT NULL PRIMARY KEY,
    event_received_at timestamptz NOT NULL,
    handler           text        NOT NULL,
    order_key         text        NOT NULL,
    order_at          timestamptz NOT NULL,
    dead              boolean     NOT NULL DEFAULT false
);
COMMENT ON TABLE webhook_ingress.order_lanes IS
    'One row per ordered handler''s job not completed (pending, leased, failed, or dead: dead lettered), kept by triggers on jobs; the claim leases a keyed job only when no earlier row of its handler and key blocks it.';
CREATE INDEX order_lanes_lane ON webhook_ingress.order_lanes (handler, order_key, order_at, job_id) INCLUDE (dead);
CREATE INDEX order_lanes_received_at ON webhook_ingress.order_lanes (event_received_at);

CREATE FUNCTION webhook_ingress.order_lanes_keep() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    IF NEW.status = 'completed' THEN
        DELETE FROM webhook_ingress.order_lanes WHERE job_id = NEW.id;
    ELSE
        INSERT INTO webhook_ingress.order_lanes (job_id, event_received_at, handler, order_key, order_at, dead)
        VALUES (NEW.id, NEW.event_received_at, NEW.handler, NEW.order_key, NEW.order_at, NEW.status = 'dead_letter')
        ON CONFLICT (job_id) DO UPDATE SET dead = EXCLUDED.dead;
    END IF;
    RETURN NULL;
END
$$;

-- Before the rows are copied, so a job written while this runs is not missed
-- (CREATE TRIGGER waits for, then holds off, writers of jobs).
CREATE TRIGGER jobs_order_lanes_insert
    AFTER INSERT ON webhook_ingress.jobs
    FOR EACH ROW WHEN (NEW.order_key IS NOT NULL)
    EXECUTE FUNCTION webhook_ingress.order_lanes_keep();
CREATE TRIGGER jobs_order_lanes_status
    AFTER UPDATE OF status ON webhook_ingress.jobs
    FOR EACH ROW WHEN (NEW.order_key IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status
                       AND (OLD.status IN ('completed', 'dead_letter') OR NEW.status IN ('completed', 'dead_letter')))
    EXECUTE FUNCTION webhook_ingress.order_lanes_keep();

INSERT INTO webhook_ingress.order_lanes (job_id, event_received_at, handler, order_key, order_at, dead)
SELECT id, event_received_at, handler, order_key, order_at, status = 'dead_letter'
FROM webhook_ingress.jobs
WHERE order_key IS NOT NULL AND status IN ('pending', 'leased', 'failed', 'dead_letter') -- 019's partial index: no scan of every job
ON CONFLICT (job_id) DO NOTHING;

DROP INDEX webhook_ingress.jobs_order_lane;

-- The claim asks order_lanes itself, in a subquery (schema/queries/jobs.sql):
-- calling a function per job started an executor each time, 3x the cost of
-- the probe.
DROP FUNCTION webhook_ingress.order_blocked(text, text, timestamptz, bigint);

-- Catch-up (inlet replay --missing, --unrouted, a filtered handler's
-- catch-up) gives an ordered handler's new jobs their key and time, as the
-- fan-outs do, rather than put them in the keyless lane.
GRANT INSERT (order_key, order_at) ON webhook_ingress.jobs TO webhook_operator;

-- The streamer's claim probes it; the operator's DLQ counts what a dead
-- letter holds back; auditors read everything.
GRANT SELECT ON webhook_ingress.order_lanes TO webhook_streamer, webhook_operator, webhook_auditor;

-- 005's drop_partition, also removing the lane rows of the period it drops
-- (its dead letters: a period with open jobs is refused).
CREATE OR REPLACE FUNCTION webhook_ingress.drop_partition(p_start timestamptz)
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
