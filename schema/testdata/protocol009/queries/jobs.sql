-- The job queries as shipped with migration 009 (before the lease-token
-- protocol of 010), kept for the upgrade test: services of that version
-- running beside the new ones.

-- Queries on webhook_ingress.jobs: claim-and-lease (streamer), reaping expired
-- leases (streamer), heartbeats and outcomes (consumers).

-- name: ClaimJobs
-- Lease up to $1 due jobs for lease holder $2 for $3 (an interval), in one
-- statement. SKIP LOCKED lets any number of streamers claim side by side
-- without waiting on or double-leasing each other's rows. The attempt number
-- is taken here; outcomes are fenced on it. A handler that already has $4
-- jobs leased (by any streamer) gets no more this round: leasing far ahead of
-- what its consumers take only lets the leases expire in the bus and churn.
WITH in_flight AS (
    SELECT handler, count(*) AS n
    FROM webhook_ingress.jobs
    WHERE status = 'leased'
    GROUP BY handler
), due AS (
    SELECT j.id, j.event_received_at
    FROM webhook_ingress.jobs j
    LEFT JOIN in_flight f ON f.handler = j.handler
    WHERE j.status IN ('pending', 'failed')
      AND j.next_attempt_at <= now()
      AND coalesce(f.n, 0) < $4
    ORDER BY j.next_attempt_at, j.id
    LIMIT $1
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE webhook_ingress.jobs j
SET status           = 'leased',
    attempt_count    = j.attempt_count + 1,
    lease_holder_id  = $2,
    lease_expires_at = now() + $3::interval,
    attempted_at     = now(),
    worker_id        = NULL,
    updated_at       = now()
FROM due
WHERE j.id = due.id
  AND j.event_received_at = due.event_received_at -- the partition key: one probe per job, not one per partition
RETURNING j.id, j.event_id, j.handler, j.provider, j.event_type, j.attempt_count, j.max_attempts, j.lease_expires_at, coalesce(j.trace_parent, ''),
          j.event_received_at

-- name: ReleaseJobs
-- Give back leases whose references could not be published: pending again at
-- once, and the attempt does not count. A lease a consumer has already taken
-- (its reference went out before the publish failed) is left to it.
UPDATE webhook_ingress.jobs
SET status           = 'pending',
    attempt_count    = attempt_count - 1,
    lease_holder_id  = NULL,
    lease_expires_at = NULL,
    next_attempt_at  = now(),
    updated_at       = now()
WHERE id = ANY($1::bigint[])
  AND status = 'leased'
  AND lease_holder_id = $2
  AND worker_id IS NULL

-- name: ReapExpiredLeases
-- Leases that ran out without an outcome. Taken by a consumer that then went
-- quiet (it died, or hung): back to pending, or to dead_letter when that was
-- the last attempt, and the attempt is closed in job_attempts as
-- lease_expired. Never taken (the reference was lost, or waited in the bus
-- while no consumer took it): back to pending and the attempt does not count,
-- since no handler ran; a lost message costs latency, never an attempt. At
-- most $1 per call.
WITH expired AS (
    SELECT id, attempt_count, worker_id, attempted_at
    FROM webhook_ingress.jobs
    WHERE status = 'leased'
      AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), reaped AS (
    UPDATE webhook_ingress.jobs j
    SET status           = CASE WHEN expired.worker_id IS NOT NULL AND j.attempt_count >= j.max_attempts
                                THEN 'dead_letter' ELSE 'pending' END,
        attempt_count    = CASE WHEN expired.worker_id IS NULL THEN j.attempt_count - 1 ELSE j.attempt_count END,
        lease_holder_id  = NULL,
        lease_expires_at = NULL,
        worker_id        = NULL,
        next_attempt_at  = now(),
        last_error_class = CASE WHEN expired.worker_id IS NULL THEN j.last_error_class ELSE 'lease_expired' END,
        updated_at       = now()
    FROM expired
    WHERE j.id = expired.id
    RETURNING j.id, j.event_received_at, j.status, expired.attempt_count, expired.worker_id, expired.attempted_at
), history AS (
    INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, outcome, error_class)
    SELECT id, event_received_at, attempt_count, worker_id, coalesce(attempted_at, now()), 'lease_expired', 'lease_expired'
    FROM reaped
    WHERE worker_id IS NOT NULL
)
SELECT id, status FROM reaped

-- name: ExtendLease
-- Heartbeat of a long handler: push the lease out to now() + $3 while attempt
-- $2 of job $1, leased at $4, still holds it. No row: the lease was lost.
UPDATE webhook_ingress.jobs
SET lease_expires_at = now() + $3::interval,
    updated_at       = now()
WHERE id = $1
  AND status = 'leased'
  AND attempt_count = $2
  AND attempted_at = $4

-- name: CompleteJob
-- Attempt $2 of job $1, leased at $3, succeeded. Fenced on the lease (the
-- attempt number and the time it was leased: attempt numbers repeat after a
-- replay), so a consumer whose lease was reaped cannot overwrite a newer one.
UPDATE webhook_ingress.jobs
SET status           = 'completed',
    completed_at     = now(),
    lease_holder_id  = NULL,
    lease_expires_at = NULL,
    last_error       = NULL,
    last_error_class = NULL,
    updated_at       = now()
WHERE id = $1
  AND status = 'leased'
  AND attempt_count = $2
  AND attempted_at = $3

-- name: FailJob
-- Attempt $2 of job $1, leased at $7, failed with error $3 of class $4.
-- Retried $5 (an interval, on the database's clock) from now unless attempts
-- are spent or $6 (permanent) is true: then dead_letter. Fenced as CompleteJob.
UPDATE webhook_ingress.jobs
SET status           = CASE WHEN $6::boolean OR attempt_count >= max_attempts THEN 'dead_letter' ELSE 'failed' END,
    next_attempt_at  = now() + $5::interval,
    lease_holder_id  = NULL,
    lease_expires_at = NULL,
    last_error       = $3,
    last_error_class = $4,
    updated_at       = now()
WHERE id = $1
  AND status = 'leased'
  AND attempt_count = $2
  AND attempted_at = $7
RETURNING status

-- name: InsertAttempt
-- History row of one finished attempt, in the partition of its job.
INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome, error_class, error)
SELECT j.id, j.event_received_at, $2, $3, $4, now(), $5, $6, $7
FROM webhook_ingress.jobs j
WHERE j.id = $1

-- name: TakeJob
-- Consumer $4 takes attempt $2 of job $1 (handler $3, event $5) and fetches
-- its event, pushing the lease out to now() + $6 so the handler starts with a
-- whole lease ahead of it (it may have waited in the bus). A lease that has
-- already expired is not taken: the reaper gives it to a new attempt.
-- Only one consumer can take an attempt (worker_id is set once per lease), so
-- a reference the bus delivers twice runs the handler once. No row: stale,
-- misrouted or already taken. A NULL event id: the event is gone.
WITH taken AS (
    UPDATE webhook_ingress.jobs
    SET worker_id        = $4,
        lease_expires_at = greatest(lease_expires_at, now() + $6::interval),
        updated_at       = now()
    WHERE id = $1
      AND attempt_count = $2
      AND handler = $3
      AND event_id = $5
      AND status = 'leased'
      AND lease_expires_at > now()
      AND worker_id IS NULL
    RETURNING event_id, event_received_at, attempt_count, max_attempts, updated_at, attempted_at
)
SELECT t.attempt_count, t.max_attempts, t.updated_at, t.attempted_at, t.event_received_at,
       e.id, coalesce(e.provider, ''), coalesce(e.scheme, ''), coalesce(e.external_event_id, ''),
       coalesce(e.event_type, ''), coalesce(e.received_at, now()), coalesce(e.headers, '{}'), coalesce(e.raw_body, '')
FROM taken t
LEFT JOIN webhook_ingress.events e ON e.id = t.event_id AND e.received_at = t.event_received_at

-- name: CompleteJobs
-- A batch of successful attempts, in one statement: attempt $2[i] of job
-- $1[i] (in the partition of $3[i], leased at $4[i], taken at $5[i]) by
-- consumer $6 succeeded. Each is fenced as CompleteJob; its history row is
-- written only when its update matched. Returns the ids completed; an id
-- missing lost its lease.
WITH done AS (
    SELECT *
    FROM unnest($1::bigint[], $2::integer[], $3::timestamptz[], $4::timestamptz[], $5::timestamptz[])
        AS d(id, attempt, event_received_at, leased_at, started_at)
), completed AS (
    UPDATE webhook_ingress.jobs j
    SET status           = 'completed',
        completed_at     = now(),
        lease_holder_id  = NULL,
        lease_expires_at = NULL,
        last_error       = NULL,
        last_error_class = NULL,
        updated_at       = now()
    FROM done d
    WHERE j.id = d.id
      AND j.event_received_at = d.event_received_at
      AND j.status = 'leased'
      AND j.attempt_count = d.attempt
      AND j.attempted_at = d.leased_at
    RETURNING j.id, j.event_received_at, d.attempt, d.started_at
), history AS (
    INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome)
    SELECT id, event_received_at, attempt, $6, started_at, now(), 'completed'
    FROM completed
)
SELECT id FROM completed

-- name: TakeJobs
-- TakeJob for a batch, in one statement: consumer $5 takes attempt $2[i] of
-- job $1[i] (handler $3[i], event $4[i], in the partition of $7[i]), pushing
-- each lease out to now() + $6. Returns the job id and then TakeJob's columns
-- for each attempt taken; an id missing is stale, misrouted or already taken.
WITH want AS (
    SELECT *
    FROM unnest($1::bigint[], $2::integer[], $3::text[], $4::bigint[], $7::timestamptz[])
        AS w(id, attempt, handler, event_id, event_received_at)
), taken AS (
    UPDATE webhook_ingress.jobs j
    SET worker_id        = $5,
        lease_expires_at = greatest(j.lease_expires_at, now() + $6::interval),
        updated_at       = now()
    FROM want w
    WHERE j.id = w.id
      AND j.event_received_at = w.event_received_at -- the partition key: one probe per job, not one per partition
      AND j.attempt_count = w.attempt
      AND j.handler = w.handler
      AND j.event_id = w.event_id
      AND j.status = 'leased'
      AND j.lease_expires_at > now()
      AND j.worker_id IS NULL
    RETURNING j.id, j.event_id, j.event_received_at, j.attempt_count, j.max_attempts, j.updated_at, j.attempted_at
)
SELECT t.id, t.attempt_count, t.max_attempts, t.updated_at, t.attempted_at, t.event_received_at,
       e.id, coalesce(e.provider, ''), coalesce(e.scheme, ''), coalesce(e.external_event_id, ''),
       coalesce(e.event_type, ''), coalesce(e.received_at, now()), coalesce(e.headers, '{}'), coalesce(e.raw_body, '')
FROM taken t
LEFT JOIN webhook_ingress.events e ON e.id = t.event_id AND e.received_at = t.event_received_at
