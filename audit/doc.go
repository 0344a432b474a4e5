// Package audit makes the event log tamper-evident: a sealer appends
// checkpoints over webhook_ingress.events in id (insertion) order, and
// Verify recomputes them from the table and reports every event that was
// altered, removed or inserted out of order (up to a cap, counting the rest),
// and the first checkpoint that was altered or removed (past which nothing
// can be checked). Record stores a report's outcome in
// webhook_ingress.audit_verifications, where the dashboard and the
// inlet_audit_* metrics read it.
//
// # The tree
//
// The checkpoints extend one RFC 6962 Merkle tree (SHA-256; computed with
// golang.org/x/mod/sumdb/tlog, so inclusion and consistency proofs are
// available to whoever holds the tree). Leaf i (0-based) stands for event id
// i+1: every identity value gets a leaf, so the tree size after a checkpoint
// is its last event id. A leaf's hash is tlog.RecordHash(data), that is
// SHA-256(0x00 || data), where data is, for an event,
//
//	"inlet-audit-event-v3\n"
//	uint64 id | str provider | str external_event_id | str event_type |
//	int64 received_at (Unix microseconds, UTC) | body_sha256 (32 bytes) |
//	SHA-256 of headers::text (32 bytes; jsonb output is canonical) |
//	str scheme | str request_uri | byte signature_verified (0 or 1) |
//	int32 secret_index (-1 for NULL) |
//	byte 0 when occurred_at is NULL, else byte 1 and int64 occurred_at
//	(Unix microseconds, UTC) |
//	byte payload stored (1 when payload is not NULL, else 0)
//
// Sealers before migration 078 wrote format v2: the tag
// "inlet-audit-event-v2\n" and the same fields without the payload byte;
// sealers before 075 wrote format v1: the tag "inlet-audit-event-v1\n" and
// the fields without occurred_at either. Verify accepts each: the tags
// differ, so a leaf hash is of one form only, and a v1 leaf matches a row
// whatever its occurred_at and payload (see below), a v2 leaf whatever its
// payload, while a v3 leaf does neither. No checkpoint records the format,
// and none sealed before changes.
//
// An event whose occurred_at was NULL when it was sealed (v2, v3) and holds
// a time now, every other sealed column intact, is not reported as altered:
// inlet backfill stored fills occurred_at where it is NULL (the one UPDATE
// events_guard allows) when a source's occurred_at setting finds the time
// in the stored bytes. Verify counts and lists such events instead
// (Report.OccurredAtFilled), without failing. A sealed occurred_at that was
// changed, or set to NULL, is an altered event.
//
// payload, the parsed copy of the body that auditors' JSON-path queries
// read, is not sealed itself: Verify checks every payload against raw_body
// (051). The leaf seals whether it was stored (v3), so a payload sealed as
// stored and NULL now, the event gone from every --where answer, is an
// altered event. One that was NULL when sealed (store_json off, a body too
// large or not JSON, rows before 012) and holds the parsed body now is what
// inlet backfill stored fills too: counted and listed
// (Report.PayloadFilled), not a problem.
//
// For an id with no event (a rolled-back insert: identity values are
// allocated before commit and never reused), "inlet-audit-skip-v1\n" and
// uint64 id. Integers are big-endian; str is a uint32 length and the bytes.
// raw_body enters through body_sha256, so the sealer never reads bodies; an
// owner who rewrites raw_body also rewrites the generated body_sha256, but no
// longer matches the leaf sealed before. Verify also checks that every body
// still hashes to its body_sha256. The sealer (webhook_sealer) reads the
// events through webhook_ingress.audit_events_to_seal (078), which runs as
// its owner and returns the sealed columns, the headers as their digest, and
// payload IS NOT NULL: never a body or a payload.
//
// # Checkpoints
//
// A checkpoint (webhook_ingress.audit_checkpoints) records seq (1, 2, …), the
// ids it covers (first_event_id is the previous checkpoint's last_event_id+1),
// the tree size and root hash after it, the ids it recorded as skipped, the
// previous checkpoint's hash (32 zero bytes for seq 1), created_at, and its
// own hash: SHA-256 over
//
//	"inlet-audit-checkpoint-v1\n"
//	uint64 seq | uint64 first | uint64 last | uint64 tree_size | root (32) |
//	prev_hash (32) | int64 created_at (Unix µs) | uint32 n | n × uint64 skipped id
//
// It also stores the range's leaf hashes (so Verify can name the event that
// changed; they are authenticated by the root) and the tree's right frontier
// (what the next seal extends, checked against the root before use).
//
// Since migration 032 a checkpoint also records min_received_at and
// max_received_at, the least and greatest received_at of the events it
// seals, and its hash is then the v2 form:
//
//	"inlet-audit-checkpoint-v2\n"
//	the v1 fields above, in order |
//	int64 min_received_at | int64 max_received_at (Unix µs, UTC)
//
// Both are NULL (and the hash is v1) for a checkpoint sealed before 032 and
// for one that covers skipped ids only. Nulling a v2 checkpoint's range
// makes Verify recompute the v1 hash, which no longer matches: the chain is
// broken there.
//
// # Retention
//
// inlet retention drops whole old period partitions of events and records
// each drop in webhook_ingress.retention_log: the period and the runs of
// ids it held. A sealed id with no event that such a row names is counted
// as pruned rather than missing (its leaf is still checked against the
// checkpoint's stored leaves), but only when the row is consistent with the
// table and the seals:
//
//   - the row's period [period_start, period_end) overlaps no period
//     partition of events still attached, and no event received in it is
//     left (in the default partition): a period really dropped is no longer
//     a partition and holds nothing. This stops a row that claims a live
//     period, or a sliver of one around a deleted event, for any checkpoint;
//   - when the id's checkpoint records a received_at range (v2), the period
//     overlaps [min_received_at, max_received_at].
//
// Otherwise the id is reported as a missing event, the reason naming the
// retention_log row. Verify reads these runs of ids (one per run of every
// retention_log row, a long history of them) through a cursor in its
// snapshot, a page at a time as its sweep by id reaches them, so its memory
// does not grow with the pruned history. Verify takes its snapshot only once it holds events
// (ACCESS SHARE): one that starts during a drop waits for it, bounded by its
// context, and then sees the period gone and its retention_log row
// together. retention_log is append-only but not chained into the
// checkpoints, so the owner can still add rows; these checks bound what a
// forged row can hide (see below).
//
// # Sealing without serializing ingress
//
// The sealer takes no lock on events: it reads them with a plain SELECT in its
// own transaction and appends one row to audit_checkpoints, under a
// transaction-scoped advisory lock so that two sealers do not race. The
// difficulty is that an id can become visible after a higher one: identity
// values are allocated at insert, before commit, and an insert can stay in
// flight for any time (a group-commit batch past its timeout whose statement
// was not rolled back, a backfill, a wait on a key lock in events_dedupe).
//
// So a gap in the ids (ids with no visible event) is sealed as skipped only
// once no transaction that could still insert one of them is running: a
// visibility rule, not a clock. Each pass first reads, in one statement, the
// highest visible id and the transactions that hold RowExclusiveLock on
// events (pg_locks, read after the statement's snapshot). An insert takes
// that lock before it draws its id and keeps it until it ends, and ids are
// drawn in order, so every id up to that highest one was drawn by a
// transaction that had ended by then or is in the list. Once a later pass
// (or the same one, when the list is empty) finds none of them still holding
// the lock, every gap up to that id that the events read after it still
// shows is an insert that rolled back, and is sealed as skipped; if that id
// ever appears, it was inserted out of order. That needs every statement of
// a pass to take its own snapshot, so the sealer runs at READ COMMITTED
// whatever default_transaction_isolation the database or role sets. A gap
// the sealer cannot judge yet waits, with everything after it; a pass waits
// up to Grace for it and then leaves it to the next. What the sealer has
// seen of writers lives in memory: after a restart it judges gaps afresh,
// which only delays them. Grace is otherwise a minimum age (events younger
// than it wait), and safety no longer depends on it. A transaction holding
// an insert on events open holds sealing back until it ends.
//
// # What it does not prove
//
// The database owner can rewrite the events and every checkpoint after them
// consistently, or drop the newest checkpoints. Keep the head that
// inlet audit verify prints (the latest checkpoint's hash) outside the
// database, and pass it back with --head to prove the chain still contains
// it.
//
// A forged retention_log row still hides a deleted sealed event, with
// --head or not, in these cases:
//
//   - the event was sealed in the same checkpoint as events of a period
//     that was really dropped: the row claims that period (a new row, or
//     the id added to a copy), and the checkpoint's range cannot tell which
//     of its events fell in it. A checkpoint covers at most MaxLeaves ids,
//     sealed in one pass, so this is the few events around the end of a
//     dropped period (and only when they were sealed together with its
//     last ones), not the live log;
//   - the event's checkpoint range reaches outside every period partition
//     (events in the default partition): a period there, around the
//     deleted event, holds no event and is no partition;
//   - the event was sealed by a v1 checkpoint (before 032): no range is
//     checked, and any period outside the partitions with no event passes
//     (an old one, before the oldest partition).
//
// Compare the periods retention_log lists with what inlet retention logged
// when it dropped them, kept outside the database, to close these.
//
// Whether payload is stored is not proven for an event sealed before 078
// (a v1 or v2 leaf): the owner can set its payload to NULL unseen (the
// event then drops out of --where answers, its body intact).
//
// occurred_at is not proven for an event sealed before 075 (a v1 leaf): the
// owner can move it unseen. Nor is an occurred_at filled after sealing: the
// owner can write any time into one that was sealed NULL, as the backfill
// does; Verify only counts and lists those events. Compare them with what
// inlet backfill stored reported filling, or with the time in each body
// (Stripe's created, …).
package audit
