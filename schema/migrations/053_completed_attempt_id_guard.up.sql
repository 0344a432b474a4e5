-- 053_completed_attempt_id_guard: a job's completed_attempt_id is only ever
-- the attempt id its completion took.
--
-- completed_attempt_id is the successful attempt's id in job_attempts' id
-- space: the metadata reporter's cursor and the control plane's idempotency
-- key. complete_jobs runs as its caller and sets it from nextval, so
-- webhook_worker and webhook_consumer hold UPDATE on the column (010, 011),
-- and nothing checked the value: a consumer role could give its own job
-- another team's attempt id (the attempts view then listed two attempts
-- under it, and the control plane would have stored one of them only), or a
-- huge one (review helper-110: consumers
-- TestAConsumerRoleCannotForgeAnotherTeamsAttemptID).
--
-- A new, non-NULL completed_attempt_id must be the value the statement
-- setting it just drew from the sequence (currval: nextval in the SET list
-- is evaluated for each row before its BEFORE trigger). The WHEN clause
-- keeps the trigger off every other update of a job row (claims, failures,
-- extensions, replays clearing it).

CREATE FUNCTION webhook_ingress.jobs_completed_attempt_id_guard() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    -- currval fails when this session drew nothing: refused as well (no
    -- exception block, which would cost each completion a subtransaction).
    IF currval('webhook_ingress.job_attempts_id_seq') IS DISTINCT FROM NEW.completed_attempt_id THEN
        RAISE EXCEPTION 'job %: completed_attempt_id % is not the attempt id just drawn for its completion', NEW.id, NEW.completed_attempt_id
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'set it as complete_jobs does: completed_attempt_id = nextval(''webhook_ingress.job_attempts_id_seq'')';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_completed_attempt_id_guard
    BEFORE UPDATE OF completed_attempt_id ON webhook_ingress.jobs
    FOR EACH ROW
    WHEN (NEW.completed_attempt_id IS NOT NULL AND NEW.completed_attempt_id IS DISTINCT FROM OLD.completed_attempt_id)
    EXECUTE FUNCTION webhook_ingress.jobs_completed_attempt_id_guard();

-- A trigger's function runs whoever fires it; nobody calls it.
REVOKE EXECUTE ON FUNCTION webhook_ingress.jobs_completed_attempt_id_guard() FROM PUBLIC;
