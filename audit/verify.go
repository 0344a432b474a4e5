package audit

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/inlet-dev/inlet/schema/queries"
)

// ProblemKind classifies what Verify found.
type ProblemKind string

const (
	// AlteredEvent means an event's sealed columns (or its body, or its
	// parsed copy payload) changed, or a payload sealed as stored is gone.
	AlteredEvent ProblemKind = "altered_event"
	// MissingEvent means a sealed event is gone.
	MissingEvent ProblemKind = "missing_event"
	// OutOfOrderEvent means an event appeared in a range already sealed.
	OutOfOrderEvent ProblemKind = "out_of_order_event"
	// BrokenChain means a checkpoint was altered or removed.
	BrokenChain ProblemKind = "broken_chain"
)

// Problem is one thing wrong that Verify found.
type Problem struct {
	Kind ProblemKind `json:"kind"`
	// Checkpoint is the seq of the checkpoint concerned; 0 when none.
	Checkpoint int64 `json:"checkpoint,omitempty"`
	// EventID is the event concerned; 0 when none.
	EventID int64  `json:"event_id,omitempty"`
	Reason  string `json:"reason"`
}

func (p *Problem) Error() string { return p.Reason }

// Report is the result of Verify.
type Report struct {
	// OK is true when nothing is wrong.
	OK bool `json:"ok"`
	// Problem is the first problem, in id and seq order; nil when OK. It is
	// Problems[0], kept for readers of the one-problem report.
	Problem *Problem `json:"problem,omitempty"`
	// Problems are the problems found, in id and seq order, at most
	// VerifyOptions.MaxProblems of them; ProblemsFound counts them all and
	// ProblemsTruncated says that some were cut.
	Problems          []Problem `json:"problems"`
	ProblemsFound     int64     `json:"problems_found"`
	ProblemsTruncated bool      `json:"problems_truncated"`
	// ChainBroken says that a checkpoint was altered or removed: the
	// checkpoints after it, and the events they cover, could not be checked
	// (Checkpoints and Events stop there).
	ChainBroken bool `json:"chain_broken"`
	// Checkpoints is how many checkpoints were checked and found sound.
	Checkpoints int64 `json:"checkpoints"`
	// SealedThrough is the last event id the checkpoints cover.
	SealedThrough int64 `json:"sealed_through"`
	// Events is how many events were checked; Unsealed how many of them are
	// past the last checkpoint (sealed at a later pass).
	Events   int64 `json:"events"`
	Unsealed int64 `json:"unsealed"`
	// Pruned is how many sealed ids had no event because inlet retention
	// dropped their partition (webhook_ingress.retention_log names them); their
	// leaves are checked against the checkpoints' stored leaf hashes only.
	// A retention_log row is believed only when its period is no longer a
	// partition of events and holds no event, and, for an id of a checkpoint
	// that records the received_at range of its events (format v2, sealed
	// since 032), when its period overlaps that range; otherwise the id is a
	// MissingEvent whose reason names the row. An id of a v1 checkpoint
	// (sealed before 032, no range) gets the first checks only.
	Pruned int64 `json:"pruned"`
	// OccurredAtFilled counts sealed events whose occurred_at was NULL when
	// they were sealed (leaf format v2) and holds a value now, the rest of
	// the row intact: what inlet backfill stored does, legitimately, when a
	// source's occurred_at setting now finds the time in the stored bytes.
	// Not a problem, but not vouched for either: the owner could have
	// written any value (see the package doc). OccurredAtFilledIDs lists
	// them, at most VerifyOptions.MaxProblems, in id order.
	OccurredAtFilled    int64   `json:"occurred_at_filled"`
	OccurredAtFilledIDs []int64 `json:"occurred_at_filled_ids,omitempty"`
	// PayloadFilled counts sealed events whose payload was NULL when they
	// were sealed (leaf format v3) and is stored now, the rest of the row
	// intact: what inlet backfill stored does when a source keeps a JSON
	// copy. Not a problem: unlike a filled occurred_at, the payload is
	// checked, as every payload is, to be raw_body parsed (051).
	// PayloadFilledIDs lists them, at most VerifyOptions.MaxProblems, in id
	// order. A payload sealed as stored and NULL now is an AlteredEvent.
	PayloadFilled    int64   `json:"payload_filled"`
	PayloadFilledIDs []int64 `json:"payload_filled_ids,omitempty"`
	// Head is the newest checkpoint's hash (hex), Root its tree root.
	Head string `json:"head,omitempty"`
	Root string `json:"root,omitempty"`
}

// VerifyOptions tunes Verify.
type VerifyOptions struct {
	// Head, when set, is a checkpoint hash (hex) kept outside the database; the
	// chain must still contain it.
	Head string
	// MaxProblems caps the problems a report lists; the rest are only
	// counted (Report.ProblemsFound). Defaults to DefaultMaxProblems.
	MaxProblems int
}

// DefaultMaxProblems is VerifyOptions.MaxProblems' default.
const DefaultMaxProblems = 100

const verifyPage = 5000

// Verify recomputes every checkpoint from the events table and reports every
// problem: each altered, missing or out-of-order event, and the first break
// in the checkpoint chain (after which nothing can be checked). The error is
// for failures to read; problems are in the report. It reads one snapshot
// (REPEATABLE READ), taken after it holds ACCESS SHARE on events: a verify
// that starts during an inlet retention drop waits for it (up to ctx) and
// sees the period dropped, and no drop starts until it ends.
func Verify(ctx context.Context, db DB, opts VerifyOptions) (Report, error) {
	var head tlog.Hash
	if opts.Head != "" {
		b, err := hex.DecodeString(opts.Head)
		if err != nil || len(b) != tlog.HashSize {
			return Report{}, fmt.Errorf("audit: head %q is not a 64-digit hex hash", opts.Head)
		}
		copy(head[:], b)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("begin verify: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return Report{}, fmt.Errorf("begin verify: %w", err)
	}
	// Lock events before the snapshot is taken. The snapshot is the first
	// query's, taken before that query locks the tables it names: a verify
	// that starts while inlet retention drops a period (events held ACCESS
	// EXCLUSIVE) would wait and then go on with a snapshot from before the
	// drop's commit, where the drop's retention_log row is not yet visible
	// but its partition is already gone from the catalog, and report the
	// period's sealed events missing (review helper-192). LOCK is a utility
	// statement and takes no snapshot, so the first query's now comes after
	// any drop it waited for, and no drop starts until verify ends (every
	// drop locks the parent, drop_partition; ONLY spares locking each
	// partition here, the queries lock those they read). retention_log
	// needs no lock: a drop writes its row in the transaction that holds
	// events. The wait is the drop's and ends with it; ctx bounds it.
	if _, err := tx.Exec(ctx, "LOCK TABLE ONLY webhook_ingress.events IN ACCESS SHARE MODE"); err != nil {
		return Report{}, fmt.Errorf("verify: wait for a retention drop in progress (lock webhook_ingress.events): %w", err)
	}
	pruned, err := openPruned(ctx, tx)
	if err != nil {
		return Report{}, err
	}
	if opts.MaxProblems < 0 {
		return Report{}, fmt.Errorf("audit: MaxProblems %d must not be negative", opts.MaxProblems)
	}
	v := &verifier{tx: tx, events: &eventCursor{tx: tx, after: math.MinInt64}, pruned: pruned, stored: map[int64]tlog.Hash{},
		maxProblems: cmp.Or(opts.MaxProblems, DefaultMaxProblems)}
	rep, err := v.run(ctx, opts.Head != "", head)
	if err != nil {
		return Report{}, err
	}
	return rep, nil
}

type verifier struct {
	tx     pgx.Tx
	events *eventCursor
	// stored holds tlog's stored hashes that reading on can need: those of
	// the tree's frontier (one perfect subtree per set bit of its size),
	// and those added by the checkpoint being checked; pruned after each
	// checkpoint (keepFrontier), so memory stays one checkpoint's leaves
	// and log n hashes, not the whole history.
	stored map[int64]tlog.Hash
	pruned *prunes // ids retention_log says were dropped, read a page at a time
	rep    Report

	maxProblems int
}

// pruneClaim is a run of event ids [lo, hi) that a retention_log row says
// retention dropped with its period [start, end).
type pruneClaim struct {
	lo, hi     int64
	logID      int64
	start, end time.Time
	// periodIsPartition: the period overlaps a period partition still
	// attached; periodHasEvents: an event received in it is still in the
	// table. Either way the row did not drop that period.
	periodIsPartition, periodHasEvents bool
}

// prunes answers which claims name an id. Verify asks for ids in increasing
// order (checkpoint by checkpoint, each range in id order), so it sweeps the
// claims (by lo) once; runs of different rows may overlap. It reads them
// through a cursor in Verify's transaction, a page at a time, and keeps only
// that page and the claims still active: memory does not grow with the
// pruned history (every run of ids of every retention_log row, about one per
// duplicate delivery or rolled-back insert in a dropped period).
type prunes struct {
	tx     pgx.Tx
	page   []pruneClaim // the page read, by lo; page[pos:] not yet taken into active
	pos    int
	done   bool         // the cursor is exhausted: page is the last one
	active []pruneClaim // the claims with lo <= the last id asked and hi above it
}

// prunedCursor is the cursor Verify reads AuditPrunedIDs through, and
// prunedPage how many runs it fetches at a time.
const (
	prunedCursor = "audit_pruned_ids"
	prunedPage   = 5000
)

// at returns the claims whose run holds id, valid until the next call; id
// must be at least the id of the previous call.
func (p *prunes) at(ctx context.Context, id int64) ([]pruneClaim, error) {
	for {
		for ; p.pos < len(p.page) && p.page[p.pos].lo <= id; p.pos++ {
			if p.page[p.pos].hi > id {
				p.active = append(p.active, p.page[p.pos])
			}
		}
		if p.pos < len(p.page) || p.done {
			break
		}
		if err := p.fetch(ctx); err != nil {
			return nil, err
		}
	}
	p.active = slices.DeleteFunc(p.active, func(c pruneClaim) bool { return c.hi <= id })
	return p.active, nil
}

// openPruned declares the cursor over AuditPrunedIDs and reads its first
// page: the whole query (retention_log, the partitions, the probes for
// events left in each period, the sort by lo) runs then, at the start of
// Verify as before, and the server hands the sorted runs over a page at a
// time; it lives until Verify's transaction ends.
func openPruned(ctx context.Context, tx pgx.Tx) (*prunes, error) {
	if _, err := tx.Exec(ctx, "DECLARE "+prunedCursor+" NO SCROLL CURSOR FOR\n"+queries.AuditPrunedIDs); err != nil {
		return nil, fmt.Errorf("read retention_log: declare cursor %s: %w", prunedCursor, err)
	}
	p := &prunes{tx: tx}
	if err := p.fetch(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// fetch replaces the page with the next one.
func (p *prunes) fetch(ctx context.Context) error {
	after := int64(0)
	if len(p.page) > 0 {
		after = p.page[len(p.page)-1].lo
	}
	rows, err := p.tx.Query(ctx, "FETCH FORWARD "+strconv.Itoa(prunedPage)+" FROM "+prunedCursor)
	if err != nil {
		return fmt.Errorf("read retention_log: runs of ids after %d: %w", after, err)
	}
	page, err := pgx.CollectRows(rows, pgx.RowToStructByPos[queries.AuditPrunedIDsRow])
	if err != nil {
		return fmt.Errorf("read retention_log: runs of ids after %d: %w", after, err)
	}
	p.page, p.pos, p.done = p.page[:0], 0, len(page) < prunedPage
	for _, r := range page {
		p.page = append(p.page, pruneClaim{lo: r.Lo, hi: r.Hi, logID: r.LogID, start: r.PeriodStart, end: r.PeriodEnd,
			periodIsPartition: r.PeriodIsPartition, periodHasEvents: r.PeriodHasEvents})
	}
	return nil
}

// prunedReason is why none of claims shows that retention dropped the
// sealed event id of cp ("" when one does: the id was pruned). A claim
// holds when its row's period is no longer a partition and holds no event
// and, when cp records the received_at range of its events (v2), overlaps
// that range; see the package doc. The reason given is the first claim's.
func prunedReason(cp Checkpoint, id int64, claims []pruneClaim) string {
	reason := ""
	for _, c := range claims {
		var why string
		switch {
		case c.periodIsPartition:
			why = "but a partition of events still covers that period: it was not dropped"
		case c.periodHasEvents:
			why = "but events received in that period are still in the table: it was not dropped"
		case cp.hasReceivedRange() && (c.start.After(*cp.MaxReceivedAt) || !cp.MinReceivedAt.Before(c.end)):
			why = fmt.Sprintf("but checkpoint %d sealed only events received %s..%s", cp.Seq, stamp(*cp.MinReceivedAt), stamp(*cp.MaxReceivedAt))
		default:
			return ""
		}
		if reason == "" {
			reason = fmt.Sprintf("event %d missing: sealed by checkpoint %d, no longer in the table; retention_log row %d claims it was dropped "+
				"with the period [%s, %s), %s", id, cp.Seq, c.logID, stamp(c.start), stamp(c.end), why)
		}
	}
	return reason
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func (v *verifier) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		h, ok := v.stored[x]
		if !ok {
			return nil, fmt.Errorf("stored hash %d not computed or no longer kept", x)
		}
		out[i] = h
	}
	return out, nil
}

// keepFrontier drops the stored hashes a tree of size n no longer needs:
// appending a record reads only its frontier's, and so does its root.
func (v *verifier) keepFrontier(n int64) {
	keep := map[int64]bool{}
	var start int64
	for level := 62; level >= 0; level-- {
		if n&(1<<level) == 0 {
			continue
		}
		keep[tlog.StoredHashIndex(level, start>>level)] = true
		start += 1 << level
	}
	for x := range v.stored {
		if !keep[x] {
			delete(v.stored, x)
		}
	}
}

func (v *verifier) problem(k ProblemKind, seq, id int64, format string, args ...any) *Problem {
	return &Problem{Kind: k, Checkpoint: seq, EventID: id, Reason: fmt.Sprintf(format, args...)}
}

// add records p: listed while under the cap, counted always.
func (v *verifier) add(p *Problem) {
	v.rep.ProblemsFound++
	if len(v.rep.Problems) < v.maxProblems {
		v.rep.Problems = append(v.rep.Problems, *p)
	} else {
		v.rep.ProblemsTruncated = true
	}
}

func (v *verifier) run(ctx context.Context, checkHead bool, head tlog.Hash) (Report, error) {
	var prev Checkpoint
	headFound := false
	for {
		page, err := readCheckpoints(ctx, v.tx, prev.Seq)
		if err != nil {
			return Report{}, err
		}
		for _, cp := range page {
			p, err := v.checkpoint(ctx, prev, cp)
			if err != nil {
				return Report{}, err
			}
			if p != nil {
				// The chain is broken: nothing after it can be checked.
				v.add(p)
				v.rep.ChainBroken = true
				return v.finish(), nil
			}
			if checkHead && cp.Hash == head {
				headFound = true
			}
			prev = cp
			v.rep.Checkpoints++
			v.rep.SealedThrough = cp.LastEventID
			v.rep.Head, v.rep.Root = cp.HashHex(), cp.RootHex()
		}
		if len(page) < checkpointPage {
			break
		}
	}
	// Past the last checkpoint: events not sealed yet. Only their bodies can
	// be checked, and that each id is there once (the rows come in id order).
	var lastUnsealed int64
	for {
		e, ok, err := v.events.next(ctx)
		if err != nil {
			return Report{}, err
		}
		if !ok {
			break
		}
		v.rep.Events++
		if e.ID <= v.rep.SealedThrough {
			// A second row with a sealed id (the last one's: the loop above
			// reports the others).
			v.add(v.problem(OutOfOrderEvent, 0, e.ID, "event %d inserted out of order: a second row with sealed id %d (received_at %s)",
				e.ID, e.ID, e.ReceivedAt.UTC().Format(time.RFC3339Nano)))
			continue
		}
		if e.ID == lastUnsealed {
			// A second row with an unsealed id: sealing would take both, as
			// two leaves (review helper-96).
			v.add(v.problem(OutOfOrderEvent, 0, e.ID, "event %d inserted out of order: a second row with id %d (received_at %s)",
				e.ID, e.ID, e.ReceivedAt.UTC().Format(time.RFC3339Nano)))
			continue
		}
		lastUnsealed = e.ID
		v.rep.Unsealed++
		if !e.bodyOK {
			v.add(v.problem(AlteredEvent, 0, e.ID, "event %d altered: raw_body no longer hashes to body_sha256", e.ID))
		} else if !e.payloadOK {
			v.add(v.problem(AlteredEvent, 0, e.ID, "event %d altered: payload is not raw_body parsed", e.ID))
		}
	}
	if checkHead && !headFound {
		v.add(v.problem(BrokenChain, 0, 0, "checkpoint %x is not in the chain: checkpoints were removed or rewritten", head[:]))
		v.rep.ChainBroken = true
	}
	return v.finish(), nil
}

func (v *verifier) finish() Report {
	v.rep.OK = v.rep.ProblemsFound == 0
	if len(v.rep.Problems) > 0 {
		v.rep.Problem = &v.rep.Problems[0]
	}
	if v.rep.Problems == nil {
		v.rep.Problems = []Problem{}
	}
	return v.rep
}

// checkpoint checks cp against its predecessor, then the events it covers.
// It returns a broken chain; the events' problems it records (v.add) and
// goes on.
func (v *verifier) checkpoint(ctx context.Context, prev, cp Checkpoint) (*Problem, error) {
	broken := func(format string, args ...any) (*Problem, error) {
		return v.problem(BrokenChain, cp.Seq, 0, "checkpoint chain broken at checkpoint %d: "+format, append([]any{cp.Seq}, args...)...), nil
	}
	if cp.Seq != prev.Seq+1 {
		return v.problem(BrokenChain, prev.Seq+1, 0, "checkpoint chain broken: checkpoint %d is missing (next is %d)", prev.Seq+1, cp.Seq), nil
	}
	if (cp.MinReceivedAt == nil) != (cp.MaxReceivedAt == nil) {
		return broken("altered (one end of its received_at range is NULL)")
	}
	if checkpointHash(cp) != cp.Hash {
		return broken("altered (its hash no longer matches its fields)")
	}
	if cp.Prev != prev.Hash {
		return broken("prev_hash does not match checkpoint %d (altered or replaced)", prev.Seq)
	}
	count := cp.LastEventID - cp.FirstEventID + 1
	if cp.FirstEventID != prev.LastEventID+1 || count < 1 || cp.TreeSize != prev.TreeSize+count || int64(len(cp.leaves)) != count {
		return broken("covers ids %d..%d, tree size %d: not contiguous with checkpoint %d", cp.FirstEventID, cp.LastEventID, cp.TreeSize, prev.Seq)
	}
	// A set, not slices.Contains per leaf: that was quadratic in a checkpoint
	// of many skipped ids. Membership is all that counts (the sealer writes
	// them ascending, a rewritten checkpoint may hold any list).
	skipped := make(map[int64]struct{}, len(cp.SkippedIDs))
	for _, id := range cp.SkippedIDs {
		skipped[id] = struct{}{}
	}
	for i, h := range cp.leaves {
		id := cp.FirstEventID + int64(i)
		_, isSkipped := skipped[id]
		if (h == skipLeaf(id)) != isSkipped {
			return broken("leaf of id %d disagrees with skipped_ids", id)
		}
	}
	for i, h := range cp.leaves {
		n := prev.TreeSize + int64(i)
		hs, err := tlog.StoredHashesForRecordHash(n, h, v)
		if err != nil {
			return nil, fmt.Errorf("extend tree at checkpoint %d: %w", cp.Seq, err)
		}
		at := tlog.StoredHashCount(n)
		for j, x := range hs {
			v.stored[at+int64(j)] = x
		}
	}
	root, err := tlog.TreeHash(cp.TreeSize, v)
	if err != nil {
		return nil, fmt.Errorf("tree hash at checkpoint %d: %w", cp.Seq, err)
	}
	v.keepFrontier(cp.TreeSize)
	if root != cp.Root {
		return broken("its leaves no longer hash to its root")
	}

	// The events of the range, in id order.
	for i, want := range cp.leaves {
		id := cp.FirstEventID + int64(i)
		for {
			e, ok, err := v.events.peek(ctx)
			if err != nil {
				return nil, err
			}
			if !ok || e.ID > id {
				if want != skipLeaf(id) {
					claims, err := v.pruned.at(ctx, id)
					if err != nil {
						return nil, err
					}
					if len(claims) == 0 {
						v.add(v.problem(MissingEvent, cp.Seq, id, "event %d missing: sealed by checkpoint %d, no longer in the table", id, cp.Seq))
						break
					}
					if reason := prunedReason(cp, id, claims); reason != "" {
						v.add(v.problem(MissingEvent, cp.Seq, id, "%s", reason))
						break
					}
					v.rep.Pruned++
				}
				break
			}
			v.events.pos++
			v.rep.Events++
			if e.ID < id {
				if cp.Seq == 1 && e.ID < cp.FirstEventID {
					// Before the first checkpoint's range: an id no seal covers.
					v.add(v.problem(OutOfOrderEvent, cp.Seq, e.ID, "event %d inserted out of order: below the first sealed id %d", e.ID, cp.FirstEventID))
				} else {
					// A second row with an id already checked (the key is
					// (id, received_at)): not the event sealed.
					v.add(v.problem(OutOfOrderEvent, cp.Seq, e.ID, "event %d inserted out of order: a second row with sealed id %d (received_at %s)",
						e.ID, e.ID, e.ReceivedAt.UTC().Format(time.RFC3339Nano)))
				}
				continue
			}
			if want == skipLeaf(id) {
				v.add(v.problem(OutOfOrderEvent, cp.Seq, id, "event %d inserted out of order: checkpoint %d sealed id %d as skipped", id, cp.Seq, id))
				break
			}
			switch m := matchLeaf(e.Event, want); {
			case m == leafPayloadRemoved:
				v.add(v.problem(AlteredEvent, cp.Seq, id, "event %d altered: checkpoint %d sealed it with its payload (the parsed copy of the body) stored, and payload is NULL now",
					id, cp.Seq))
			case !m.intact():
				v.add(v.problem(AlteredEvent, cp.Seq, id, "event %d altered: its leaf no longer matches checkpoint %d", id, cp.Seq))
			case !e.bodyOK:
				v.add(v.problem(AlteredEvent, cp.Seq, id, "event %d altered: raw_body no longer hashes to body_sha256", id))
			case !e.payloadOK:
				v.add(v.problem(AlteredEvent, cp.Seq, id, "event %d altered: payload is not raw_body parsed", id))
			default:
				if m.occurredAtFilled() {
					v.rep.OccurredAtFilled++
					if len(v.rep.OccurredAtFilledIDs) < v.maxProblems {
						v.rep.OccurredAtFilledIDs = append(v.rep.OccurredAtFilledIDs, id)
					}
				}
				if m.payloadFilled() {
					v.rep.PayloadFilled++
					if len(v.rep.PayloadFilledIDs) < v.maxProblems {
						v.rep.PayloadFilledIDs = append(v.rep.PayloadFilledIDs, id)
					}
				}
			}
			break
		}
	}
	return nil, nil
}

// leafMatch is how an event row matches the leaf a checkpoint sealed for its
// id: leafAltered, leafPayloadRemoved, or leafIntact with the fills since
// sealing that it names (leafOccurredAtFilled, leafPayloadFilled, or both
// together).
type leafMatch uint8

const (
	// leafAltered: the row hashes to no form of the leaf: it changed.
	leafAltered leafMatch = 0
	// leafIntact: the leaf is the row's, in format v3, v2 (sealed before
	// 078_audit_payload_stored: whether payload is stored not in it) or v1
	// (sealed before 075_audit_occurred_at: occurred_at not in it either).
	leafIntact leafMatch = 1
	// leafOccurredAtFilled: a v2 or v3 leaf sealed while occurred_at was
	// NULL, which now holds a value; every other sealed column intact.
	leafOccurredAtFilled leafMatch = leafIntact | 2
	// leafPayloadFilled: a v3 leaf sealed while payload was NULL, which is
	// stored now; every other sealed column intact.
	leafPayloadFilled leafMatch = leafIntact | 4
	// leafPayloadRemoved: a v3 leaf sealed while payload was stored, which
	// is NULL now, every other sealed column intact (or occurred_at filled):
	// altered.
	leafPayloadRemoved leafMatch = 8
)

// intact: the row matches its leaf, fills since sealing aside.
func (m leafMatch) intact() bool { return m&leafIntact != 0 }

// occurredAtFilled: intact, occurred_at filled since sealing.
func (m leafMatch) occurredAtFilled() bool { return m&leafOccurredAtFilled == leafOccurredAtFilled }

// payloadFilled: intact, payload filled since sealing.
func (m leafMatch) payloadFilled() bool { return m&leafPayloadFilled == leafPayloadFilled }

// matchLeaf says how e matches want, the leaf sealed for its id. The leaf
// formats start with different tags, so a sealed leaf is of one form only:
// the row's v1 hash, which leaves occurred_at and payload out, can equal a
// leaf a sealer before 075 wrote, never a v2 or v3 one, and its v2 hash a
// leaf a sealer before 078 wrote, never a v3 one, whatever occurred_at and
// payload now hold. An intact row matches at the first hash (v3) or, sealed
// before 078, at the second (v2) or third (v1). inlet backfill stored fills
// occurred_at and payload only where they are NULL, so only a NULL is
// tried in place of a value the row holds now; a NULL payload is tried as
// stored only to name a payload removed.
func matchLeaf(e Event, want tlog.Hash) leafMatch {
	if eventLeafV3(e, e.OccurredAt, e.PayloadStored) == want || eventLeafV2(e, e.OccurredAt) == want || eventLeafV1(e) == want {
		return leafIntact
	}
	if e.OccurredAt != nil && (eventLeafV3(e, nil, e.PayloadStored) == want || eventLeafV2(e, nil) == want) {
		return leafOccurredAtFilled
	}
	if e.PayloadStored {
		switch {
		case eventLeafV3(e, e.OccurredAt, false) == want:
			return leafPayloadFilled
		case e.OccurredAt != nil && eventLeafV3(e, nil, false) == want:
			return leafOccurredAtFilled | leafPayloadFilled
		}
		return leafAltered
	}
	if eventLeafV3(e, e.OccurredAt, true) == want || (e.OccurredAt != nil && eventLeafV3(e, nil, true) == want) {
		return leafPayloadRemoved
	}
	return leafAltered
}

const checkpointPage = 16

// readCheckpoints reads the next page of checkpoints after seq.
func readCheckpoints(ctx context.Context, tx pgx.Tx, after int64) ([]Checkpoint, error) {
	rows, err := queries.New(tx).AuditCheckpoints(ctx, queries.AuditCheckpointsParams{AfterSeq: after, BatchSize: checkpointPage})
	if err != nil {
		return nil, fmt.Errorf("read checkpoints after %d: %w", after, err)
	}
	var out []Checkpoint
	for _, r := range rows {
		cp := Checkpoint{Seq: r.Seq, FirstEventID: r.FirstEventID, LastEventID: r.LastEventID, TreeSize: r.TreeSize,
			SkippedIDs: r.SkippedIds, CreatedAt: r.CreatedAt, MinReceivedAt: r.MinReceivedAt, MaxReceivedAt: r.MaxReceivedAt}
		// The table's constraints fix these sizes; a mismatch fails the hash check.
		cp.Root, _ = toHash(r.RootHash)
		cp.Prev, _ = toHash(r.PrevHash)
		cp.Hash, _ = toHash(r.Hash)
		cp.leaves, _ = splitHashes(r.LeafHashes)
		cp.frontier, _ = splitHashes(r.Frontier)
		out = append(out, cp)
	}
	return out, nil
}

type verifyEvent struct {
	Event
	bodyOK bool
	// payloadOK: payload is NULL or raw_body parsed (051); whether a NULL
	// one was sealed as stored is the leaf's to say (v3).
	payloadOK bool
}

// eventCursor reads events in primary key order (id, received_at), a page
// at a time.
type eventCursor struct {
	tx      pgx.Tx
	after   int64
	afterAt time.Time // with after, the key of the last row read (ids start at 1)
	page    []verifyEvent
	pos     int
	done    bool
}

func (c *eventCursor) peek(ctx context.Context) (verifyEvent, bool, error) {
	if c.pos == len(c.page) {
		if c.done {
			return verifyEvent{}, false, nil
		}
		if err := c.fill(ctx); err != nil {
			return verifyEvent{}, false, err
		}
		if len(c.page) == 0 {
			return verifyEvent{}, false, nil
		}
	}
	return c.page[c.pos], true, nil
}

func (c *eventCursor) next(ctx context.Context) (verifyEvent, bool, error) {
	e, ok, err := c.peek(ctx)
	if ok {
		c.pos++
	}
	return e, ok, err
}

func (c *eventCursor) fill(ctx context.Context) error {
	rows, err := queries.New(c.tx).AuditEventsToVerify(ctx, queries.AuditEventsToVerifyParams{AfterID: c.after, AfterReceivedAt: c.afterAt,
		BatchSize: verifyPage})
	if err != nil {
		return fmt.Errorf("read events after id %d: %w", c.after, err)
	}
	c.page, c.pos = c.page[:0], 0
	for _, r := range rows {
		c.page = append(c.page, verifyEvent{Event: Event{ID: r.ID, Provider: r.Provider, ExternalEventID: r.ExternalEventID,
			EventType: r.EventType, ReceivedAt: r.ReceivedAt, BodySHA256: r.BodySha256, HeadersSHA256: r.HeadersSha256,
			Scheme: r.Scheme, RequestURI: r.RequestUri, SignatureVerified: r.SignatureVerified, SecretIndex: int(r.SecretIndex),
			OccurredAt: r.OccurredAt, PayloadStored: r.PayloadStored},
			bodyOK: r.BodyIntact, payloadOK: r.PayloadIntact})
	}
	if len(c.page) < verifyPage {
		c.done = true
	}
	if len(c.page) > 0 {
		last := c.page[len(c.page)-1]
		c.after, c.afterAt = last.ID, last.ReceivedAt
	}
	return nil
}
