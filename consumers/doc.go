// Package consumers is Inlet's consumer SDK: the last stage of the pipeline,
// where verified webhooks reach application code.
//
// A consumer service declares named [Handler]s, each with provider and
// event-type glob patterns. [Service.Start] registers those patterns in
// webhook_ingress.subscriptions (so ingress's fan-out trigger creates one job
// per matching event and handler from then on) and subscribes to each
// handler's bus topic. The streamer leases due jobs and publishes a
// [bus.Ref] (ids and metadata only) for each; the service fetches the event's
// raw bytes and headers from Postgres by job id, runs the handler, and records
// the outcome on that job alone, fenced on the attempt number:
//
//   - success: the job is completed;
//   - an error: the job is failed and retried after the handler's Backoff, or
//     dead-lettered once MaxAttempts are spent or the error is [Permanent];
//   - every attempt leaves a row in webhook_ingress.job_attempts with its
//     outcome and [ErrorClass].
//
// Postgres is the source of truth and the bus carries only wake-ups: a
// message is acknowledged as soon as a concurrency slot is free, and an
// attempt that never reports (crash, lost message) is recovered by lease
// expiry upstream. Delivery is therefore at-least-once; [Event.IdempotencyKey]
// lets handlers make their side effects idempotent.
//
// Error text returned by a handler is stored in Postgres only (jobs.last_error,
// job_attempts.error); logs and everything else outside Postgres carry only
// the error class and metadata, never a body, a header value or an error text.
//
// Ready-made handlers live in the subpackages log and httpforward.
package consumers
