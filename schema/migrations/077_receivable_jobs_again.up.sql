-- 077_receivable_jobs_again: 076 as it was first committed (2be9df6) and
-- as it is now are two different migrations under one number (review
-- helper-307), and this one brings a database migrated by either to the
-- same place.
--
-- 076 was rewritten after its first commit (review helper-294: its first
-- claim asked a SQL function per due job and took 26-86 s over a 50,000-job
-- backlog). `inlet migrate` applies only versions above the highest one a
-- database records, so a database migrated by the first 076 kept its
-- role_covers and job_receivable and never got receivable_scopes,
-- scopes_cover and receives: every claim of a limited handler (a rate
-- limit, max_in_flight, a circuit breaker) failed with 42883 and its jobs
-- waited for ever (TestDatabaseMigratedByFirst076GetsTheLimitedClaim). And
-- a streamer of the first 076's commit, against the rewritten one, called
-- job_receivable from its reaper and LimitedWakeIn and failed there: no
-- expired lease was reaped while it ran (TestFirst076StreamerReapsAfterTheMigration).
--
-- So this migration creates both: the first 076's role_covers and
-- job_receivable, kept for streamers of that commit during a rolling
-- upgrade (nothing of this version calls them; a later release may drop
-- them, and will say so), and the rewritten 076's functions, the claim last.
-- The text of every committed migration is now pinned by a digest
-- (schema/migrations.sum, TestCommittedMigrationsAreUnchanged), so a
-- committed migration cannot change again unnoticed.
--
-- Safe on a live database: functions only (CREATE OR REPLACE), nothing
-- read or rewritten, and it runs twice safely; claim_limited_jobs keeps its
-- signature, so a streamer of any earlier version calls the same function.

-- The first 076's functions (2be9df6), unchanged.
CREATE OR REPLACE FUNCTION webhook_ingress.role_covers(p_handler text, p_role text, p_provider text, p_event_type text)
    RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT EXISTS (SELECT FROM webhook_ingress.consumer_roles r WHERE r.handler = p_handler AND r.role_name = p_role)
       AND EXISTS (SELECT FROM pg_catalog.pg_roles a WHERE a.rolname = p_role)
       AND EXISTS (SELECT FROM webhook_ingress.consumer_role_scopes s
                   WHERE s.role_name = p_role
                     AND p_provider LIKE s.provider_like AND p_event_type LIKE s.event_type_like)
$$;
COMMENT ON FUNCTION webhook_ingress.role_covers(text, text, text, text) IS
    'Whether role p_role is one of handler p_handler''s consumer roles (consumer_roles, and the role exists) with a scope covering source p_provider and type p_event_type (076).';
REVOKE ALL ON FUNCTION webhook_ingress.role_covers(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.role_covers(text, text, text, text) TO webhook_streamer;

CREATE OR REPLACE FUNCTION webhook_ingress.job_receivable(p_handler text, p_provider text, p_event_type text,
                                                          p_seen_since timestamptz, p_alive_at timestamptz)
    RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT EXISTS (
        SELECT FROM webhook_ingress.consumers c
        WHERE c.handler = p_handler AND c.seen_at >= p_seen_since AND c.alive_until > p_alive_at
          AND (c.db_role IS NULL OR c.db_role = ''
               OR webhook_ingress.role_covers(p_handler, c.db_role, p_provider, p_event_type)
               OR NOT EXISTS (SELECT FROM webhook_ingress.consumers o
                              WHERE o.handler = p_handler
                                AND (o.db_role = ''
                                     OR webhook_ingress.role_covers(p_handler, o.db_role, p_provider, p_event_type)))))
$$;
COMMENT ON FUNCTION webhook_ingress.job_receivable(text, text, text, timestamptz, timestamptz) IS
    'Whether a consumer of handler p_handler seen at or after p_seen_since and alive after p_alive_at could receive a job of source p_provider and type p_event_type (its role''s topic or the handler''s): the reaper''s test of an expired lease, and the limited claim''s of a due job (076).';
REVOKE ALL ON FUNCTION webhook_ingress.job_receivable(text, text, text, timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.job_receivable(text, text, text, timestamptz, timestamptz) TO webhook_streamer;

-- The rewritten 076's functions (da224e5), unchanged.

CREATE OR REPLACE FUNCTION webhook_ingress.receivable_scopes(p_handler text)
    RETURNS TABLE (open boolean, uncovered boolean, live_pairs text[], member_pairs text[],
                   live_scopes text[], member_scopes text[])
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    WITH c AS (
        SELECT c.db_role, c.alive_until > now() AS alive,
               c.db_role <> ''
                   AND EXISTS (SELECT FROM webhook_ingress.consumer_roles r
                               WHERE r.handler = p_handler AND r.role_name = c.db_role)
                   AND EXISTS (SELECT FROM pg_catalog.pg_roles a WHERE a.rolname = c.db_role) AS member
        FROM webhook_ingress.consumers c
        WHERE c.handler = p_handler
    ), s AS (
        SELECT s.provider_like AS p, s.event_type_like AS e, bool_or(c.alive) AS alive
        FROM c JOIN webhook_ingress.consumer_role_scopes s ON s.role_name = c.db_role
        WHERE c.member AND s.provider_like IS NOT NULL AND s.event_type_like IS NOT NULL
        GROUP BY s.provider_like, s.event_type_like
    )
    SELECT NOT EXISTS (SELECT FROM c)
               OR EXISTS (SELECT FROM c WHERE c.alive AND (c.db_role IS NULL OR c.db_role = '')),
           EXISTS (SELECT FROM c WHERE c.alive) AND NOT EXISTS (SELECT FROM c WHERE c.db_role = ''),
           coalesce((SELECT array_agg(s.p || chr(31) || s.e) FROM s WHERE s.alive), '{}'),
           coalesce((SELECT array_agg(s.p || chr(31) || s.e) FROM s), '{}'),
           coalesce((SELECT array_agg(x) FROM s, LATERAL unnest(ARRAY[s.p, s.e]) x WHERE s.alive), '{}'),
           coalesce((SELECT array_agg(x) FROM s, LATERAL unnest(ARRAY[s.p, s.e]) x), '{}')
$$;
COMMENT ON FUNCTION webhook_ingress.receivable_scopes(text) IS
    'Who could receive handler p_handler''s jobs now, read once per limited claim for receives(): open (any job: a live consumer of a version before 064 or of an unrestricted role, or no consumer known), uncovered (a job no role of its consumers covers goes to a live consumer), the scopes of its roles with a live consumer and of all its roles, as LIKE pairs joined by U+001F and as flat (provider, type, ...) lists (076).';
REVOKE ALL ON FUNCTION webhook_ingress.receivable_scopes(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.receivable_scopes(text) TO webhook_streamer;

CREATE OR REPLACE FUNCTION webhook_ingress.scopes_cover(p_provider text, p_event_type text, p_scopes text[])
    RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_scopes, 1), 0) / 2 LOOP
        IF p_provider LIKE p_scopes[2 * i - 1] AND p_event_type LIKE p_scopes[2 * i] THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END
$$;
COMMENT ON FUNCTION webhook_ingress.scopes_cover(text, text, text[]) IS
    'Whether source p_provider and type p_event_type match one of the scopes given as a flat list of LIKE patterns (provider, type, provider, type, ...) (076).';
REVOKE ALL ON FUNCTION webhook_ingress.scopes_cover(text, text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.scopes_cover(text, text, text[]) TO webhook_streamer;

-- receives is one expression (no sub-select), so the planner inlines it
-- where it is called: native LIKE ANY over the joined pairs, about a
-- microsecond per job. A pair's U+001F stands between source and type: a
-- pattern matches the joined text as its two halves match their sides,
-- since the text holds that one U+001F, unless the source or type has one
-- of its own (no HTTP header may; a body's JSON might), which is judged
-- side by side (scopes_cover) instead.
CREATE OR REPLACE FUNCTION webhook_ingress.receives(p_provider text, p_event_type text, p_open boolean, p_uncovered boolean,
                                                    p_live_pairs text[], p_member_pairs text[],
                                                    p_live_scopes text[], p_member_scopes text[])
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_open
        OR CASE WHEN strpos(p_provider, chr(31)) = 0 AND strpos(p_event_type, chr(31)) = 0
                THEN (p_provider || chr(31) || p_event_type) LIKE ANY (p_live_pairs)
                     OR (p_uncovered AND NOT (p_provider || chr(31) || p_event_type) LIKE ANY (p_member_pairs))
                ELSE webhook_ingress.scopes_cover(p_provider, p_event_type, p_live_scopes)
                     OR (p_uncovered AND NOT webhook_ingress.scopes_cover(p_provider, p_event_type, p_member_scopes))
           END
$$;
COMMENT ON FUNCTION webhook_ingress.receives(text, text, boolean, boolean, text[], text[], text[], text[]) IS
    'Whether a job of source p_provider and type p_event_type could be received by a live consumer, given its handler''s receivable_scopes (076).';
REVOKE ALL ON FUNCTION webhook_ingress.receives(text, text, boolean, boolean, text[], text[], text[], text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.receives(text, text, boolean, boolean, text[], text[], text[], text[]) TO webhook_streamer;

CREATE OR REPLACE FUNCTION webhook_ingress.claim_limited_jobs(p_handler text, p_batch_size bigint, p_lease_holder text, p_lease_for interval)
    RETURNS TABLE (id bigint, event_id bigint, handler text, provider text, event_type text, attempt_count integer,
                   max_attempts integer, lease_expires_at timestamptz, trace_parent text, event_received_at timestamptz,
                   attempted_at timestamptz, probe boolean)
    LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp -- as 036 made it
    SET plan_cache_mode = force_generic_plan
    SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_tokens   float8;   -- the bucket's tokens now (NULL: no rate limit)
    v_probe    boolean;  -- the circuit is open and its probe is due
    v_interval interval; -- breaker_probe_interval
    v_quota    bigint;   -- how many jobs the limits allow now
    v_ids      bigint[];
    v_tids     tid[];
    v_min      timestamptz;
    v_max      timestamptz;
    v_kids     bigint[]; -- the keyed jobs locked
    v_kk       text[];   -- their keys
    v_busy     bigint[]; -- those whose key another claim is leasing
    v_skip     boolean;
    v_leased   bigint;   -- the handler's jobs leased now
    v_open     boolean;  -- a live consumer receives any of its jobs
    v_unc      boolean;  -- a job no role covers goes to a live consumer
    v_lpairs   text[];   -- the scopes of its roles with a live consumer
    v_mpairs   text[];   -- the scopes of all its roles
    v_lscopes  text[];   -- the same, as flat lists
    v_mscopes  text[];
BEGIN
    -- The handler's leased jobs, counted once: the in-flight limit, and the
    -- jobs a probe waits for (041, 073). On a snapshot taken after
    -- LockHandlerLimits's lock was granted, as the limits below.
    SELECT count(*) INTO v_leased FROM webhook_ingress.jobs f
    WHERE f.handler = p_handler AND f.status = 'leased' AND f.lease_expires_at IS NOT NULL;
    -- The limits, on a snapshot taken after LockHandlerLimits's lock was
    -- granted: it counts the leases the lock's previous holder committed.
    SELECT CASE WHEN l.rate_per_second IS NULL THEN NULL
                ELSE least(l.burst::float8, l.tokens + l.rate_per_second * extract(epoch FROM now() - l.refilled_at)::float8) END,
           l.breaker_failures IS NOT NULL AND l.circuit <> 'closed' AND coalesce(l.next_probe_at <= now(), true)
               AND v_leased = 0,
           l.breaker_probe_interval,
           least(
               CASE WHEN l.breaker_failures IS NULL OR l.circuit = 'closed' THEN p_batch_size
                    -- no next probe (only a fault leaves none): one is due
                    WHEN l.next_probe_at > now() THEN 0
                    -- One probe at a time, and only once every job of the
                    -- handler has ended: a job leased before the circuit
                    -- opened that fails while the probe runs opens the
                    -- circuit again, and a probe fenced on half_open alone
                    -- was leased beside the first (041, 073).
                    WHEN v_leased > 0 THEN 0
                    ELSE 1 END,
               CASE WHEN l.max_in_flight IS NULL THEN p_batch_size
                    ELSE greatest(l.max_in_flight - v_leased, 0) END,
               p_batch_size)
    INTO v_tokens, v_probe, v_interval, v_quota
    FROM webhook_ingress.handler_limits l
    WHERE l.handler = p_handler
    FOR UPDATE;
    IF NOT FOUND THEN
        -- No row: a consumer registered the handler again without limits
        -- since the streamer listed it; claim_jobs takes it after the next
        -- recount.
        RETURN;
    END IF;
    v_quota := least(v_quota, coalesce(floor(v_tokens)::bigint, v_quota));
    -- Does a dead letter let its key go on? Asked once (see 031).
    v_skip := webhook_ingress.order_skips_dead(p_handler);
    -- Who could receive its jobs now, read once (receivable_scopes).
    SELECT r.open, r.uncovered, r.live_pairs, r.member_pairs, r.live_scopes, r.member_scopes
    INTO v_open, v_unc, v_lpairs, v_mpairs, v_lscopes, v_mscopes
    FROM webhook_ingress.receivable_scopes(p_handler) r;

    IF v_quota > 0 THEN
        SELECT array_agg(d.id), array_agg(d.ctid), min(d.event_received_at), max(d.event_received_at),
               array_agg(d.id) FILTER (WHERE d.order_key IS NOT NULL),
               array_agg(d.order_key) FILTER (WHERE d.order_key IS NOT NULL)
        INTO v_ids, v_tids, v_min, v_max, v_kids, v_kk
        FROM (
            SELECT j.id, j.ctid, j.event_received_at, j.order_key
            FROM webhook_ingress.jobs j
            WHERE j.status IN ('pending', 'failed')
              AND j.next_attempt_at <= now()
              AND j.handler = p_handler
              -- Only a job a live consumer could receive (076): one only an
              -- absent role may run waits, pending, for the role, and takes
              -- neither the probe nor an in-flight slot from the others.
              AND webhook_ingress.receives(j.provider, j.event_type, v_open, v_unc, v_lpairs, v_mpairs, v_lscopes, v_mscopes)
              -- An ordered handler's job waits for the earlier unfinished
              -- ones of its key (020; a dead one only under its handler's
              -- live order policy block, 027) and for a leased one of its
              -- key, earlier or not (026).
              AND (j.order_key IS NULL OR (NOT EXISTS (
                  SELECT FROM webhook_ingress.order_lanes l
                  WHERE l.handler = j.handler AND l.order_key = j.order_key
                    AND (l.order_at, l.job_id) < (j.order_at, j.id)
                    AND (NOT l.dead OR NOT v_skip))
                AND NOT EXISTS (
                  SELECT FROM webhook_ingress.order_lanes l
                  WHERE l.handler = j.handler AND l.order_key = j.order_key AND l.leased
                    AND l.job_id <> j.id)))
            ORDER BY j.next_attempt_at, j.id
            LIMIT v_quota
            FOR UPDATE OF j SKIP LOCKED
        ) d;
        -- As claim_jobs (030): each key locked until commit, a key another
        -- claim holds passed over, and the lease, on a snapshot taken after
        -- the locks, checks again that no other job of the key is leased.
        IF v_kids IS NOT NULL THEN
            SELECT array_agg(k.id) INTO v_busy
            FROM unnest(v_kids, v_kk) AS k(id, order_key)
            WHERE NOT pg_try_advisory_xact_lock(webhook_ingress.order_key_lock(p_handler, k.order_key));
        END IF;
    END IF;

    -- The lease, and the limits spent on it (the bucket refilled to now
    -- even when nothing was leased, as before).
    RETURN QUERY
    WITH leased AS (
        UPDATE webhook_ingress.jobs j
        SET status           = 'leased',
            attempt_count    = j.attempt_count + 1,
            lease_holder_id  = p_lease_holder,
            lease_expires_at = now() + p_lease_for,
            attempted_at     = now(),
            worker_id        = NULL,
            updated_at       = now()
        WHERE j.ctid = ANY (coalesce(v_tids, '{}'))
          AND j.id = ANY (coalesce(v_ids, '{}'))
          AND j.event_received_at BETWEEN v_min AND v_max
          AND (j.order_key IS NULL OR (
              j.id <> ALL (coalesce(v_busy, '{}'))
              AND NOT EXISTS (
                  SELECT FROM webhook_ingress.order_lanes l
                  WHERE l.handler = j.handler AND l.order_key = j.order_key AND l.leased
                    AND l.job_id <> j.id)))
        RETURNING j.id, j.event_id, j.handler, j.provider, j.event_type, j.attempt_count, j.max_attempts,
                  j.lease_expires_at, coalesce(j.trace_parent, '') AS trace_parent, j.event_received_at, j.attempted_at
    ), spent AS (
        UPDATE webhook_ingress.handler_limits l
        SET tokens             = CASE WHEN v_tokens IS NULL THEN l.tokens ELSE v_tokens - (SELECT count(*) FROM leased) END,
            refilled_at        = CASE WHEN v_tokens IS NULL THEN l.refilled_at ELSE now() END,
            circuit            = CASE WHEN v_probe AND EXISTS (SELECT FROM leased) THEN 'half_open' ELSE l.circuit END,
            circuit_changed_at = CASE WHEN v_probe AND EXISTS (SELECT FROM leased) AND l.circuit <> 'half_open' THEN now() ELSE l.circuit_changed_at END,
            next_probe_at      = CASE WHEN v_probe AND EXISTS (SELECT FROM leased) THEN now() + v_interval ELSE l.next_probe_at END
        WHERE l.handler = p_handler
        RETURNING l.circuit
    )
    SELECT leased.id, leased.event_id, leased.handler, leased.provider, leased.event_type, leased.attempt_count,
           leased.max_attempts, leased.lease_expires_at, leased.trace_parent, leased.event_received_at,
           leased.attempted_at, coalesce(v_probe, false)
    FROM leased;
END
$$;
COMMENT ON FUNCTION webhook_ingress.claim_limited_jobs(text, bigint, text, interval) IS
    'Lease due jobs of one limited handler within its limits, only those a live consumer could receive, taking 030''s per-key locks as claim_jobs does; a probe only while none of the handler''s jobs is leased, none of a circuit without a breaker; run after LockHandlerLimits in one transaction (033, 041, 073, 076).';
REVOKE ALL ON FUNCTION webhook_ingress.claim_limited_jobs(text, bigint, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.claim_limited_jobs(text, bigint, text, interval) TO webhook_streamer;
