-- 060_partition_owner: every period partition belongs to the owner of its
-- table, whichever member of the owner role created it.
--
-- inlet retention, inlet migrate and inlet dev accept any member of the
-- owner role (CheckOwner), and create_partitions (047) ran CREATE TABLE …
-- PARTITION OF as its caller (it is not SECURITY DEFINER), so each partition
-- belonged to the login that happened to create it. Reading one
-- (partition_status) and dropping it (drop_partition) take its owner: once
-- two roles had created periods (a DBA's inlet retention by hand as her own
-- login, the CronJob as another member or as the owner), the other one
-- failed on the first period it had not created with "permission denied for
-- table events_p…" (42501), every day, and dropped nothing after it (review
-- helper-143: TestRetentionDropsPartitionsAnotherOwnerMemberCreated).
--
-- create_partitions now gives each partition it creates, with its indexes
-- and triggers, to the owner of its parent (ALTER TABLE … OWNER TO, which
-- its creator may do: it owns the table and is a member of the owner; the
-- owner keeps CREATE on webhook_ingress, which it needs to create partitions
-- itself). Still as its caller, not as the function's owner: the caller's
-- own rights, no more. The partitions that exist are given to their
-- parent's owner below, those of a role this migration's runner cannot act
-- as excepted: a notice names them, and inlet retention, which keeps them,
-- says what to run (as their owner or a superuser). The function keeps
-- 039's settings (CREATE OR REPLACE resets them).

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

-- The partitions there are (default ones too), to their parent's owner.
DO $$
DECLARE
    p record;
BEGIN
    FOR p IN
        SELECT c.relname AS part, pg_get_userbyid(c.relowner) AS owner, pg_get_userbyid(pt.relowner) AS parent_owner
        FROM pg_inherits i
        JOIN pg_class pt ON pt.oid = i.inhparent
        JOIN pg_class c ON c.oid = i.inhrelid
        WHERE pt.oid IN ('webhook_ingress.events'::regclass, 'webhook_ingress.jobs'::regclass, 'webhook_ingress.job_attempts'::regclass)
          AND c.relowner <> pt.relowner
        ORDER BY c.relname
    LOOP
        BEGIN
            EXECUTE format('ALTER TABLE webhook_ingress.%I OWNER TO %I', p.part, p.parent_owner);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'partition % stays %''s (this migration''s role % may not act as it); as % or a superuser run: ALTER TABLE webhook_ingress.% OWNER TO %',
                p.part, p.owner, current_user, p.owner, quote_ident(p.part), quote_ident(p.parent_owner);
        END;
    END LOOP;
END
$$;
