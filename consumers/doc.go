// Package consumers is Inlet's consumer SDK: the last stage of the pipeline,
// where verified webhooks reach application code.
//
// A consumer service declares named [Handler]s, each with provider and
// event-type glob patterns and optionally a content filter
// ([Handler.Filter], a CEL expression that New compiles with
// Config.CheckFilter, so a bad one stops the service with its position). [Service.Start] registers those patterns in
// webhook_ingress.subscriptions (so ingress's fan-out trigger creates one job
// per matching event and handler from then on) and subscribes to each
// handler's bus topic. The streamer leases due jobs and publishes a
// [bus.Ref] (ids, metadata and the lease token) for each; the service reads
// the event's raw bytes and headers from Postgres with a read-only statement
// fenced on that token (batched with the other attempts starting together),
// runs the handler, and records the outcome on that job alone, fenced on the
// token (the attempt number and the time it was leased):
//
//   - success: the job is completed; the job row keeps the attempt number,
//     the consumer (worker_id) and the time (completed_at), and successes
//     finishing together share one statement;
//   - an error: the job is failed and retried after the handler's Backoff
//     (or later, when the error asks with [RetryAfter]), or dead-lettered
//     once MaxAttempts are spent or the error is [Permanent];
//     every failed attempt leaves a row in webhook_ingress.job_attempts with
//     its [ErrorClass], error text, consumer and times (the view
//     webhook_ingress.attempts shows failures and successes together). A
//     panic is a failure of class [ClassPanic]; an error whose chain
//     panics when the SDK walks it (a typed nil wrapped in another error,
//     whose Unwrap dereferences its nil receiver) is one of class
//     [ClassHandlerError], not permanent, without a Retry-After.
//
// An outcome Postgres cannot take yet (a restart, a failover: connections
// refused or closed) is tried again, 250 ms apart doubling to 2s, until the
// attempt's lease runs out: still fenced on the lease token, so nothing is
// written once the lease was taken back. Only an outcome still not written
// then is left to the lease's expiry, and counted by the reaper.
//
// Postgres is the source of truth and the bus carries only wake-ups: a
// message is acknowledged as soon as a concurrency slot is free, and an
// attempt that never reports (crash, lost message) is recovered by lease
// expiry upstream. Every AliveInterval the service says in Postgres that it
// is alive for its handlers: streamers lease nothing of a handler none of
// whose consumers is alive, and an expired lease counts as an attempt only
// when one was seen after the lease began (or its consumer extended it), so
// the service says it once more before it runs a handler on a lease that
// began after its last write (a write covers the 250 ms after it): a job
// whose handler kills the process is counted, and dead-lettered in the
// end. A scoped role's service says it only for the handlers the role is
// still given, and logs once the handlers it no longer may run. It says
// nothing while its transport reports that it is not delivering (bus/natsbus:
// not connected to NATS; the error [Service.Healthy] also reports): a
// consumer cut off from NATS while Postgres stays reachable (a network
// policy, revoked NATS credentials) could receive no reference, and saying
// it was alive had the reaper count every expired lease as an attempt and
// dead-letter jobs whose handler never ran. Its last word then runs out as
// a stopped consumer's does: within three AliveIntervals streamers lease
// nothing of a handler it alone runs, and leases begun after its last write
// expire uncounted. While only some of its subscriptions are not consuming
// (bus/natsbus: a handler's durable consumer lost and not made again, as
// at a stream or account consumer limit, or not consumed again; Healthy
// reports them too) it leaves out only their handlers, whose liveness runs
// out so, and says it for the others, which run on. A reference that still
// reaches a handler left out meanwhile has its lease extended before the
// handler runs (so it counts should the process die in it), and the
// service says it is alive for that handler again within 100 ms of the
// transport's recovery. A transport that reports only its health as a
// whole (Healthy) leaves out every handler while it is not nil; one with
// no health of its own (the in-process bus) always delivers. An attempt
// cut short by [Service.Stop]'s deadline gives its lease back instead: its
// job is pending again at once and the attempt does not count, so a forced
// stop (a deploy) does not dead-letter a job on its last attempt. Only if
// giving it back fails is it left to lease expiry, and counted. References
// waiting for a concurrency slot that the handler's own attempts hold for
// good give their leases back too: once they have waited the handler's
// Timeout and a LeaseExtend while every slot is held by a handler that has
// not returned a LeaseExtend past its Timeout (it ignores its context),
// uncounted and no failure of the circuit breaker, for another consumer of
// the handler (or the circuit's probe) to take; a slow handler that
// returns frees its slot in its time, and its backlog waits on.
// Delivery is therefore at-least-once; [Event.IdempotencyKey] lets handlers
// make their side effects idempotent.
//
// Can a handler run twice for one attempt? Yes: reading an attempt writes
// nothing, so if the bus delivers one message (one reference, or the list of
// a claim's references the streamer sends by default) to two consumer
// processes at once, both run the handler of each attempt not yet finished;
// only the first outcome is recorded and the second is fenced out (logged as
// "the job's lease was lost"). Within one process a second delivery of a
// running attempt is skipped, and a delivery after the outcome was recorded
// is skipped. The package streamer describes the whole protocol.
//
// # Exactly-once effects
//
// A handler whose effects live in the same PostgreSQL sets [Handler.TxFunc]
// instead of Func: it runs in a transaction that also completes its job,
// fenced on the lease token, so its writes commit exactly when its job's
// completion does. Any isolation level works ([Handler.TxOptions]; see
// [TxHandlerFunc]). An error, a panic, a lost lease (a stale attempt, a
// replay, a duplicate delivery that completed first) or a crash before the
// commit rolls the writes back; each job's effects are committed
// once however often its handler ran. A consumer frozen or cut off between
// the completion and the commit (or while recording a failure) holds the
// job's row lock at most 15s: the SDK bounds those transactions' idle time
// on the server (idle_in_transaction_session_timeout), and PostgreSQL then
// ends the session; so do a circuit breaker's reset (the handler's
// handler_limits row, which every streamer's limited claim locks) and
// Register. An operator's replay of a completed job is a new run by
// request and commits its effects again. See [TxHandlerFunc].
//
// Error text returned by a handler is stored in Postgres only (jobs.last_error,
// job_attempts.error); logs and everything else outside Postgres carry only
// the error class and metadata, never a body, a header value or an error text.
//
// # A database role per team
//
// [OpenPool] runs as webhook_worker, which may work every handler's jobs and
// read every event: the single-team setup. When several teams run consumers,
// each team gets a role of its own, so that one compromised consumer cannot
// complete, fail or disable another team's handler, or read the events that
// reached only that team. The schema owner makes it, with the events it may
// subscribe to and read (its scopes):
//
//	inlet roles create-consumer payments --handlers billing,refunds --scope stripe --member payments_login
//
// and the team's service runs as it: [OpenPoolAs] with
// "webhook_consumer_payments" (or consumer.db_role for inlet consumer).
// PostgreSQL enforces the rest, with row-level security on jobs,
// job_attempts, subscriptions, consumers and events: the role sees, extends,
// completes and fails only billing's and refunds' jobs, registers and
// disables only their subscriptions, enables a subscription only inside its
// scopes, sees only their jobs inside its scopes, says only they are alive,
// and reads the body and headers only of events inside its scopes that have
// a job for one of them. The SDK needs
// nothing else: a reference of another handler reads as not this
// consumer's to take, and declaring a handler the role does not run, or a
// pattern outside its scopes, makes [Service.Start] fail naming it.
//
// Ready-made handlers live in the subpackages log and httpforward; the
// transports in bus (in-process) and bus/natsbus (NATS JetStream).
//
// # What it depends on
//
// The SDK is a module of its own, github.com/inlet-dev/inlet/consumers,
// that requires pgx, watermill, NATS (for bus/natsbus only) and the
// OpenTelemetry API, and none of the Inlet server's dependencies: the program
// picks its tracing exporter ([Config.TracerProvider]), its metrics system
// ([Metrics]) and, when handlers filter, the CEL compiler
// ([Config.CheckFilter]). A test in tests/ (TestSDKStaysLight) holds it to
// that.
package consumers
