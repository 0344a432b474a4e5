-- 035_complete_through_extension: a completion lands although a lease
-- extension of the same attempt moved its row meanwhile.
--
-- complete_jobs finds each job by its primary key and updates it by its
-- tuple id (ctid), to keep the plan to one probe per job whatever the
-- statistics say. An update of the row that commits after the statement's
-- snapshot and before its UPDATE reaches the row (an ExtendLease of the same
-- attempt: the consumer stops its extension loop when the handler returns,
-- but an extension already sent still runs, and a duplicate delivery's take
-- extends too) gives the row a new tuple id. PostgreSQL then rechecks the
-- UPDATE's conditions on the new version, the tuple id no longer matches,
-- and the job was skipped: the consumer took its lease for lost although the
-- lease token (attempt, attempted_at) was unchanged, and the job ran again
-- once the lease expired (on its last attempt: a dead letter for a handler
-- that succeeded). Proof: schema TestCompletionLandsThroughAConcurrentLeaseExtension.
--
-- Now, when the statement found a job's lease current but did not update
-- it, it runs again for those jobs, on a new snapshot (at most 10 times):
-- the moved row is found again by its primary key and completed if its
-- lease is still current. A job whose lease is really lost is not found,
-- and costs nothing more; nothing else changes (same signature, same fence,
-- same result).
CREATE OR REPLACE FUNCTION webhook_ingress.complete_jobs(p_ids bigint[], p_attempts integer[], p_received_at timestamptz[],
                                              p_leased_at timestamptz[], p_worker_id text)
    RETURNS TABLE (id bigint)
    LANGUAGE plpgsql
    SET plan_cache_mode = force_generic_plan
    SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_min  timestamptz;
    v_max  timestamptz;
    v_done  bigint[] := '{}';
    v_new   bigint[];
    v_found integer;
    v_pass  integer := 0;
BEGIN
    SELECT min(t), max(t) INTO v_min, v_max FROM unnest(p_received_at) t;
    LOOP
        WITH done AS (
            SELECT d.id, d.attempt, d.leased_at, j.event_received_at, j.tableoid AS part, j.ctid AS tid
            FROM ROWS FROM (unnest(p_ids), unnest(p_attempts), unnest(p_received_at), unnest(p_leased_at))
                AS d(id, attempt, event_received_at, leased_at)
            CROSS JOIN LATERAL (
                SELECT j.event_received_at, j.tableoid, j.ctid
                FROM webhook_ingress.jobs j
                WHERE j.id = d.id
                  AND j.event_received_at = d.event_received_at
                  AND j.event_received_at BETWEEN v_min AND v_max
                  AND j.status = 'leased'
                  AND j.attempt_count = d.attempt
                  AND j.attempted_at = d.leased_at
                LIMIT 1
            ) j
            WHERE d.id <> ALL (v_done)
        ), completed AS (
            UPDATE webhook_ingress.jobs j
            SET status               = 'completed',
                completed_at         = now(),
                completed_attempt_id = nextval('webhook_ingress.job_attempts_id_seq'),
                worker_id            = p_worker_id,
                lease_holder_id      = NULL,
                lease_expires_at     = NULL,
                last_error           = NULL,
                last_error_class     = NULL,
                updated_at           = now()
            FROM done d
            WHERE j.id = d.id
              AND j.event_received_at = d.event_received_at
              AND j.event_received_at BETWEEN v_min AND v_max
              AND j.tableoid = d.part
              AND j.ctid = d.tid
              AND j.status = 'leased'
              AND j.attempt_count = d.attempt
              AND j.attempted_at = d.leased_at
            RETURNING j.id
        )
        SELECT (SELECT count(*) FROM done), coalesce(array_agg(c.id), '{}') INTO v_found, v_new FROM completed c;
        v_done := v_done || v_new;
        -- Every lease found current was completed: done.
        EXIT WHEN v_found <= cardinality(v_new);
        v_pass := v_pass + 1;
        EXIT WHEN v_pass >= 10;
    END LOOP;
    RETURN QUERY SELECT unnest(v_done);
END
$$;
