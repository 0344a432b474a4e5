package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"golang.org/x/mod/sumdb/tlog"
)

// Event is what a leaf seals of one row of webhook_ingress.events.
type Event struct {
	ID              int64
	Provider        string
	ExternalEventID string
	EventType       string
	ReceivedAt      time.Time
	BodySHA256      []byte
	// HeadersSHA256 is SHA-256 of headers::text as Postgres prints it.
	HeadersSHA256 []byte
	// Scheme, RequestURI, SignatureVerified and SecretIndex (-1 for NULL)
	// are sealed too: flipping signature_verified, or the URI a Twilio
	// signature covers, would otherwise change what re-verification checks.
	Scheme            string
	RequestURI        string
	SignatureVerified bool
	SecretIndex       int
	// OccurredAt is the provider's own event time (nil for NULL), sealed
	// since leaf format v2 (075_audit_occurred_at): auditors query it
	// (delivery lag, --occurred-after), so moving it is tampering.
	OccurredAt *time.Time
	// PayloadStored says that payload, the parsed copy of the body that
	// auditors' JSON-path queries read, is not NULL: sealed since leaf
	// format v3 (078_audit_payload_stored), so a payload removed after
	// sealing is seen (its content is checked against raw_body, 051). The
	// sealer learns only this, never the payload.
	PayloadStored bool
}

const (
	eventLeafTag = "inlet-audit-event-v1\n"
	// eventLeafV2Tag is the form of an event leaf that seals occurred_at
	// too (075_audit_occurred_at): what the sealer writes now. Verify
	// still accepts v1 leaves, which the tags tell apart (matchLeaf).
	eventLeafV2Tag = "inlet-audit-event-v2\n"
	// eventLeafV3Tag is the form that also seals whether payload is stored
	// (078_audit_payload_stored): what the sealer writes now. Verify still
	// accepts v1 and v2 leaves.
	eventLeafV3Tag = "inlet-audit-event-v3\n"
	skipLeafTag    = "inlet-audit-skip-v1\n"
	checkpointTag  = "inlet-audit-checkpoint-v1\n"
	// checkpointV2Tag is the form of a checkpoint that records the
	// received_at range of its events (032_audit_checkpoint_received_range).
	checkpointV2Tag = "inlet-audit-checkpoint-v2\n"
)

//nolint:gosec // G115: the audit format encodes each integer as its fixed-width two's-complement bits; lengths are far below 2^32
func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// eventLeaf is the RFC 6962 leaf hash of e as the sealer writes it now:
// format v3, occurred_at and whether payload is stored included.
func eventLeaf(e Event) tlog.Hash { return eventLeafV3(e, e.OccurredAt, e.PayloadStored) }

// eventLeafV1 is the leaf hash of e in format v1, which every sealer before
// 075_audit_occurred_at wrote: occurred_at is not in it.
func eventLeafV1(e Event) tlog.Hash {
	return tlog.RecordHash(appendEventFields(eventLeafBuf(e, eventLeafTag), e))
}

// eventLeafV2 is the leaf hash of e in format v2 with occurred as its
// occurred_at (nil: NULL): the v1 fields after the v2 tag, then a byte 0
// for NULL, or 1 and int64 occurred_at (Unix microseconds, UTC).
func eventLeafV2(e Event, occurred *time.Time) tlog.Hash {
	return tlog.RecordHash(appendOccurredAt(appendEventFields(eventLeafBuf(e, eventLeafV2Tag), e), occurred))
}

// eventLeafV3 is the leaf hash of e in format v3 with occurred as its
// occurred_at and payloadStored as whether its payload is stored: v2's
// fields after the v3 tag, then a byte 1 when payload is stored, else 0.
func eventLeafV3(e Event, occurred *time.Time, payloadStored bool) tlog.Hash {
	b := appendOccurredAt(appendEventFields(eventLeafBuf(e, eventLeafV3Tag), e), occurred)
	if payloadStored {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return tlog.RecordHash(b)
}

// appendOccurredAt appends occurred as leaf formats v2 and v3 seal it: a
// byte 0 for NULL, or 1 and int64 occurred_at (Unix microseconds, UTC).
func appendOccurredAt(b []byte, occurred *time.Time) []byte {
	if occurred == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	return binary.BigEndian.AppendUint64(b, uint64(occurred.UTC().UnixMicro()))
}

// eventLeafBuf is a buffer for e's leaf data, holding tag.
func eventLeafBuf(e Event, tag string) []byte {
	b := make([]byte, 0, 160+len(e.Provider)+len(e.ExternalEventID)+len(e.EventType)+len(e.Scheme)+len(e.RequestURI))
	return append(b, tag...)
}

// appendEventFields appends the fields of e both leaf formats seal, in
// order (see the package doc).
//
//nolint:gosec // G115: the audit format encodes each integer as its fixed-width two's-complement bits; lengths are far below 2^32
func appendEventFields(b []byte, e Event) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(e.ID))
	b = appendString(b, e.Provider)
	b = appendString(b, e.ExternalEventID)
	b = appendString(b, e.EventType)
	b = binary.BigEndian.AppendUint64(b, uint64(e.ReceivedAt.UTC().UnixMicro()))
	b = append(b, e.BodySHA256...)
	b = append(b, e.HeadersSHA256...)
	b = appendString(b, e.Scheme)
	b = appendString(b, e.RequestURI)
	if e.SignatureVerified {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return binary.BigEndian.AppendUint32(b, uint32(int32(e.SecretIndex)))
}

// skipLeaf is the leaf hash of an id that has no event.
//
//nolint:gosec // G115: the audit format encodes each integer as its fixed-width two's-complement bits; lengths are far below 2^32
func skipLeaf(id int64) tlog.Hash {
	b := binary.BigEndian.AppendUint64([]byte(skipLeafTag), uint64(id))
	return tlog.RecordHash(b)
}

// Checkpoint is one row of webhook_ingress.audit_checkpoints.
type Checkpoint struct {
	Seq          int64     `json:"seq"`
	FirstEventID int64     `json:"first_event_id"`
	LastEventID  int64     `json:"last_event_id"`
	TreeSize     int64     `json:"tree_size"`
	Root         tlog.Hash `json:"-"`
	Prev         tlog.Hash `json:"-"`
	SkippedIDs   []int64   `json:"skipped_ids"`
	CreatedAt    time.Time `json:"created_at"`
	// MinReceivedAt and MaxReceivedAt are the least and greatest received_at
	// of the events the checkpoint seals: what a prune of its ids must
	// overlap (see the package doc). Both nil for a checkpoint sealed before
	// 032 (format v1) or covering only skipped ids.
	MinReceivedAt *time.Time `json:"min_received_at,omitempty"`
	MaxReceivedAt *time.Time `json:"max_received_at,omitempty"`
	Hash          tlog.Hash  `json:"-"`

	leaves   []tlog.Hash
	frontier []tlog.Hash
}

// RootHex and HashHex are the hashes as hex, for people and JSON.
func (c Checkpoint) RootHex() string { return fmt.Sprintf("%x", c.Root[:]) }

// HashHex is the checkpoint's own hash as hex: the chain head to keep outside
// the database.
func (c Checkpoint) HashHex() string { return fmt.Sprintf("%x", c.Hash[:]) }

// hasReceivedRange reports whether c records the received_at range of its
// events (format v2).
func (c Checkpoint) hasReceivedRange() bool { return c.MinReceivedAt != nil && c.MaxReceivedAt != nil }

// checkpointHash is the checkpoint's own hash (see the package doc): v2 when
// it records a received_at range, else v1, as every checkpoint sealed before
// 032 was.
//
//nolint:gosec // G115: the audit format encodes each integer as its fixed-width two's-complement bits; lengths are far below 2^32
func checkpointHash(c Checkpoint) tlog.Hash {
	b := make([]byte, 0, 256+8*len(c.SkippedIDs))
	if c.hasReceivedRange() {
		b = append(b, checkpointV2Tag...)
	} else {
		b = append(b, checkpointTag...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(c.Seq))
	b = binary.BigEndian.AppendUint64(b, uint64(c.FirstEventID))
	b = binary.BigEndian.AppendUint64(b, uint64(c.LastEventID))
	b = binary.BigEndian.AppendUint64(b, uint64(c.TreeSize))
	b = append(b, c.Root[:]...)
	b = append(b, c.Prev[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(c.CreatedAt.UTC().UnixMicro()))
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.SkippedIDs)))
	for _, id := range c.SkippedIDs {
		b = binary.BigEndian.AppendUint64(b, uint64(id))
	}
	if c.hasReceivedRange() {
		b = binary.BigEndian.AppendUint64(b, uint64(c.MinReceivedAt.UTC().UnixMicro()))
		b = binary.BigEndian.AppendUint64(b, uint64(c.MaxReceivedAt.UTC().UnixMicro()))
	}
	return sha256.Sum256(b)
}

// Frontier arithmetic: the roots of the perfect subtrees a tree of size n
// decomposes into, largest first (one per set bit of n). Appending a leaf
// merges equal-sized subtrees; the root folds them from the right, as RFC
// 6962's MTH does. Verify recomputes roots with tlog itself.

func frontierAppend(f []tlog.Hash, n int64, leaf tlog.Hash) []tlog.Hash {
	f = append(f, leaf)
	for k := n; k&1 == 1; k >>= 1 {
		l := len(f)
		f[l-2] = tlog.NodeHash(f[l-2], f[l-1])
		f = f[:l-1]
	}
	return f
}

func frontierRoot(f []tlog.Hash) tlog.Hash {
	if len(f) == 0 {
		return tlog.Hash{}
	}
	r := f[len(f)-1]
	for i := len(f) - 2; i >= 0; i-- {
		r = tlog.NodeHash(f[i], r)
	}
	return r
}

func joinHashes(hs []tlog.Hash) []byte {
	b := make([]byte, 0, len(hs)*tlog.HashSize)
	for _, h := range hs {
		b = append(b, h[:]...)
	}
	return b
}

func splitHashes(b []byte) ([]tlog.Hash, error) {
	if len(b)%tlog.HashSize != 0 {
		return nil, fmt.Errorf("%d bytes is not a whole number of hashes", len(b))
	}
	hs := make([]tlog.Hash, len(b)/tlog.HashSize)
	for i := range hs {
		copy(hs[i][:], b[i*tlog.HashSize:])
	}
	return hs, nil
}

func toHash(b []byte) (tlog.Hash, error) {
	var h tlog.Hash
	if len(b) != tlog.HashSize {
		return h, fmt.Errorf("hash of %d bytes, want %d", len(b), tlog.HashSize)
	}
	copy(h[:], b)
	return h, nil
}
