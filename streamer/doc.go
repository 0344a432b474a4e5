// Package streamer moves due jobs from Postgres onto the bus. It wakes on a
// wake source (LISTEN/NOTIFY hints, or logical replication of the jobs table)
// and on a poll tick that always runs, covering a lost wake-up; it claims due
// jobs in batches with one UPDATE … FOR UPDATE SKIP LOCKED statement that also
// takes their lease, and publishes a reference (bus.Ref) per job to its
// handler's topic, up to RefsPerMessage of them in one message
// (bus.NewBatchMessage). Any number of streamers cooperate: SKIP LOCKED keeps them
// off each other's rows. Its reaper returns expired leases to pending, or to
// dead_letter when the last attempt expired.
//
// The streamer's role (webhook_streamer) cannot read raw_body or headers;
// nothing it publishes could carry them.
//
// # The job protocol
//
// A delivered job costs two writes of its row and one read; the statements
// are the named queries in schema/queries/jobs.sql (migration 010). The
// claim, the read and the batched completion run inside PL/pgSQL functions
// (claim_jobs, fetch_jobs, complete_jobs; migration 022) on generic plans:
// planned once per session, not on every call, which on partitioned tables
// cost more than executing them. Each bounds the partition key by values known
// when its plan starts (migration 023), so it starts the scans of the
// partitions its rows can be in only, however many periods are kept: the read
// and the completion by their batch's received_at; the claim by a window
// (jobs of events received within RecentWindow), except the first claim after
// each poll tick, which covers every partition, so a job of an older event (a
// retry, a replay, a catch-up) waits at most a poll interval longer; while
// such claims come back full, the next one covers every partition too, so a
// backlog of them drains at full speed.
//
//  1. Claim (streamer, ClaimJobs): one UPDATE … FROM (SELECT … FOR UPDATE
//     SKIP LOCKED LIMIT n) leases a batch: status leased, attempt_count + 1,
//     attempted_at = now(), lease_expires_at. (attempt_count, attempted_at)
//     is the lease token; it travels in the reference (bus.Ref Attempt,
//     LeasedAt). Handlers at their in-flight limit (MaxLeasedPerHandler) or
//     without a live consumer are left out; the streamer keeps the per-handler
//     count of leases in memory (CountLeasedJobs every LeasedRecount, plus its
//     own leases since), so no claim re-counts every lease.
//     Handlers with limits (ClaimLimitedJobs) and ordered handlers
//     (ClaimHandlerJobs, migration 031; ClaimLimitedJobs when limited too)
//     are claimed apart, one statement per handler, in two loops of their
//     own beside the claim loop (a limited handler's claim leases only jobs
//     a live consumer could receive: a job only a role with no live
//     consumer may run waits, and takes neither its probe nor an in-flight
//     slot; migration 076), one for limited handlers and one for
//     ordered ones (apart.go): ClaimJobs passes them over
//     (idx_jobs_due_by_handler), so a backlog that an ordered handler's
//     order holds back, which each of its claims walks past, costs the
//     other handlers' claims nothing. Handlers of one loop wait for each
//     other's claims; a handler whose claim comes back short after more than
//     25 ms twice in a row is claimed again only after nine times that
//     claim's time, and one whose claim fails after a backoff of its own.
//     Every claim of a keyed job locks its key until it commits
//     (pg_try_advisory_xact_lock, migrations 030 and 033) and passes over a key
//     another claim holds, so two streamers never lease two jobs of one
//     key; a claim of an ordered or limited handler leases at most 256 jobs, each
//     holding a lock from the server's shared lock table until it commits.
//     The main claim commits asynchronously (synchronous_commit off for its
//     transaction alone): its lease is the one write that a crash of the
//     database server may undo (the last moments before the WAL writer's
//     flush), which leaves its jobs due again with the attempt uncounted and
//     the published reference fenced out; every outcome and extension
//     commits synchronously, flushing the claim it was fenced on first. The
//     claims of ordered and limited handlers, and a main claim that leased a
//     keyed job, are synchronous: a running attempt holds a key or a slot of
//     a limit, which a crash must not undo under it.
//     A claim's references to one handler travel in messages of up to
//     RefsPerMessage (default 32), so the bus works per message, not per
//     job, and one consumer replica gets a message's jobs together.
//  2. Read (consumer, FetchJobs): one read-only SELECT per batch of
//     references (a message's, as a rule) returns the events of those whose lease is still current
//     (fenced on the token); a stale, finished or misrouted reference gets
//     nothing and its handler does not run. Nothing is written, unless the
//     reference waited in the bus so long that the lease would run out before
//     the first lease extension (ExtendLease).
//  3. Outcome (consumer): successes in batches, one UPDATE per batch
//     (CompleteJobs): status completed, worker_id, completed_at and
//     completed_attempt_id (an id from job_attempts' sequence) stay on the
//     row; no history row. A failure: FailJob and its job_attempts row
//     (error class, text, consumer, times) in one transaction; failed with
//     next_attempt_at by backoff, or dead_letter. Every outcome is fenced on
//     the lease token, so one from a lease that was reaped, given back or
//     replayed (attempt numbers restart at 1) changes nothing.
//  4. Recovery (streamer's reaper, ReapExpiredLeases): a lease that expired
//     without an outcome goes back to pending, or to dead_letter with
//     last_error_class lease_expired and a reason in last_error when it was
//     the last attempt, and leaves a lease_expired history row. Because
//     reading writes nothing, an expired lease counts as an attempt only when
//     a consumer of its handler that could have received the reference was
//     alive after the lease began (consumers say so in
//     webhook_ingress.consumers every AliveInterval; of a shared handler's
//     roles, one whose scopes cover the job, an unrestricted one, or one of
//     a version before 064) or its consumer extended it: in an outage no
//     handler ran, and nothing is spent. An expired attempt that counts
//     counts toward its handler's circuit breaker as a consumer's failure
//     does (count_expired_attempts, 073). A lease is recovered within LeaseDuration + ReapInterval, and
//     leased again by the next claim (a job of an event received over
//     RecentWindow before, by the next claim over every partition: within
//     a PollInterval more).
//
// Can a handler run twice for one attempt? Yes, rarely: the bus may deliver
// one reference twice (a NATS redelivery, a publish retried after a lost
// acknowledgement), and two consumer processes that read it before either
// recorded an outcome both run the handler. Only the first outcome is
// recorded; the second is fenced out and logged as a lost lease. Within one
// process the second delivery is skipped, and a delivery read after the
// outcome is skipped. Handlers get Event.IdempotencyKey for this, as for
// every at-least-once redelivery.
//
// Services of the previous protocol (009) may run beside these during a
// rolling upgrade: migration 010 only adds (completed_attempt_id, the
// consumers table, the attempts view), an old consumer's take and completion
// still fence on the same token, and a reference without LeasedAt is read
// under the job's own lease time. No drain is needed. Messages of several
// references are the exception: consumers from before them drop them as
// malformed, so upgrade consumers first, or run new streamers with
// RefsPerMessage 1 until every consumer is new.
//
// # Choosing a wake source (streamer.wake)
//
// Every source is only a hint: what a wake-up misses, the poll tick (and the
// claim each start runs) finds, so the choice is about latency and cost,
// never about data.
//
// notify (the default, Config.ListenConnect): writers send a debounced
// NOTIFY outside their transaction and streamers LISTEN. Cheap and simple;
// it needs writers that hint (ingress does; a hand-written INSERT does not)
// and a plain, unpooled connection per streamer. A NOTIFY in a transaction
// takes a cluster-wide lock during commit, serialising committing
// transactions that notified; with many writers hinting under heavy
// concurrent writes that queue is what replication avoids. A lost LISTEN
// connection is replaced with backoff, and one quiet for 30s is pinged: no
// answer within 10s (a network path that died without closing the socket)
// counts as lost. The claim after each LISTEN covers what was missed.
//
// replication (Config.ReplicationConnect, see Replication): each streamer
// follows logical replication (pgoutput) of webhook_ingress.jobs through
// publication inlet_jobs and wakes on every commit that inserted a job or
// made one pending again, whoever wrote it, with no NOTIFY at all. It costs:
//
//   - wal_level = logical (a server restart; somewhat more WAL), and
//     max_replication_slots / max_wal_senders with room for every replica.
//   - A role with the REPLICATION attribute for the replication connection,
//     which must reach Postgres directly (not through a transaction pooler).
//     REPLICATION is powerful: where pg_hba.conf lets it, such a role can
//     also stream the whole cluster physically, raw bodies included, and the
//     stream carries whole jobs rows (last_error too) whatever its grants.
//     It sits outside webhook_streamer's column-level least privilege
//     (036, 037: every column of jobs and job_attempts but the error texts
//     and entity keys; not order_lanes).
//     Give it only to the streamer's replication connection.
//   - The publication, created by the owner of webhook_ingress.jobs (the
//     streamer does it when its role may; otherwise Start fails naming the
//     statement: CREATE PUBLICATION inlet_jobs FOR TABLE webhook_ingress.jobs
//     WITH (publish = 'insert, update', publish_via_partition_root = true)).
//     An insert-only publication works too: jobs made pending again are
//     then found by the poll tick. A stream that is up re-checks it every
//     30s (on Pool): altered so that Start
//     would refuse it, the stream ends with that error, logged at Error and
//     retried with backoff. Dropped while streaming (and created again, by
//     the streamer or an operator), it leaves the slot stuck before the
//     drop, as pgoutput looks it up as of the WAL it decodes: the streamer
//     drops the slot and creates it afresh, with a warning.
//   - One slot per replica: a slot has one reader and keeps its position
//     across restarts, so each replica sets its own stable SlotName (default
//     inlet_streamer). A second reader of a slot gets "slot is active" and
//     polls while it retries.
//   - Retained WAL: a slot keeps all WAL from its confirmed position on, so
//     an abandoned slot (a replica retired or renamed) retains WAL until the
//     disk is full. Drop it: SELECT pg_drop_replication_slot('inlet_streamer');
//     watch pg_replication_slots (active, confirmed_flush_lsn) and
//     inlet_streamer_replication_connected, and set max_slot_wal_keep_size
//     as a cap. A slot that cap invalidated (a streamer down longer than it
//     allows; wal_status 'lost') is dropped and created afresh by the next
//     start or reconnect, with a warning: polling covered the gap.
//   - Going back: a streamer without the replication wake source drops the
//     slot of its SlotName that replication left (a permanent pgoutput slot
//     of its database), once nothing reads it, with a warning; its login
//     role needs REPLICATION (else the warning names the statement). A slot
//     left behind retains WAL, and PostgreSQL does not start with wal_level
//     below logical while any logical slot exists: drop every one first.
//   - Decoding on the primary: each replica's walsender decodes all WAL and
//     ships every published change of jobs (claims and outcomes included,
//     with publish 'update'), so the cost grows with replicas × job churn.
//   - Failover: before PostgreSQL 17 a logical slot does not move to a
//     promoted standby; the streamer creates it afresh there, and the claim
//     each (re)connection runs covers the gap.
//   - Reconnects back off exponentially (100ms doubling to 10s); a stream
//     counts as up, starting the backoff afresh, once it delivered a
//     transaction or lasted 10s, so one that fails as it opens does not
//     reconnect in a hot loop.
//
// poll (neither): the tick alone, every PollInterval.
package streamer
