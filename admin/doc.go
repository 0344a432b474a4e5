// Package admin is what operators and auditors do with Inlet day to day, as
// plain functions over a PostgreSQL pool that the CLI (inlet events, inlet
// dlq, inlet replay) and the admin HTTP API ([API]) both call:
//
//   - the event log: [ListEvents] filtered by source, event type glob, time
//     range and external id, paged newest first by id, every page after the
//     first showing the log as of the first's snapshot (its cursor,
//     EventPage.Next); [GetEvent] with its
//     headers, the exact stored bytes, and every handler's job with its
//     attempt history (failed attempts from job_attempts, the successful one
//     from its job row: the view webhook_ingress.attempts);
//   - re-verification: [Reverify] recomputes the signatures of stored events
//     from their stored bytes, headers and request URI with the configured
//     sources' secrets (tolerance ignored) and reports the ones that no longer
//     verify;
//   - dead letters: [ListDeadLetters] by handler, source, time range and error
//     class; [GetJob] with attempts, error text and event metadata;
//   - [Replay]: one job, all dead letters of a handler, or every event
//     matching a filter to one handler (creating the jobs a handler subscribed
//     after the events arrived never got), with a dry run.
//
// The functions run as webhook_operator (schema migration 002): they read
// everything and may re-queue or create jobs, but no statement here, and no
// grant of that role, can change an event. Each operation is one transaction
// (reads REPEATABLE READ READ ONLY, so a page and its jobs agree), working in
// bounded batches.
//
// # Replay semantics
//
// A replayed job goes back to pending, due now, with its lease, worker and
// last error cleared and attempt_count set back to 0, so the handler gets its
// full max_attempts again. Its earlier attempts stay in job_attempts, and the
// replay itself adds a row with outcome 'replayed' (attempt: the count the job
// had; worker_id: the login role, session_user, that replayed it). A completed
// job's successful attempt, kept on its job row (schema migration
// 010_lease_token), is first archived into job_attempts as a 'completed' row
// under the id it already had (jobs.completed_attempt_id), so the history
// and the control plane's reporter keep it, once, after the row is reset. Jobs
// created from the log by a replay get such a row with attempt 0. A job that
// is leased (in flight) is never touched: replaying it alone is an error
// ([ErrConflict]); in a batch it is counted as skipped. One job replayed
// with an expected status (ReplayRequest.ExpectStatus: the dashboard's
// button sends the status it showed) is refused the same way once its
// status moved, and with an expected replay count
// (ReplayRequest.ExpectReplays, Job.Replays: the button sends that too) once
// it was replayed since, even when it is back in the status it had (a
// completed job replayed and completed again). Replay never changes
// events, and it sends one NOTIFY hint (delivered at COMMIT) so streamers
// pick the jobs up at once rather than at their next poll.
//
// A replay to a handler creates jobs only for events one of the handler's
// enabled subscriptions matches, exactly as fan-out would have: to send it
// other events, change its subscription first. A replay touching more than
// [ReplayRequest].MaxJobs jobs is refused as a whole, never done in part.
package admin
