-- 072_reporter_advance_attempt_ids: a data plane restored from a backup, or
-- rebuilt on a new database with the same tenant token, reports the
-- attempts it finishes after that (review helper-260).
--
-- Every record the reporter sends carries an id of job_attempts' sequence
-- (job_attempts.id, and jobs.completed_attempt_id for a success kept on its
-- job row: one sequence, 010), and the control plane keys records by
-- (tenant, attempt id) and answers the reporter's start with the highest id
-- it holds, after which the reporter reads. A restore (pg_dump, base backup,
-- PITR) takes the sequence back with the data, and a new database starts it
-- at 1: the attempts finished next drew ids the control plane already held
-- from the lost timeline, which the reporter never read (at or below its
-- cursor) or which the control plane kept as they were (ON CONFLICT DO
-- NOTHING): every one of them, up to the old cursor, was silently lost.
--
-- reporter_advance_attempt_ids(p_past) moves the sequence past p_past (the
-- control plane's cursor) when it is behind it, so that the next id drawn
-- is p_past + 1, and never lowers it. It returns the last id the sequence
-- had drawn (0 for none) before it moved, so the reporter can say by how
-- much it was behind. Behind, it holds off every nextval before it looks
-- again and sets the value (ALTER SEQUENCE takes SHARE ROW EXCLUSIVE, which
-- conflicts with nextval's ROW EXCLUSIVE; restating the sequence's own
-- CYCLE setting changes nothing else): a draw between the look and setval
-- would otherwise be undone, and its id drawn twice. That lock is waited
-- for at most 100 ms (lock_timeout below), so an attempt being recorded
-- waits at most that long; the reporter retries with backoff. Not behind
-- (every start but the first after a restore), it reads the sequence and
-- takes no lock.
--
-- SECURITY DEFINER: setval and ALTER SEQUENCE take the sequence's owner,
-- and webhook_streamer, the reporter's role, holds nothing on the sequence.
-- It takes only the value, never a sequence name, and refuses a negative
-- one. Owned by the role that runs the migrations (the schema owner, or a
-- member of it), as every other function of the schema.
--
-- Safe on a live log: it creates a function and grants it; no table or
-- sequence is touched. It runs twice safely (CREATE OR REPLACE keeps the
-- owner; the revoke, the grant and the comment change nothing again).

CREATE OR REPLACE FUNCTION webhook_ingress.reporter_advance_attempt_ids(p_past bigint) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '100ms' AS
$$
DECLARE
    drawn  bigint;
    cycles boolean;
BEGIN
    IF p_past IS NULL OR p_past < 0 THEN
        RAISE EXCEPTION 'advance attempt ids past %: must be 0 or more', p_past
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END INTO drawn
    FROM webhook_ingress.job_attempts_id_seq s;
    IF drawn >= p_past THEN
        RETURN drawn;
    END IF;
    -- A restore rewinds the sequence by the attempts made since the backup;
    -- a cursor further ahead than 2^32 ids is no restore but a control
    -- plane (or a holder of the tenant's token, who can store a record of
    -- any id) pushing this database's ids towards their end, which would
    -- stop every failure and completion here: refused.
    IF p_past - drawn > 4294967296 THEN
        RAISE EXCEPTION 'advance attempt ids past %: % ids ahead of the last drawn (%), more than a restore rewinds', p_past, p_past - drawn, drawn
            USING ERRCODE = 'numeric_value_out_of_range';
    END IF;
    SELECT q.seqcycle INTO cycles FROM pg_sequence q
    WHERE q.seqrelid = 'webhook_ingress.job_attempts_id_seq'::regclass;
    EXECUTE 'ALTER SEQUENCE webhook_ingress.job_attempts_id_seq ' || CASE WHEN cycles THEN 'CYCLE' ELSE 'NO CYCLE' END;
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END INTO drawn
    FROM webhook_ingress.job_attempts_id_seq s;
    IF drawn < p_past THEN
        PERFORM setval('webhook_ingress.job_attempts_id_seq'::regclass, p_past, true);
    END IF;
    RETURN drawn;
END
$$;
COMMENT ON FUNCTION webhook_ingress.reporter_advance_attempt_ids(bigint) IS
    'The metadata reporter''s (072): moves job_attempts'' id sequence past p_past (the control plane''s cursor) when it is behind (the database was restored from a backup, or is new under the same tenant token), never lowering it, nor by more than 2^32 ids (refused: no restore rewinds so far); returns the last id drawn before. Locks the sequence only when behind.';
REVOKE ALL ON FUNCTION webhook_ingress.reporter_advance_attempt_ids(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.reporter_advance_attempt_ids(bigint) TO webhook_streamer;
