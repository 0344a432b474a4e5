-- Queries on webhook_ingress.jobs: the job protocol. A delivered job costs
-- two writes of its row: the streamer's claim (the lease) and the consumer's
-- outcome. In between the consumer only reads.
--
-- The lease token is (attempt_count, attempted_at), set by the claim and
-- carried in the bus reference. Every later statement on the job (read,
-- extend, complete, fail) is fenced on it: attempt numbers alone repeat after
-- a replay, the lease time does not. A successful attempt stays on the job
-- row (attempt_count, worker_id, completed_at, completed_attempt_id); failed
-- attempts, expired leases and replays get a job_attempts row.

-- name: ClaimJobs :many
-- Lease up to batch_size due jobs for lease holder lease_holder for
-- lease_for (an interval), in one statement. SKIP LOCKED lets any number of streamers claim side by side
-- without waiting on or double-leasing each other's rows. The attempt number
-- and lease time taken here are the lease token. Handlers in full_handlers
-- are at their in-flight limit and get no more this round; the streamer keeps that count
-- in memory (CountLeasedJobs now and then, plus what it leased since), so
-- the claim does not re-count every lease. A job of an ordered handler
-- (019_order_key) is leased only when no earlier job of its key is
-- unfinished (pending, leased, failed, or dead_letter under the policy
-- block): one probe of order_lanes, for keyed jobs only (a subquery, not a
-- function: a function call starts an executor per job, 3x the cost).
--
-- Only jobs of events received claim_window before now() or later (NULL:
-- all), so the plan skips the scans of older partitions (023_protocol_window): the
-- streamer claims within an hour, and over every partition at least once per
-- poll interval.
--
-- The statement runs in webhook_ingress.claim_jobs (022_protocol_functions),
-- on a generic plan: planned once per session instead of on every call.
-- With handlers in full_handlers it reads only the other handlers' due jobs
-- (idx_jobs_due_by_handler, 024_claim_by_handler), so a held-back handler's
-- backlog, however long, costs the others' claims nothing; either way it
-- locks the jobs first and leases them by tuple id.
SELECT id::bigint AS id, event_id::bigint AS event_id, handler::text AS handler, provider::text AS provider,
       event_type::text AS event_type, attempt_count::integer AS attempt_count, max_attempts::integer AS max_attempts,
       lease_expires_at::timestamptz AS lease_expires_at, trace_parent::text AS trace_parent,
       event_received_at::timestamptz AS event_received_at, attempted_at::timestamptz AS attempted_at
FROM webhook_ingress.claim_jobs(sqlc.arg(full_handlers)::text[], sqlc.arg(batch_size)::bigint,
                                sqlc.arg(lease_holder)::text, sqlc.arg(lease_for)::interval,
                                sqlc.narg(claim_window)::interval);

-- name: ClaimHandlerJobs :many
-- Lease up to batch_size due jobs of one handler, as ClaimJobs leases (the
-- same order rules and per-key locks), over every partition: the streamer
-- claims each ordered handler apart from the others (ListOrderedHandlers),
-- so that a backlog its order holds back, which each of its claims walks
-- past, costs the other handlers' claims nothing
-- (031_claim_handler_jobs). Returns what ClaimJobs returns.
SELECT id::bigint AS id, event_id::bigint AS event_id, handler::text AS handler, provider::text AS provider,
       event_type::text AS event_type, attempt_count::integer AS attempt_count, max_attempts::integer AS max_attempts,
       lease_expires_at::timestamptz AS lease_expires_at, trace_parent::text AS trace_parent,
       event_received_at::timestamptz AS event_received_at, attempted_at::timestamptz AS attempted_at
FROM webhook_ingress.claim_handler_jobs(sqlc.arg(handler)::text, sqlc.arg(batch_size)::bigint,
                                        sqlc.arg(lease_holder)::text, sqlc.arg(lease_for)::interval);

-- name: ListOrderedHandlers :many
-- The handlers with an order key on any subscription, enabled or not (a
-- disabled subscription's jobs already created still run in order): the
-- streamers claim them apart (ClaimHandlerJobs).
SELECT DISTINCT handler FROM webhook_ingress.subscriptions WHERE order_key IS NOT NULL ORDER BY handler;

-- name: ReleaseUnseenJobs :execrows
-- Give back what a claim whose answer the streamer did not get (an error
-- after the statement may have committed: its deadline, a lost connection)
-- may have leased: lease_holder's leases of each of handlers taken after
-- its leased_after (the newest lease of that handler this process has seen
-- from any of its claims), that no consumer has extended. The streamer names
-- only the handlers the claim covered that it has a mark for: every lease it
-- published is at or before the mark. Without this they would wait a whole
-- lease for the reaper, which counts an attempt when a consumer of the
-- handler was alive: a job on its last attempt would be dead-lettered though
-- no handler saw it. As ReleaseJobs: pending at once, the attempt does not
-- count, locked in id order.
WITH marks AS (
    -- Two set-returning functions in one select list run in step: the
    -- handlers and their marks, pair by pair.
    SELECT unnest(sqlc.arg(handlers)::text[]) AS handler, unnest(sqlc.arg(leased_after)::timestamptz[]) AS after
), target AS (
    SELECT j.id FROM webhook_ingress.jobs j
    JOIN marks m ON m.handler = j.handler
    WHERE j.status = 'leased'
      AND j.lease_expires_at IS NOT NULL -- idx_jobs_leased
      AND j.lease_holder_id = sqlc.arg(lease_holder)::text
      AND j.worker_id IS NULL
      AND j.attempted_at > m.after
    ORDER BY j.id
    FOR UPDATE OF j
)
UPDATE webhook_ingress.jobs
SET status           = 'pending',
    attempt_count    = attempt_count - 1,
    lease_holder_id  = NULL,
    lease_expires_at = NULL,
    next_attempt_at  = least(next_attempt_at, now()), -- its due time kept (MonitorLag)
    updated_at       = now()
WHERE id = ANY(ARRAY(SELECT id FROM target))
  AND status = 'leased'
  AND lease_holder_id = sqlc.arg(lease_holder)::text;

-- name: CountLeasedJobs :many
-- Jobs leased now, per handler (by every streamer): the base of the
-- streamers' in-memory in-flight counts (reads the partial index of leases);
-- and the handlers whose known consumers have all gone quiet, to lease none
-- of their jobs until one is back (a handler with no consumer known, e.g.
-- one of an older version, is leased as usual).
-- unextended are those no consumer has extended yet (worker_id NULL):
-- references waiting in the bus, or attempts younger than an extension.
SELECT handler, count(*) AS leased, count(*) FILTER (WHERE worker_id IS NULL) AS unextended, false AS quiet
FROM webhook_ingress.jobs
WHERE lease_expires_at IS NOT NULL
  AND status = 'leased'
GROUP BY handler
UNION ALL
SELECT handler, 0, 0, true
FROM webhook_ingress.consumers
GROUP BY handler
HAVING max(alive_until) < now();

-- name: ReleaseJobs :exec
-- Give back leases whose references could not be published: pending again at
-- once, and the attempt does not count. If a reference went out before the
-- publish failed, its consumer's outcome is fenced out by the next lease.
-- Each lease is named by its token, attempt attempts[i] of job job_ids[i]
-- leased at leased_at[i], as well as by its holder: a give-back that runs
-- late (after the lease expired and the same streamer leased the job
-- again) must not give back the newer attempt, whose reference is out
-- (TestReleaseJobsGivesBackOnlyItsOwnAttempt).
--
-- The jobs are locked in id order first, as a consumer's batched completion
-- locks its jobs: in the order a scan of the partitions reaches them, this
-- could hold one job while waiting for a completion (of a reference that went
-- out) that waits for it (TestMultiJobStatementsLockInIDOrder).
WITH token AS (
    SELECT u.id, u.attempt, u.leased_at
    FROM ROWS FROM (unnest(sqlc.arg(job_ids)::bigint[]), unnest(sqlc.arg(attempts)::integer[]),
                    unnest(sqlc.arg(leased_at)::timestamptz[])) AS u(id, attempt, leased_at)
), target AS (
    SELECT j.id FROM webhook_ingress.jobs j
    JOIN token t ON t.id = j.id AND t.attempt = j.attempt_count AND t.leased_at = j.attempted_at
    WHERE j.id = ANY(sqlc.arg(job_ids)::bigint[])
      AND j.status = 'leased'
      AND j.lease_holder_id = sqlc.arg(lease_holder)::text
    ORDER BY j.id
    FOR UPDATE OF j
)
UPDATE webhook_ingress.jobs j
SET status           = 'pending',
    attempt_count    = j.attempt_count - 1,
    lease_holder_id  = NULL,
    lease_expires_at = NULL,
    next_attempt_at  = least(j.next_attempt_at, now()), -- its due time kept (MonitorLag)
    updated_at       = now()
FROM token t
WHERE j.id = ANY(ARRAY(SELECT id FROM target))
  AND t.id = j.id
  AND t.attempt = j.attempt_count
  AND t.leased_at = j.attempted_at
  AND j.status = 'leased'
  AND j.lease_holder_id = sqlc.arg(lease_holder)::text;

-- name: CountLeasedRoutedJobs :many
-- Jobs leased now of the handlers shared by consumer roles (ListJobRoutes),
-- per source and event type: the streamer maps each group to the topic its
-- references go to (a role's, by its scopes) and paces each topic by what
-- its own consumers finish, so a slow role's jobs are not leased at a fast
-- role's pace (review helper-173). unextended as in CountLeasedJobs.
-- counted_at is the time of the count's snapshot (one row with an empty
-- handler carries it when nothing is leased): a lease taken (attempted_at)
-- before it is counted here, a later one is not.
SELECT handler, provider, event_type, count(*) AS leased, count(*) FILTER (WHERE worker_id IS NULL) AS unextended,
       now()::timestamptz AS counted_at
FROM webhook_ingress.jobs
WHERE lease_expires_at IS NOT NULL
  AND status = 'leased'
  AND handler = ANY(sqlc.arg(handlers)::text[])
GROUP BY handler, provider, event_type
UNION ALL
SELECT '', '', '', 0, 0, now();

-- name: DeferJobs :exec
-- Give back leases, unpublished, as ReleaseJobs does (pending, the attempt
-- not counted, named by token and holder, locked in id order), each job
-- due again delays[i] after now() instead of at once: the references of a
-- routed handler beyond what their role's consumers start within half a
-- lease, due when that role is expected to have room for them. Claimed at
-- once again, a backlog of the slow role ahead in due order would be leased
-- and given back on every claim, and the other roles' jobs behind it never
-- reached. The delay is a duration, added here to the database's clock,
-- which every claim compares next_attempt_at with: a due time computed on
-- the streamer's clock was in the database's past when its clock ran ahead,
-- and the slow role's backlog was due again at once (review helper-270).
-- The job's due time moves, so the lag (MonitorLag) of a deferred job
-- counts from it. A rate-limited handler's claim (claim_limited_jobs)
-- took a token for each lease: a deferred lease gives it back (up to the
-- burst), or a slow role's backlog ahead in due order spent the rate on
-- leases given back, and the other roles' jobs behind it waited for it
-- (review helper-185).
WITH token AS (
    SELECT u.id, u.attempt, u.leased_at, u.delay
    FROM ROWS FROM (unnest(sqlc.arg(job_ids)::bigint[]), unnest(sqlc.arg(attempts)::integer[]),
                    unnest(sqlc.arg(leased_at)::timestamptz[]), unnest(sqlc.arg(delays)::interval[]))
         AS u(id, attempt, leased_at, delay)
), target AS (
    SELECT j.id FROM webhook_ingress.jobs j
    JOIN token t ON t.id = j.id AND t.attempt = j.attempt_count AND t.leased_at = j.attempted_at
    WHERE j.id = ANY(sqlc.arg(job_ids)::bigint[])
      AND j.status = 'leased'
      AND j.lease_holder_id = sqlc.arg(lease_holder)::text
    ORDER BY j.id
    FOR UPDATE OF j
), deferred AS (
    UPDATE webhook_ingress.jobs j
    SET status           = 'pending',
        attempt_count    = j.attempt_count - 1,
        lease_holder_id  = NULL,
        lease_expires_at = NULL,
        next_attempt_at  = greatest(j.next_attempt_at, now() + t.delay),
        updated_at       = now()
    FROM token t
    WHERE j.id = ANY(ARRAY(SELECT id FROM target))
      AND t.id = j.id
      AND t.attempt = j.attempt_count
      AND t.leased_at = j.attempted_at
      AND j.status = 'leased'
      AND j.lease_holder_id = sqlc.arg(lease_holder)::text
    RETURNING j.handler
), refund AS (
    UPDATE webhook_ingress.handler_limits l
    SET tokens = least(l.burst::float8, l.tokens + d.n)
    FROM (SELECT handler, count(*)::float8 AS n FROM deferred GROUP BY handler) d
    WHERE l.handler = d.handler
      AND l.rate_per_second IS NOT NULL
    RETURNING l.handler
)
SELECT count(*) FROM deferred;

-- name: ReapExpiredLeases :many
-- Leases that ran out without an outcome. Taking an attempt writes nothing,
-- so whether a handler ran is judged by who was there: when the attempt's
-- consumer extended the lease (worker_id), or a consumer that could have
-- received the job's reference was alive after the lease began, it may have
-- run the handler and died or hung: the attempt counts, is closed in
-- job_attempts as lease_expired, and the job goes back to pending, or to
-- dead_letter with reason lease_expired when that was the last attempt.
-- When no such consumer was alive (an outage), no handler ran: back to
-- pending and the attempt does not count. At most batch_size per call.
-- A consumer about to run a handler on a lease that began after its last
-- liveness write (ConsumerAlive's seen_at) writes it once more first, so
-- one that dies in the handler (a poison job that crashes its process,
-- restarting slower than the lease) was seen after the lease began and
-- the attempt counts: before, its last write always preceded the lease,
-- and the job was given back uncounted for ever (review helper-211).
--
-- Could have received it: a consumer of the handler of a version before 064
-- (db_role NULL: it reads the handler's topic), of an unrestricted role
-- (''), or of a scoped role one of whose scopes covers the job's source and
-- type (the LIKE forms, as 038's policies match them); or any consumer of
-- the handler when no role of its consumers given the handler covers the
-- job (not '' either), since the streamer then publishes it on the
-- handler's own topic, which every consumer reads (ListJobRoutes, topicOf).
-- claim_limited_jobs asks the same of the consumers alive now, before it
-- leases a job (076 receivable_scopes: judged once per claim, not per job).
-- A role is one of the handler's as ListJobRoutes' members say: '', or a
-- role that exists (pg_roles) and consumer_roles still gives the handler.
-- A role dropped by hand (DROP ROLE: its consumer_roles and scopes rows
-- stay, as 038 allows) is no longer routed to, but its ended consumer rows
-- still "covered" its jobs here: every expiry of a job only it covered was
-- judged an outage and given back uncounted, for a day (review helper-211).
-- Judged per handler, a routed handler's other role kept alive counted
-- every expiry of the jobs waiting on the topic of a role whose consumers
-- were all down, and dead-lettered them unrun (review helper-205). Only
-- expired leases are looked at, each against its handler's few consumer
-- rows and their roles' scopes.
--
-- The streamer may not read error texts (036_streamer_no_error_text): the
-- reason is composed from the lease's columns, the attempts that ran and
-- those that did not are updated apart (a job that did not run keeps its
-- last error untouched), and the history row takes the reason composed.
--
-- An attempt that ran and expired is a failure of its handler's circuit
-- breaker, counted as HandlerFailed counts a consumer's (073
-- count_expired_attempts: one more consecutive failure each, the circuit
-- open at breaker_failures, an expired half-open probe opens it again): a
-- poison event that hangs its handler or kills its consumer never reports,
-- and its handler was fed until every job was dead-lettered (review
-- helper-273). A lease given back unrun counts nothing: no handler ran.
-- circuit_opened says that this reap opened the job's handler's circuit
-- (the streamer logs it once).
WITH expired AS (
    SELECT j.id, j.event_received_at, j.worker_id,
           (j.worker_id IS NOT NULL OR EXISTS (
               SELECT 1 FROM webhook_ingress.consumers c
               WHERE c.handler = j.handler AND c.seen_at >= j.attempted_at
                 AND (c.db_role IS NULL OR c.db_role = ''
                      OR (EXISTS (SELECT FROM webhook_ingress.consumer_roles r
                                  WHERE r.handler = j.handler AND r.role_name = c.db_role)
                          AND EXISTS (SELECT FROM pg_catalog.pg_roles a WHERE a.rolname = c.db_role)
                          AND EXISTS (SELECT FROM webhook_ingress.consumer_role_scopes s
                                      WHERE s.role_name = c.db_role
                                        AND j.provider LIKE s.provider_like AND j.event_type LIKE s.event_type_like))
                      OR NOT EXISTS (SELECT FROM webhook_ingress.consumers o
                                     WHERE o.handler = j.handler
                                       AND (o.db_role = ''
                                            OR (EXISTS (SELECT FROM webhook_ingress.consumer_roles r
                                                        WHERE r.handler = j.handler AND r.role_name = o.db_role)
                                                AND EXISTS (SELECT FROM pg_catalog.pg_roles a WHERE a.rolname = o.db_role)
                                                AND EXISTS (SELECT FROM webhook_ingress.consumer_role_scopes s
                                                            WHERE s.role_name = o.db_role
                                                              AND j.provider LIKE s.provider_like
                                                              AND j.event_type LIKE s.event_type_like))))))) AS ran,
           'attempt ' || j.attempt_count || ' leased at ' || j.attempted_at || ' expired at ' || j.lease_expires_at
               || ' without an outcome (its consumer died or hung, or the reference was lost)' AS reason
    FROM webhook_ingress.jobs j
    WHERE j.lease_expires_at < now()
      AND j.status = 'leased'
    ORDER BY j.lease_expires_at
    LIMIT sqlc.arg(batch_size)::bigint
    FOR UPDATE OF j SKIP LOCKED
), ran AS (
    UPDATE webhook_ingress.jobs j
    SET status           = CASE WHEN j.attempt_count >= j.max_attempts THEN 'dead_letter' ELSE 'pending' END,
        lease_holder_id  = NULL,
        lease_expires_at = NULL,
        worker_id        = NULL,
        next_attempt_at  = least(j.next_attempt_at, now()),
        last_error_class = 'lease_expired',
        last_error       = e.reason,
        updated_at       = now()
    FROM expired e
    WHERE j.id = e.id
      AND j.event_received_at = e.event_received_at
      AND e.ran
    RETURNING j.id, j.event_received_at, j.status, e.worker_id, j.attempt_count AS attempt, j.attempted_at, e.reason, j.handler,
              j.provider, j.event_type
), idle AS (
    UPDATE webhook_ingress.jobs j
    SET status           = 'pending',
        attempt_count    = j.attempt_count - 1,
        lease_holder_id  = NULL,
        lease_expires_at = NULL,
        worker_id        = NULL,
        next_attempt_at  = least(j.next_attempt_at, now()),
        updated_at       = now()
    FROM expired e
    WHERE j.id = e.id
      AND j.event_received_at = e.event_received_at
      AND NOT e.ran
    RETURNING j.id, j.status, j.handler, j.provider, j.event_type
), history AS (
    INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, outcome, error_class, error)
    SELECT id, event_received_at, attempt, worker_id, coalesce(attempted_at, now()), 'lease_expired', 'lease_expired', reason
    FROM ran
), breaker AS MATERIALIZED (
    -- Called once, and only when an attempt that ran expired (STRICT: a
    -- NULL list calls nothing).
    SELECT b.handler, b.was <> 'open' AND b.circuit = 'open' AS opened
    FROM webhook_ingress.count_expired_attempts((SELECT array_agg(r.handler) FROM ran r)) AS b
)
SELECT r.id, r.status, r.handler, r.provider, r.event_type,
       coalesce((SELECT b.opened FROM breaker b WHERE b.handler = r.handler), false)::boolean AS circuit_opened
FROM ran r
UNION ALL
SELECT i.id, i.status, i.handler, i.provider, i.event_type, false AS circuit_opened FROM idle i;

-- name: FetchJobs :many
-- The consumer's read of a batch of references, writing nothing: attempt
-- $2[i] of job $1[i] (handler $3[i], event $4[i], in the partition of $5[i])
-- leased at $6[i] (NULL: a reference from before the token was sent; the
-- job's own lease time is used). A row only for a reference whose lease is
-- still current (its outcome could be recorded): a stale, finished or
-- misrouted one gets none. With the job's lease time and expiry, now() (the
-- attempt's start on the database's clock) and the event (NULL columns: the
-- event is gone). Each job and event is probed by its primary key, partition
-- key included (LATERAL … LIMIT 1): a join left to the planner read every
-- lease, or every event sharing a received_at, when statistics were stale.
--
-- The statement runs in webhook_ingress.fetch_jobs (022_protocol_functions),
-- on a generic plan: planned once per session instead of on every call.
-- It bounds the partition key by the batch's least and greatest received_at,
-- so the plan starts the scans of those partitions only (023_protocol_window).
SELECT job_id, attempted_at, lease_expires_at, max_attempts, started_at, event_id, provider, scheme,
       external_event_id, event_type, received_at, headers, raw_body, occurred_at
FROM webhook_ingress.fetch_jobs($1::bigint[], $2::integer[], $3::text[], $4::bigint[], $5::timestamptz[], $6::timestamptz[]);

-- name: ExtendLease :one
-- Consumer $5 pushes the lease of attempt $2 of job $1, leased at $4, out to
-- now() + $3 (a long handler's lease extension, or a reference that waited in the
-- bus), and is recorded as the attempt's consumer. No row: the lease was
-- lost.
UPDATE webhook_ingress.jobs
SET lease_expires_at = greatest(lease_expires_at, now() + $3::interval),
    worker_id        = $5,
    updated_at       = now()
WHERE id = $1
  AND status = 'leased'
  AND attempt_count = $2
  AND attempted_at = $4
RETURNING lease_expires_at;

-- name: CompleteJobs :many
-- A batch of successful attempts, in one statement: attempt $2[i] of job
-- $1[i] (in the partition of $3[i], leased at $4[i]) succeeded on consumer
-- $5. Fenced on the lease token, so a consumer whose lease was reaped or
-- replayed cannot overwrite a newer attempt. The success stays on the row:
-- attempt_count, worker_id, completed_at, and an attempt id from
-- job_attempts' sequence (no history row). Returns the ids completed; an id
-- missing lost its lease.
--
-- Each row is found by its primary key (LATERAL … LIMIT 1) and updated by
-- its tuple id in its partition: a join left to the planner seq-scanned the
-- partition for every batch when statistics were stale (a new period, or
-- leases rare when last analyzed). A row changed since it was found (the
-- reaper took the lease) has a new tuple id and is left alone, and the
-- fence is checked again on the row updated.
--
-- The statement runs in webhook_ingress.complete_jobs (022_protocol_functions),
-- on a generic plan: planned once per session instead of on every call.
-- It bounds the partition key by the batch's least and greatest received_at,
-- so the plan starts the scans of those partitions only (023_protocol_window).
SELECT id::bigint AS id
FROM webhook_ingress.complete_jobs($1::bigint[], $2::integer[], $3::timestamptz[], $4::timestamptz[], $5::text);

-- name: FailJob :one
-- Attempt $2 of job $1, leased at $7, failed on consumer $8 with error $3 of
-- class $4. Retried $5 (an interval, on the database's clock) from now unless
-- attempts are spent or $6 (permanent) is true: then dead_letter. Fenced as
-- CompleteJobs; its history row is InsertAttempt, in the same transaction.
UPDATE webhook_ingress.jobs
SET status           = CASE WHEN $6::boolean OR attempt_count >= max_attempts THEN 'dead_letter' ELSE 'failed' END,
    next_attempt_at  = now() + $5::interval,
    lease_holder_id  = NULL,
    lease_expires_at = NULL,
    worker_id        = $8,
    last_error       = $3,
    last_error_class = $4,
    updated_at       = now()
WHERE id = $1
  AND status = 'leased'
  AND attempt_count = $2
  AND attempted_at = $7
RETURNING status;

-- name: InsertAttempt :execrows
-- History row of one failed attempt, in the partition of its job.
INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome, error_class, error)
SELECT j.id, j.event_received_at, $2, $3, $4, now(), $5, $6, $7
FROM webhook_ingress.jobs j
WHERE j.id = $1;

-- name: GiveBackAttempt :one
-- A consumer's forced stop (Stop's deadline passed) cut attempt $3 of job $1
-- (in the partition of $2, leased at $4) short: give the lease back so the
-- attempt does not count, as ReleaseJobs does for an unpublished reference.
-- Pending again at once. Fenced on the lease token: false when the lease was
-- meanwhile lost, reaped, finished or replayed. Runs in
-- webhook_ingress.give_back_attempt (029_give_back_attempt) with the owner's
-- rights, since consumer roles may not update attempt_count; it refuses a
-- consumer role another role's handlers' jobs.
SELECT webhook_ingress.give_back_attempt(sqlc.arg(job_id)::bigint, sqlc.arg(event_received_at)::timestamptz,
                                         sqlc.arg(attempt)::integer, sqlc.arg(leased_at)::timestamptz)::boolean AS given_back;

-- name: ConsumerDBRole :one
-- The scoped consumer role the session runs as (a member of
-- webhook_consumer, neither superuser nor BYPASSRLS), or '' for an
-- unrestricted one: a service's consumers read their handlers' topics for
-- that role too (bus.RoleTopic; bus.UnscopedRole for ''), and ConsumerAlive
-- says the same role (ListJobRoutes).
SELECT coalesce((SELECT a.rolname::text FROM pg_catalog.pg_roles a
                 WHERE a.rolname = current_user AND NOT (a.rolsuper OR a.rolbypassrls)
                   AND pg_catalog.pg_has_role(a.oid, 'webhook_consumer', 'USAGE')), '')::text AS db_role;

-- name: ListJobRoutes :many
-- The routes of each handler shared by consumers of different roles, as
-- their consumers say (ConsumerAlive's db_role, rows of the last day): a
-- scoped role's name, '' for an unrestricted one (webhook_worker), NULL for
-- a consumer of a version before 064 (not counted). A handler is routed when
-- it has two such roles or more, one of them scoped, and no live consumer
-- of a version before 064 (it reads only the handler's own topic: routed
-- during a rolling upgrade, a job whose role's new consumers had stopped
-- went to a topic nobody read while the old consumer idled, and was
-- dead-lettered unrun; review helper-205); a role dropped, or no longer
-- given the handler, is left out. Each route is a scope (an
-- unrestricted role's is '*', '*'), in the order the streamer tries them:
-- roles with a live consumer first (alive_until ahead), scoped before
-- unrestricted, then by name; it publishes a job on the topic of the first
-- route whose globs cover its source and type, and on the handler's own
-- topic when none does.
WITH members AS (
    SELECT c.handler, c.db_role AS role_name, bool_or(c.alive_until > now()) AS alive
    FROM webhook_ingress.consumers c
    WHERE c.db_role = ''
       OR (EXISTS (SELECT FROM webhook_ingress.consumer_roles r WHERE r.handler = c.handler AND r.role_name = c.db_role)
           AND EXISTS (SELECT FROM pg_catalog.pg_roles a WHERE a.rolname = c.db_role))
    GROUP BY c.handler, c.db_role
), routed AS (
    SELECT m.handler FROM members m
    WHERE NOT EXISTS (SELECT FROM webhook_ingress.consumers o
                      WHERE o.handler = m.handler AND o.db_role IS NULL AND o.alive_until > now())
    GROUP BY m.handler HAVING count(*) >= 2 AND bool_or(m.role_name <> '')
), routes AS (
    SELECT m.handler, m.role_name, m.alive, s.provider_pattern, s.event_type_pattern
    FROM members m
    JOIN routed d ON d.handler = m.handler
    JOIN webhook_ingress.consumer_role_scopes s ON s.role_name = m.role_name
    UNION ALL
    SELECT m.handler, m.role_name, m.alive, '*', '*'
    FROM members m
    JOIN routed d ON d.handler = m.handler
    WHERE m.role_name = ''
)
SELECT handler::text AS handler, role_name::text AS role_name, alive::boolean AS alive,
       provider_pattern::text AS provider_pattern, event_type_pattern::text AS event_type_pattern
FROM routes
ORDER BY handler, NOT alive, role_name = '', role_name, provider_pattern, event_type_pattern;

-- name: ConsumerAlive :many
-- Consumer $1 is alive for handlers $2 until now() + $3, saying the scoped
-- role it runs as (db_role; '' for an unrestricted one: ConsumerDBRole);
-- rows of its handlers not heard from for a day are removed. It returns the
-- rows written with their seen_at, the database time up to which the
-- reaper counts this consumer's leases (ReapExpiredLeases): the consumer
-- says alive again before it runs a handler on a lease that began later.
-- seen_at is 250 ms ahead, so one write covers the leases of the next
-- 250 ms: a write per claim batch cost ~5 % of jobs/s on the burn-down
-- (review helper-211). The trade: a lease taken in those 250 ms and
-- never received, its consumer dead, counts as an attempt when it expires,
-- as one taken just before the write always did. A consumer of a scoped
-- role says ConsumerAliveScoped instead.
WITH gone AS (
    DELETE FROM webhook_ingress.consumers
    WHERE handler = ANY ($2::text[])
      AND alive_until < now() - interval '1 day'
), me AS (
    SELECT coalesce((SELECT a.rolname::text FROM pg_catalog.pg_roles a
                     WHERE a.rolname = current_user AND NOT (a.rolsuper OR a.rolbypassrls)
                       AND pg_catalog.pg_has_role(a.oid, 'webhook_consumer', 'USAGE')), '') AS db_role
)
INSERT INTO webhook_ingress.consumers (handler, worker_id, seen_at, alive_until, db_role)
SELECT h, $1, now() + interval '250 milliseconds', now() + $3::interval, me.db_role
FROM unnest($2::text[]) AS h, me
ON CONFLICT (handler, worker_id) DO UPDATE
SET seen_at = excluded.seen_at, alive_until = excluded.alive_until, db_role = excluded.db_role
RETURNING handler::text AS handler, seen_at;

-- name: ConsumerAliveScoped :many
-- ConsumerAlive for a consumer of a scoped role (ConsumerDBRole not ''):
-- it writes only the handlers of $2 that consumer_roles still gives the
-- role, which 011's consumer_own_handlers policy would refuse otherwise.
-- One statement for all of them failed as soon as an operator took one
-- handler away from a running role, and the liveness of the handlers it
-- kept ran out: none of their jobs was leased (review helper-211). A
-- handler of $2 missing from the rows returned is no longer the role's.
-- seen_at 250 ms ahead, as ConsumerAlive.
-- A statement of its own: webhook_worker may not read consumer_roles.
WITH gone AS (
    DELETE FROM webhook_ingress.consumers
    WHERE handler = ANY ($2::text[])
      AND alive_until < now() - interval '1 day'
), me AS (
    SELECT coalesce((SELECT a.rolname::text FROM pg_catalog.pg_roles a
                     WHERE a.rolname = current_user AND NOT (a.rolsuper OR a.rolbypassrls)
                       AND pg_catalog.pg_has_role(a.oid, 'webhook_consumer', 'USAGE')), '') AS db_role
)
INSERT INTO webhook_ingress.consumers (handler, worker_id, seen_at, alive_until, db_role)
SELECT h, $1, now() + interval '250 milliseconds', now() + $3::interval, me.db_role
FROM unnest($2::text[]) AS h, me
WHERE h IN (SELECT r.handler FROM webhook_ingress.consumer_roles r WHERE r.role_name = current_user)
ON CONFLICT (handler, worker_id) DO UPDATE
SET seen_at = excluded.seen_at, alive_until = excluded.alive_until, db_role = excluded.db_role
RETURNING handler::text AS handler, seen_at;

-- name: ConsumerDraining :execrows
-- Consumer $1 stopped reading its topics and drains its attempts: no longer
-- alive for handlers $2 (streamers route it nothing and lease nothing of a
-- handler it alone runs), seen now and not again, so the reaper counts the
-- attempts it took before (and those it extends: worker_id), not leases
-- taken after it stopped reading (review helper-175). now(), not the
-- greatest with seen_at: ConsumerAlive's seen_at is ahead of its write, and
-- leases taken in that margin after the consumer stopped reading must not
-- count.
UPDATE webhook_ingress.consumers
SET seen_at = now(), alive_until = least(alive_until, now())
WHERE worker_id = $1
  AND handler = ANY ($2::text[]);

-- name: ConsumerGone :execrows
-- Consumer $1 stopped: it is no longer alive for handlers $2. The row stays,
-- ended (alive_until just past, seen_at -infinity), so a handler whose
-- consumers all stopped is quiet at once and nothing of it is leased (a
-- deleted row left the handler with no consumer known, which is leased as
-- usual: review helper-87); and the reaper judges leases of that time as it
-- did with no row, not run by it (its unstarted leases were given back,
-- its running attempts finished). ConsumerAlive's cleanup removes it a day
-- later, or the consumer's next start takes it over.
UPDATE webhook_ingress.consumers
SET seen_at = '-infinity', alive_until = now() - interval '1 microsecond'
WHERE worker_id = $1
  AND handler = ANY ($2::text[]);
