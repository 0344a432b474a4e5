// Package backfill fills the event log from a provider's history API (Stripe's
// events list, GitHub's hook deliveries) for events that never arrived as
// webhooks: Inlet was down past the provider's retries, or was set up after
// the events happened.
//
// Each event goes through ingress's own write path (ingress.Store, the same
// INSERT … ON CONFLICT DO NOTHING and fan-out trigger), so an event already
// received by webhook is a duplicate and vice versa, and every subscribed
// handler gets its job. Backfilled events are stored with
// signature_verified = false: they came over an authenticated API, not as a
// signed webhook, and their bytes are the API's rendering of the event.
//
// Nothing made before the end of the newest period inlet retention dropped
// is stored, by a backfill or a reconcile: the log no longer holds those
// events nor their dedupe keys, so each would be taken for new and handled a
// second time under a new id.
//
// Progress survives interruption: after each page the provider's cursor is
// written to a small JSON state file, and the next run continues from it. The
// file is removed when the history has been read to its end, so a later run
// starts again from the newest event (and stores only what is missing).
package backfill
