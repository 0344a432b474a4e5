-- Queries of the operator tools (package admin: inlet events|dlq|replay and
-- the admin HTTP API), run as webhook_operator. Optional filters are written
-- ($n::text = '' OR col = $n) / ($n::timestamptz IS NULL OR ...); admin sets
-- plan_cache_mode = force_custom_plan in its transactions so each run is
-- planned for the filters actually given. Pages are keyset on id, newest
-- first: $before = 0 starts at the newest row. Event type filters are LIKE
-- patterns made from a glob by admin (the subscriptions' escaping).

-- name: AdminListEvents :many
-- Event metadata (never the body) with each job's handler and status.
-- provider provider, event_type_like event type LIKE pattern, since since (inclusive), until until
-- (exclusive), external_event_id external event id, before_id before id, page_size limit, occurred_after occurred
-- after (inclusive), occurred_before occurred before (exclusive), where_path a JSON path
-- predicate over payload ('' none; --where). where_path is a bound parameter, cast
-- to jsonpath by PostgreSQL (a bad path is its syntax error, never SQL), and
-- with the custom plan admin forces it is a constant the planner gives to
-- idx_events_payload (GIN jsonb_path_ops answers @@). Events without a
-- payload never match a path.
-- snapshot, settled_before, xid_base: a later page of one listing shows
-- only the rows visible in its first page's snapshot (snapshot, pg_snapshot
-- text; '' none), so that all its pages are the log at one moment: ids are
-- drawn before commit and ingress commits through several transactions, so
-- an id below the cursor may commit after the first page was read, and
-- paging on id alone showed it or not depending on the page. A row is
-- judged by the transaction that inserted it: inserted_xid (070), 64 bits
-- and the top-level transaction's, exact whatever the row's age. Not by
-- xmin: inlet backfill stored UPDATEs a row (occurred_at, payload), and the
-- new version's xmin is the backfill's transaction, which the first page's
-- snapshot does not see (review helper-216). A row stored before 070
-- (inserted_xid NULL) is judged by its xmin as before (one of those the
-- backfill fills between two pages, received within the hour before the
-- first, is still missed): xmin is 32 bits (the partition's own row),
-- widened to xid8 from xid_base (this transaction's pg_snapshot_xmax: every
-- row it can see has a smaller one, and an unfrozen one within 2^31 of
-- it). A frozen row keeps its raw xmin,
-- which may be of an older epoch, so only such rows received at or after
-- settled_before (an hour before the first page; received_at is the
-- inserting transaction's now(), and no insert runs that long) are judged:
-- older ones were committed then. A pg_snapshot does not list
-- subtransactions, so such a row inserted under a SAVEPOINT would be judged
-- by its subxid, wrongly: no write path inserts events under one.
SELECT e.id, e.provider, e.scheme, e.external_event_id, e.event_type, e.received_at,
       e.signature_verified, e.secret_index, octet_length(e.raw_body) AS body_size, e.body_sha256, e.occurred_at,
       coalesce(j.handlers, '{}')::text[] AS handlers, coalesce(j.statuses, '{}')::text[] AS statuses
FROM webhook_ingress.events e
LEFT JOIN LATERAL (
    SELECT array_agg(handler ORDER BY handler) AS handlers, array_agg(status ORDER BY handler) AS statuses
    FROM webhook_ingress.jobs
    WHERE event_id = e.id
) j ON true
WHERE (sqlc.arg(provider)::text = '' OR e.provider = sqlc.arg(provider))
  AND (sqlc.arg(event_type_like)::text = '' OR e.event_type LIKE sqlc.arg(event_type_like))
  AND (sqlc.narg(since)::timestamptz IS NULL OR e.received_at >= sqlc.narg(since))
  AND (sqlc.narg(until)::timestamptz IS NULL OR e.received_at < sqlc.narg(until))
  AND (sqlc.arg(external_event_id)::text = '' OR e.external_event_id = sqlc.arg(external_event_id))
  AND (sqlc.arg(before_id)::bigint = 0 OR e.id < sqlc.arg(before_id))
  AND (sqlc.narg(occurred_after)::timestamptz IS NULL OR e.occurred_at >= sqlc.narg(occurred_after))
  AND (sqlc.narg(occurred_before)::timestamptz IS NULL OR e.occurred_at < sqlc.narg(occurred_before))
  AND (sqlc.arg(where_path)::text = '' OR e.payload @@ sqlc.arg(where_path)::jsonpath)
  AND (sqlc.arg(snapshot)::text = ''
       OR e.inserted_xid IS NOT NULL
          AND pg_catalog.pg_visible_in_snapshot(e.inserted_xid, nullif(sqlc.arg(snapshot)::text, '')::pg_catalog.pg_snapshot)
       OR e.inserted_xid IS NULL
          AND (e.received_at < sqlc.narg(settled_before)::timestamptz
               OR pg_catalog.pg_visible_in_snapshot(
                      (sqlc.arg(xid_base)::bigint - ((sqlc.arg(xid_base)::bigint - e.xmin::text::bigint) & 4294967295))::text::pg_catalog.xid8,
                      nullif(sqlc.arg(snapshot)::text, '')::pg_catalog.pg_snapshot)))
ORDER BY e.id DESC
LIMIT sqlc.arg(page_size)::bigint;

-- name: AdminSnapshot :one
-- The snapshot this transaction reads in (admin's are REPEATABLE READ: one
-- for all its statements) and when it began: a listing's first page takes
-- them into its cursor, and every page widens the xmin of a row stored
-- before 070 from the snapshot's xmax (AdminListEvents). pg_snapshot text
-- is xmin:xmax:xip,… of 64-bit ids.
SELECT pg_catalog.pg_current_snapshot()::text AS snapshot, transaction_timestamp()::timestamptz AS taken_at;

-- name: AdminListEventsWhere :many
-- AdminListEvents with a --where path (where_path, never ''), same parameters
-- and columns (a later page's snapshot as there). The matches are found
-- first through idx_events_payload and only then sorted: left to itself, the planner estimates a path matches 1 % of
-- the rows and walks the id index backwards testing every payload (4.8 s
-- over 1 M events for a customer's 10; bench -only payload). A path that
-- matches most of the log reads all its matches; narrow it with --since.
WITH matched AS MATERIALIZED (
    SELECT e.id, e.provider, e.scheme, e.external_event_id, e.event_type, e.received_at,
           e.signature_verified, e.secret_index, octet_length(e.raw_body) AS body_size, e.body_sha256, e.occurred_at
    FROM webhook_ingress.events e
    WHERE e.payload @@ sqlc.arg(where_path)::text::jsonpath
      AND (sqlc.arg(provider)::text = '' OR e.provider = sqlc.arg(provider))
      AND (sqlc.arg(event_type_like)::text = '' OR e.event_type LIKE sqlc.arg(event_type_like))
      AND (sqlc.narg(since)::timestamptz IS NULL OR e.received_at >= sqlc.narg(since))
      AND (sqlc.narg(until)::timestamptz IS NULL OR e.received_at < sqlc.narg(until))
      AND (sqlc.arg(external_event_id)::text = '' OR e.external_event_id = sqlc.arg(external_event_id))
      AND (sqlc.arg(before_id)::bigint = 0 OR e.id < sqlc.arg(before_id))
      AND (sqlc.narg(occurred_after)::timestamptz IS NULL OR e.occurred_at >= sqlc.narg(occurred_after))
      AND (sqlc.narg(occurred_before)::timestamptz IS NULL OR e.occurred_at < sqlc.narg(occurred_before))
      AND (sqlc.arg(snapshot)::text = ''
           OR e.inserted_xid IS NOT NULL
              AND pg_catalog.pg_visible_in_snapshot(e.inserted_xid, nullif(sqlc.arg(snapshot)::text, '')::pg_catalog.pg_snapshot)
           OR e.inserted_xid IS NULL
              AND (e.received_at < sqlc.narg(settled_before)::timestamptz
                   OR pg_catalog.pg_visible_in_snapshot(
                          (sqlc.arg(xid_base)::bigint - ((sqlc.arg(xid_base)::bigint - e.xmin::text::bigint) & 4294967295))::text::pg_catalog.xid8,
                          nullif(sqlc.arg(snapshot)::text, '')::pg_catalog.pg_snapshot)))
), page AS (
    SELECT id, provider, scheme, external_event_id, event_type, received_at, signature_verified, secret_index, body_size,
           body_sha256, occurred_at
    FROM matched ORDER BY id DESC LIMIT sqlc.arg(page_size)::bigint
)
SELECT e.id, e.provider, e.scheme, e.external_event_id, e.event_type, e.received_at,
       e.signature_verified, e.secret_index, e.body_size, e.body_sha256, e.occurred_at,
       coalesce(j.handlers, '{}')::text[] AS handlers, coalesce(j.statuses, '{}')::text[] AS statuses
FROM page e
LEFT JOIN LATERAL (
    SELECT array_agg(handler ORDER BY handler) AS handlers, array_agg(status ORDER BY handler) AS statuses
    FROM webhook_ingress.jobs
    WHERE event_id = e.id
) j ON true
ORDER BY e.id DESC;

-- name: AdminGetEvent :one
-- One event whole: metadata, headers, request URI and the exact stored bytes.
SELECT id, provider, scheme, external_event_id, event_type, received_at,
       signature_verified, secret_index, octet_length(raw_body) AS body_size, body_sha256, occurred_at,
       headers, request_uri, raw_body, (payload IS NOT NULL)::boolean AS has_payload
FROM webhook_ingress.events
WHERE id = $1;

-- name: AdminEventJobs :many
-- Every job of event $1, one per handler.
SELECT id, event_id, handler, provider, event_type, status, attempt_count, max_attempts,
       next_attempt_at, lease_holder_id, lease_expires_at, attempted_at, worker_id,
       last_error, last_error_class, created_at, updated_at, completed_at
FROM webhook_ingress.jobs
WHERE event_id = $1
ORDER BY handler;

-- name: AdminGetJob :one
-- One job with its event's metadata (not its body or headers).
SELECT j.id, j.event_id, j.handler, j.provider, j.event_type, j.status, j.attempt_count, j.max_attempts,
       j.next_attempt_at, j.lease_holder_id, j.lease_expires_at, j.attempted_at, j.worker_id,
       j.last_error, j.last_error_class, j.created_at, j.updated_at, j.completed_at,
       e.id AS e_id, e.provider AS e_provider, e.scheme AS e_scheme, e.external_event_id AS e_external_event_id,
       e.event_type AS e_event_type, e.received_at AS e_received_at, e.signature_verified AS e_signature_verified,
       e.secret_index AS e_secret_index, octet_length(e.raw_body) AS e_body_size, e.body_sha256 AS e_body_sha256,
       e.occurred_at AS e_occurred_at
FROM webhook_ingress.jobs j
JOIN webhook_ingress.events e ON e.id = j.event_id
WHERE j.id = $1;

-- name: AdminJobAttempts :many
-- The attempt history (and replay markers) of jobs job_ids, in the order written.
-- Through the view attempts (010_lease_token): job_attempts' rows and each
-- job's successful attempt, which stays on its job row (attempt number,
-- consumer, lease time as start, completion time) until a replay archives
-- it. One id space, so ordering by id is the order the attempts finished.
SELECT id, job_id, attempt, worker_id, started_at, finished_at, outcome, error_class, error, duration_ms::float8 AS duration_ms
FROM webhook_ingress.attempts
WHERE job_id = ANY(sqlc.arg(job_ids)::bigint[])
ORDER BY job_id, id;

-- name: AdminListDeadLetters :many
-- Dead-lettered jobs with their event's metadata; the time range is when the
-- job was dead-lettered (updated_at). Error class only: the text is in
-- AdminGetJob. handler handler, provider provider, error_class error class, since since, until until,
-- before_id before job id, page_size limit. An ordered handler's dead
-- letter (019_order_key) names its key and, under order_policy block, how
-- many later jobs of that key it holds back until it is replayed (its
-- unfinished jobs, 020_order_lanes). The policy is the one the claims
-- obey, from the handler's enabled subscriptions (order_skips_dead,
-- 027_order_policy_enabled). replays is how many times the job was replayed
-- (its replay markers, as AdminJobReplays counts them): the version the
-- dashboard's Replay button sends back, so a dead letter replayed and
-- dead-lettered again meanwhile is not replayed from a stale page.
SELECT j.id, j.event_id, j.handler, j.provider, j.event_type, j.attempt_count, j.max_attempts,
       coalesce(j.last_error_class, ''), j.updated_at, e.external_event_id, e.received_at,
       j.order_key,
       CASE WHEN j.order_key IS NULL OR webhook_ingress.order_skips_dead(j.handler)
            THEN 0
            ELSE (SELECT count(*) FROM webhook_ingress.order_lanes l
                  WHERE l.handler = j.handler AND l.order_key = j.order_key
                    AND (l.order_at, l.job_id) > (j.order_at, j.id))
       END::bigint AS holding,
       (SELECT count(*) FROM webhook_ingress.job_attempts a
        WHERE a.job_id = j.id AND a.event_received_at = j.event_received_at AND a.outcome = 'replayed') AS replays
FROM webhook_ingress.jobs j
JOIN webhook_ingress.events e ON e.id = j.event_id
WHERE j.status = 'dead_letter'
  AND (sqlc.arg(handler)::text = '' OR j.handler = sqlc.arg(handler))
  AND (sqlc.arg(provider)::text = '' OR j.provider = sqlc.arg(provider))
  AND (sqlc.arg(error_class)::text = '' OR j.last_error_class = sqlc.arg(error_class))
  AND (sqlc.narg(since)::timestamptz IS NULL OR j.updated_at >= sqlc.narg(since))
  AND (sqlc.narg(until)::timestamptz IS NULL OR j.updated_at < sqlc.narg(until))
  AND (sqlc.arg(before_id)::bigint = 0 OR j.id < sqlc.arg(before_id))
ORDER BY j.id DESC
LIMIT sqlc.arg(page_size)::bigint;

-- name: AdminEventUnsigned :one
-- Whether event id is stored without a signature (backfilled from the
-- provider's API, or stored by reconcile): AdminEventsToVerify leaves it out.
SELECT EXISTS (SELECT 1 FROM webhook_ingress.events WHERE id = sqlc.arg(id)::bigint AND NOT signature_verified);

-- name: AdminEventsToVerify :many
-- What re-verification reads, oldest first after id after_id: event
-- event_id alone, or every event of provider provider ('' any) received in
-- [since, until). Events stored without a signature (backfilled from a
-- provider's API) have none to re-check and are left out.
-- A page is at most batch_size rows, cut before the first row whose body and
-- headers take the page past batch_bytes (the first row always stays), so
-- the admin API holds a bounded number of bytes inside the ingress process
-- whatever the bodies' size. A body counts its stored length (octet_length
-- reads it without detoasting); headers count their JSON text, what the
-- reader receives and decodes (octet_length(headers::text): at most twice
-- ingress's 32 KiB of headers, which compress to a few hundred bytes when
-- repetitive, so their stored size undercounted them). page_rows is how
-- many rows the page had before the cut: the reader goes on after the last
-- row returned while the page was full (batch_size) or cut.
WITH page AS (
    SELECT id, provider, scheme, external_event_id, event_type, headers, request_uri, raw_body
    FROM webhook_ingress.events
    WHERE signature_verified
      AND (sqlc.arg(event_id)::bigint = 0 OR id = sqlc.arg(event_id))
      AND (sqlc.arg(provider)::text = '' OR provider = sqlc.arg(provider))
      AND (sqlc.narg(since)::timestamptz IS NULL OR received_at >= sqlc.narg(since))
      AND (sqlc.narg(until)::timestamptz IS NULL OR received_at < sqlc.narg(until))
      AND id > sqlc.arg(after_id)
    ORDER BY id
    LIMIT sqlc.arg(batch_size)::bigint
), sized AS (
    SELECT id, provider, scheme, external_event_id, event_type, headers, request_uri, raw_body,
           sum(octet_length(raw_body) + octet_length(headers::text)) OVER (ORDER BY id ROWS UNBOUNDED PRECEDING)
             - (octet_length(raw_body) + octet_length(headers::text)) AS bytes_before,
           count(*) OVER () AS page_rows
    FROM page
)
SELECT id, provider, scheme, external_event_id, event_type, headers, request_uri, raw_body, page_rows::bigint AS page_rows
FROM sized
WHERE bytes_before < sqlc.arg(batch_bytes)::bigint
ORDER BY id;

-- name: AdminLockJob :one
-- The job a single replay is about, locked until the replay commits; its
-- event_received_at finds its replay markers (AdminJobReplays).
SELECT status, event_received_at FROM webhook_ingress.jobs WHERE id = $1 FOR UPDATE;

-- name: AdminJobReplays :one
-- How many times job job_id was replayed: its replay markers (outcome
-- 'replayed', one per replay, AdminRequeueJobs). The job's version a single
-- replay's expected count is checked against: unlike its status, it changes
-- on every replay, so a completed job replayed and completed again
-- meanwhile (or a dead letter replayed and dead-lettered again) no longer
-- matches the count the page was rendered with. Read after AdminLockJob, in
-- a statement of its own: in READ COMMITTED its snapshot is taken after the
-- lock was granted, so it holds the marker of every replay committed
-- before (a subquery of AdminLockJob would read the snapshot taken before
-- its wait), and no other replay can add one while the lock is held.
-- event_received_at (the job's) reads one partition of job_attempts.
SELECT count(*) FROM webhook_ingress.job_attempts
WHERE job_id = sqlc.arg(job_id) AND event_received_at = sqlc.arg(event_received_at) AND outcome = 'replayed';

-- name: AdminHandlerKnown :one
-- Does handler handler have an enabled subscription, and any job at all?
SELECT EXISTS (SELECT 1 FROM webhook_ingress.subscriptions s WHERE s.handler = sqlc.arg(handler) AND s.enabled) AS subscribed,
       EXISTS (SELECT 1 FROM webhook_ingress.jobs j WHERE j.handler = sqlc.arg(handler)) AS has_jobs;

-- name: AdminSourceKnown :one
-- Has source provider stored any event (one probe of
-- idx_events_provider_received_at per partition)?
SELECT EXISTS (SELECT 1 FROM webhook_ingress.events e WHERE e.provider = sqlc.arg(provider)) AS known;

-- name: AdminCountDeadLetters :one
-- How many dead letters of handler handler a replay would re-queue.
SELECT count(*) FROM webhook_ingress.jobs WHERE handler = sqlc.arg(handler) AND status = 'dead_letter';

-- name: AdminDeadLetterBatch :many
-- The next batch_size dead letters of handler handler after job id after_id.
SELECT id FROM webhook_ingress.jobs
WHERE handler = sqlc.arg(handler) AND status = 'dead_letter' AND id > sqlc.arg(after_id)
ORDER BY id
LIMIT sqlc.arg(batch_size)::bigint;

-- name: AdminCountFilterJobs :one
-- Existing jobs of handler handler whose event matches the filter (provider provider,
-- event_type_like event type LIKE pattern, since since, until until on received_at): how many a
-- replay re-queues, and how many it skips because they are leased (in flight).
SELECT count(*) FILTER (WHERE j.status <> 'leased') AS requeue, count(*) FILTER (WHERE j.status = 'leased') AS leased
FROM webhook_ingress.jobs j
JOIN webhook_ingress.events e ON e.id = j.event_id
WHERE j.handler = sqlc.arg(handler)
  AND (sqlc.arg(provider)::text = '' OR j.provider = sqlc.arg(provider))
  AND (sqlc.arg(event_type_like)::text = '' OR j.event_type LIKE sqlc.arg(event_type_like))
  AND (sqlc.narg(since)::timestamptz IS NULL OR e.received_at >= sqlc.narg(since))
  AND (sqlc.narg(until)::timestamptz IS NULL OR e.received_at < sqlc.narg(until));

-- name: AdminFilterJobBatch :many
-- The next batch_size jobs of the filter of AdminCountFilterJobs after job id after_id,
-- leased ones included: AdminRequeueJobs skips those, and the difference is
-- what the replay reports as left alone.
SELECT j.id
FROM webhook_ingress.jobs j
JOIN webhook_ingress.events e ON e.id = j.event_id
WHERE j.handler = sqlc.arg(handler)
  AND (sqlc.arg(provider)::text = '' OR j.provider = sqlc.arg(provider))
  AND (sqlc.arg(event_type_like)::text = '' OR j.event_type LIKE sqlc.arg(event_type_like))
  AND (sqlc.narg(since)::timestamptz IS NULL OR e.received_at >= sqlc.narg(since))
  AND (sqlc.narg(until)::timestamptz IS NULL OR e.received_at < sqlc.narg(until))
  AND j.id > sqlc.arg(after_id)
ORDER BY j.id
LIMIT sqlc.arg(batch_size)::bigint;

-- name: AdminCountMissingJobs :one
-- Events matching the filter that have no job of handler handler but match one of
-- its enabled unfiltered subscriptions: the jobs a replay creates. Events the
-- handler does not subscribe to get none, as at fan-out; its filtered
-- subscriptions are evaluated in Go (AdminMissingFilteredCandidates).
SELECT count(*)
FROM webhook_ingress.events e
WHERE (sqlc.arg(provider)::text = '' OR e.provider = sqlc.arg(provider))
  AND (sqlc.arg(event_type_like)::text = '' OR e.event_type LIKE sqlc.arg(event_type_like))
  AND (sqlc.narg(since)::timestamptz IS NULL OR e.received_at >= sqlc.narg(since))
  AND (sqlc.narg(until)::timestamptz IS NULL OR e.received_at < sqlc.narg(until))
  AND NOT EXISTS (SELECT 1 FROM webhook_ingress.jobs j WHERE j.event_id = e.id AND j.handler = sqlc.arg(handler))
  AND EXISTS (SELECT 1 FROM webhook_ingress.subscriptions s
              WHERE s.handler = sqlc.arg(handler) AND s.enabled AND s.filter IS NULL
                AND e.provider LIKE s.provider_like AND e.event_type LIKE s.event_type_like);

-- name: AdminCreateMissingJobs :one
-- Create the next batch_size missing jobs of AdminCountMissingJobs after event id after_id,
-- pending and due now, with the subscription's max_attempts (the largest of
-- the handler's matching patterns, as at fan-out), each with a 'replayed'
-- history row (attempt 0, worker_id the login role). Returns how many were
-- created and the last event id looked at.
WITH batch AS (
    SELECT e.id, e.received_at, e.provider, e.event_type, m.max_attempts, m.order_key,
           CASE WHEN m.order_key IS NOT NULL THEN coalesce(e.occurred_at, e.received_at) END AS order_at
    FROM webhook_ingress.events e
    CROSS JOIN LATERAL (
        SELECT max(s.max_attempts) AS max_attempts, max(webhook_ingress.order_key_of(s.order_key, e.payload, e.headers)) AS order_key
        FROM webhook_ingress.subscriptions s
        WHERE s.handler = sqlc.arg(handler) AND s.enabled AND s.filter IS NULL
          AND e.provider LIKE s.provider_like AND e.event_type LIKE s.event_type_like
    ) m
    WHERE m.max_attempts IS NOT NULL
      AND (sqlc.arg(provider)::text = '' OR e.provider = sqlc.arg(provider))
      AND (sqlc.arg(event_type_like)::text = '' OR e.event_type LIKE sqlc.arg(event_type_like))
      AND (sqlc.narg(since)::timestamptz IS NULL OR e.received_at >= sqlc.narg(since))
      AND (sqlc.narg(until)::timestamptz IS NULL OR e.received_at < sqlc.narg(until))
      AND e.id > sqlc.arg(after_id)
      AND NOT EXISTS (SELECT 1 FROM webhook_ingress.jobs j WHERE j.event_id = e.id AND j.handler = sqlc.arg(handler))
    ORDER BY e.id
    LIMIT sqlc.arg(batch_size)::bigint
), created AS (
    INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts, order_key, order_at)
    SELECT id, received_at, sqlc.arg(handler), provider, event_type, max_attempts, order_key, order_at FROM batch
    ON CONFLICT (event_id, handler, event_received_at) DO NOTHING
    RETURNING id, event_received_at
), marked AS (
    INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome)
    SELECT id, event_received_at, 0, session_user::text, now(), now(), 'replayed' FROM created
)
SELECT (SELECT count(*) FROM created) AS created, coalesce((SELECT max(id) FROM batch), 0)::bigint AS last_event_id;

-- name: AdminRequeueJobs :many
-- Put jobs job_ids back in the queue: pending, due now, no lease, no worker, no
-- last error, and attempt_count 0 so the handler gets max_attempts again.
-- Their attempt history stays; each gets a 'replayed' row recording the
-- attempt count it had and the login role that replayed it. A job leased
-- meanwhile (in flight) is left alone, and with dead_letters_only (a dead-letter replay) so
-- is one that is no longer a dead letter (replayed meanwhile by someone
-- else). The status is re-checked on the locked row. Returns the ids
-- re-queued.
--
-- A completed job's successful attempt lives on its row (completed_attempt_id,
-- attempt_count, worker_id, attempted_at, completed_at) and the re-queue
-- clears those: first it is archived into job_attempts as a 'completed' row
-- under the same id (OVERRIDING SYSTEM VALUE; the id came from job_attempts'
-- own sequence), so the history keeps it and the reporter, which may have
-- sent it already from the job row, never sees it under a new id. The
-- archive's id is below the replay marker's, drawn after it.
--
-- The jobs are locked in id order, as a consumer's batched completion locks
-- its jobs (consumers sorts each batch): in the order a scan of the
-- partitions reaches them, a replay could hold one job while waiting for a
-- completion that waits for it, and one of them failed with "deadlock
-- detected" (TestMultiJobStatementsLockInIDOrder).
WITH target AS (
    SELECT id, attempt_count, completed_attempt_id, worker_id, attempted_at, completed_at, updated_at
    FROM webhook_ingress.jobs
    WHERE id = ANY(sqlc.arg(job_ids)::bigint[])
      AND status <> 'leased'
      AND (NOT sqlc.arg(dead_letters_only)::boolean OR status = 'dead_letter')
    ORDER BY id
    FOR UPDATE
), requeued AS (
    UPDATE webhook_ingress.jobs j
    SET status               = 'pending',
        attempt_count        = 0,
        next_attempt_at      = now(),
        lease_holder_id      = NULL,
        lease_expires_at     = NULL,
        worker_id            = NULL,
        last_error           = NULL,
        last_error_class     = NULL,
        completed_at         = NULL,
        completed_attempt_id = NULL,
        updated_at           = now()
    FROM target t
    WHERE j.id = t.id
    RETURNING j.id, j.event_received_at, t.attempt_count, t.completed_attempt_id, t.worker_id,
              t.attempted_at, coalesce(t.completed_at, t.updated_at) AS completed_at
), archived AS (
    INSERT INTO webhook_ingress.job_attempts (id, job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome)
    OVERRIDING SYSTEM VALUE
    SELECT completed_attempt_id, id, event_received_at, attempt_count, worker_id,
           coalesce(attempted_at, completed_at), completed_at, 'completed'
    FROM requeued
    WHERE completed_attempt_id IS NOT NULL
), marked AS (
    INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome)
    SELECT id, event_received_at, attempt_count, session_user::text, now(), now(), 'replayed' FROM requeued
)
SELECT id FROM requeued ORDER BY id;

-- name: AdminNotifyJobs :exec
-- Wake the streamers after a replay: channel is notify.Channel. Sent inside the
-- replay's transaction, so it is delivered at COMMIT and only then.
SELECT pg_notify(sqlc.arg(channel), '');

-- name: AdminSubscriptions :many
-- Every subscription of handler handler ('' all), with its content filter
-- (NULL: none) and the jobs it has now.
SELECT s.handler, s.provider_pattern, s.event_type_pattern, s.max_attempts, s.enabled, s.updated_at,
       (SELECT count(*) FROM webhook_ingress.jobs j WHERE j.handler = s.handler AND j.status IN ('pending', 'leased', 'failed')) AS open_jobs,
       s.filter
FROM webhook_ingress.subscriptions s
WHERE (sqlc.arg(handler)::text = '' OR s.handler = sqlc.arg(handler))
ORDER BY s.handler, s.provider_pattern, s.event_type_pattern, s.filter NULLS FIRST;

-- name: AdminSetSubscriptionsEnabled :execrows
-- Switch handler handler's subscriptions on or off (enabled): all of them, or the one
-- with provider pattern provider_pattern and event type pattern event_type_pattern when both are given.
-- Jobs already created are left alone.
UPDATE webhook_ingress.subscriptions
SET enabled = sqlc.arg(enabled), updated_at = now()
WHERE handler = sqlc.arg(handler)
  AND (sqlc.arg(provider_pattern)::text = '' OR provider_pattern = sqlc.arg(provider_pattern))
  AND (sqlc.arg(event_type_pattern)::text = '' OR event_type_pattern = sqlc.arg(event_type_pattern))
  AND enabled IS DISTINCT FROM sqlc.arg(enabled);

-- name: AdminSubscriptionExists :one
-- Whether handler handler has a subscription (with patterns provider_pattern, event_type_pattern when given).
SELECT EXISTS (
    SELECT FROM webhook_ingress.subscriptions
    WHERE handler = sqlc.arg(handler)
      AND (sqlc.arg(provider_pattern)::text = '' OR provider_pattern = sqlc.arg(provider_pattern))
      AND (sqlc.arg(event_type_pattern)::text = '' OR event_type_pattern = sqlc.arg(event_type_pattern)));

-- name: AdminSubscribedHandlers :many
-- Every handler that ever subscribed (consumers register their
-- subscriptions at start and Inlet deletes none; every job comes from one):
-- the handlers a --handler filter may name. subscriptions is small; jobs is
-- not, and no index leads with its handler for every status.
SELECT DISTINCT handler FROM webhook_ingress.subscriptions ORDER BY handler;
