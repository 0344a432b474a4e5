-- 036_streamer_no_error_text: the streamer's role reads no error text.
--
-- webhook_streamer runs the streamer and the metadata reporter, the one
-- service that sends anything (attempt metadata) out of this database. It
-- held SELECT on the whole of jobs and job_attempts, so it could read
-- jobs.last_error and job_attempts.error: what handlers returned, which may
-- quote a body (schema TestStreamerReadsNoErrorText). It needed the whole
-- tables for two reasons:
--
-- * the claims address rows by tuple id (ctid), and PostgreSQL checks a
--   system column against the table-level privilege, which column grants
--   cannot give. The claim functions now run as their owner (SECURITY
--   DEFINER, with a fixed search_path); only webhook_streamer may execute
--   them, as before, and they return what they returned;
-- * the reaper kept a job's last error by reading it, and copied the reason
--   it wrote into the history row. It now composes the reason from the
--   lease's columns and leaves the error of a job that did not run
--   untouched without reading it (query ReapExpiredLeases).
--
-- The role now reads every column of jobs but last_error and every column
-- of job_attempts but error. A later migration that adds a column the
-- streamer must read grants it by name.
--
-- Rolling upgrade: a streamer of the previous version runs the previous
-- reaper, which reads last_error: its reaps fail with "permission denied"
-- (logged, retried each reap interval) until it is replaced, and expired
-- leases wait for a new streamer's reaper meanwhile. Its claims run the
-- functions here and go on. Nothing is lost.
ALTER FUNCTION webhook_ingress.claim_jobs(text[], bigint, text, interval, interval)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION webhook_ingress.claim_handler_jobs(text, bigint, text, interval)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION webhook_ingress.claim_limited_jobs(text, bigint, text, interval)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT * FROM (VALUES ('jobs', 'last_error'), ('job_attempts', 'error')) AS v(tab, hidden) LOOP
        EXECUTE format('REVOKE SELECT ON webhook_ingress.%I FROM webhook_streamer', t.tab);
        EXECUTE (
            SELECT format('GRANT SELECT (%s) ON webhook_ingress.%I TO webhook_streamer',
                          string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum), t.tab)
            FROM pg_attribute a
            WHERE a.attrelid = format('webhook_ingress.%I', t.tab)::regclass
              AND a.attnum > 0 AND NOT a.attisdropped
              AND a.attname <> t.hidden
        );
    END LOOP;
END
$$;
