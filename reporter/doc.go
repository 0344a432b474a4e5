// Package reporter sends attempt metadata from the data plane to an outside
// control plane (inlet control-plane, package controlplane): one [Record] per
// finished attempt, read by id cursor as webhook_streamer, batched, POSTed as
// JSON with a bearer token and retried with backoff until the control plane
// acknowledges it with a 2xx.
//
// A finished attempt is in one of two tables, under one id space (job_attempts'
// sequence): a failed, dead-lettered or expired attempt (and a replay marker)
// is a row of webhook_ingress.job_attempts; a successful one stays on its job
// row (jobs.completed_attempt_id, with attempt_count, attempted_at as its start
// and completed_at as its end) until a replay archives it into job_attempts
// under the same id. The reporter reads both after its cursor in one
// statement, so every attempt is reported once, wherever it is.
//
// A record carries nothing but metadata, and its type has no field that
// could carry more: an opaque job id (HMAC-SHA256 of jobs.id under a
// per-deployment key), the attempt's id (the cursor), outcome and error class
// from fixed lists (a class a consumer wrote outside the list is sent as
// handler_error, never the row's text), attempt number, duration and start and end times; the
// source name and event type only when the operator opts in. No body, header,
// error text or secret is ever read, and its role, webhook_streamer, may not
// read a body, a header or an error text (migrations 001 and 036).
//
// At start the reporter asks the control plane for the last attempt id it
// holds (GET /api/v1/cursor) and continues after it; the control plane stores
// records idempotently on (tenant, attempt id), so a batch sent twice after
// a lost answer is harmless. A database restored from a backup, or a new one
// under the same tenant token, would draw ids the control plane already
// holds: whenever the cursor is fetched, and in every round that finds
// nothing after it, the reporter moves job_attempts' id sequence past the
// cursor if it is behind (never lower; migration 072) and logs it at warn.
//
// A control plane restored from a backup under a running reporter holds
// fewer records than it acknowledged. The reporter keeps the highest
// attempt id acknowledged and compares the control plane's cursor with it:
// the one each answer to a report carries (cursor_before, the cursor before
// the batch was stored: [Answer]), and, for a control plane that does not
// answer it, GET /api/v1/cursor before the first send after one that got no
// answer and at least each minute. It also keeps the highest arrival number
// acknowledged (the control plane numbers each tenant's records in the
// order they arrive, and answers the highest it holds before and after each
// batch, and with its cursor), which falls also when the records lost were
// stored under ids below the cursor (attempts that committed late), and a
// log of, for each acknowledged batch, the number reached and the batch's
// lowest attempt id (at most 4,096 marks, the older half merged in pairs
// when full: going back further than needed, never less far). A cursor or
// a number below is logged at warn, and the next round goes back to the
// cursor, or to just below the lowest attempt id of the batches whose
// numbers were lost: the records after it are read again, oldest first,
// and sent before newer ones, and the 1,000 ids below it are looked for
// again, as at a start (numbers given before the reporter started are not
// mapped: it goes back to the cursor, and says so). Records the control
// plane lost above its cursor that the data plane no longer holds are
// logged at error by id and counted in
// inlet_reporter_failures_total{step="lost"}: those below the data plane's
// oldest attempt at once, those above it (retention drops whole periods,
// not the lowest ids first) as the rounds after going back miss attempt ids
// acknowledged since the start (remembered as at most 10,000 runs of ids).
// Late records lost below the cursor that the data plane no longer holds,
// and ids not remembered, are not told apart from ids no attempt committed
// under.
//
// One reporter per database sends at a time: with [Config.Leader] (inlet
// streamer: a session advisory lock named [LockName], on a connection of
// its own) a reporter that does not lead sends the control plane nothing,
// and tries again every Interval; the leader checks it still leads after
// each round. Several streamers' reporters would each send every record,
// and each one's check above would compare its own acknowledgements with
// what all of them stored: a restore that lost a late record could go
// unnoticed. A reporter that takes the lead starts as at a start: from the
// control plane's cursor (so it skips nothing the last leader did not get
// acknowledged), the 1,000 ids below it looked for again, nothing known of
// what was sent before (its arrival numbers and acknowledged ids: another
// leader's are not in them). One that takes the lead again still looks for
// the gaps it knew (ids passed unseen: facts about the data plane, which
// the other leader never knew of), and the time it followed does not age
// them. So a restore of the control plane around a change
// of leader is noticed as at a start: the new leader goes back to the
// cursor and the 1,000 ids below it, and a late record the restore lost
// further below is not sent again. An old leader may still send for the
// round it is in when it loses the lock: a restore then can be hidden from
// the new leader by what the old one stores, the same way.
//
// A failed election (an error, not an answer: the election's connection
// lost and a reconnect refused, a database restart, max_connections) is
// logged at warn and counted in inlet_reporter_failures_total{step="elect"},
// and changes nothing: a leader keeps sending (asking again at most every
// Interval) until an election answers that another replica's reporter
// leads, and a follower keeps sending nothing. The lock may be gone with
// the election's connection and another replica's reporter take it: the
// two then send the same records until this one's election answers,
// which the control plane stores once, and a restore meanwhile is noticed
// as weakly as around a change of leader.
//
// A control plane's refusal (400, 413, 422) is not sent again as it was: the
// batch is narrowed down to the record refused (the records[i] its reason
// names, else by halves), which is sent once more alone with its values
// folded to what every control plane takes (error class handler_error, no
// provider or event type) and, refused again, skipped: logged by attempt id
// and counted in inlet_reporter_failures_total{step="refused"}. The rest of
// the batch is sent and the cursor moves on. Any other failure is retried
// with backoff.
package reporter
