package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/inlet-dev/inlet/internal/loop"
	"github.com/inlet-dev/inlet/schema/queries"
)

// DB is what the sealer and Verify need: a pool or a connection.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Sentinel errors of SealOnce.
var (
	// ErrTampered means the log holds what no writer of Inlet writes (a
	// second row with one id): the sealer stops rather than seal it.
	ErrTampered = errors.New("audit: the event log was tampered with")
	// ErrNothingToSeal means no event is past the horizon yet.
	ErrNothingToSeal = errors.New("audit: nothing to seal yet")
	// ErrBusy means another sealer holds the seal lock.
	ErrBusy = errors.New("audit: another sealer is sealing")
)

// sealLockKey is the advisory lock key of sealers: "iaudit" in ASCII.
const sealLockKey int64 = 0x696175646974

// Config configures a Sealer.
type Config struct {
	// DB is the database, as webhook_sealer (or any role with its grants).
	// Required.
	DB DB
	// Grace is how old an event must be before it is sealed, and how long a
	// pass that reaches a gap in the ids waits for the inserts that were in
	// flight when it saw the gap to end (a gap is sealed as skipped only once
	// they have; otherwise it waits for a later pass). Safety does not depend
	// on it. Defaults to 5s.
	Grace time.Duration
	// Interval is the time between passes of Start. Defaults to 1m.
	Interval time.Duration
	// MaxLeaves caps the ids one checkpoint covers. Defaults to 10000.
	MaxLeaves int
	// Logger receives one line per checkpoint and per failed pass. Defaults to
	// discarding.
	Logger *slog.Logger
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Grace = cmp.Or(c.Grace, 5*time.Second)
	c.Interval = cmp.Or(c.Interval, time.Minute)
	c.MaxLeaves = cmp.Or(c.MaxLeaves, 10000)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.DB == nil:
		return errors.New("audit: Config.DB is required")
	case c.Grace < 0:
		return fmt.Errorf("audit: Config.Grace %s must not be negative", c.Grace)
	case c.Interval <= 0:
		return fmt.Errorf("audit: Config.Interval %s must be positive", c.Interval)
	case c.MaxLeaves < 1:
		return fmt.Errorf("audit: Config.MaxLeaves %d must be at least 1", c.MaxLeaves)
	}
	return nil
}

// Sealer appends checkpoints over the event log; see the package doc.
type Sealer struct {
	cfg Config

	mu      sync.Mutex
	running bool
	loops   loop.Group

	gaps gapState

	// beforeInsert, when set (tests), runs after the events are read and
	// before the checkpoint is written, inside the seal transaction.
	beforeInsert func()
	// leaf, when set (tests), is the event leaf written instead of
	// eventLeaf's: eventLeafV1 seals as every sealer before 075 did.
	leaf func(Event) tlog.Hash
	// read, when set (tests), reads the events to seal instead of
	// readEventsToSeal: as a sealer of an older schema read them.
	read func(ctx context.Context, tx pgx.Tx, first int64, limit int) ([]Event, error)
}

// NewSealer returns a sealer of cfg.
func NewSealer(cfg Config) (*Sealer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Sealer{cfg: cfg}, nil
}

// Start seals at once and then every Interval, in the background, until Stop
// or ctx is done. A failed pass is logged and retried at the next interval.
func (s *Sealer) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return errors.New("audit: sealer already started")
	}
	s.running = true
	s.loops.Go(ctx, s.loop)
	return nil
}

// Stop stops the background passes and waits for the current one to end.
// The sealer may then be started again.
func (s *Sealer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loops.Stop()
	s.running = false
}

func (s *Sealer) loop(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := s.Seal(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("audit seal pass failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Seal runs one pass: checkpoints until everything past the horizon is
// sealed. It returns the checkpoints written (none when there was nothing to
// seal or another sealer was at work).
//
// A pass that stops at a gap it cannot judge yet waits, once and for at most
// Grace, for the inserts in flight when it saw the gap to end, and goes on.
func (s *Sealer) Seal(ctx context.Context) ([]Checkpoint, error) {
	var out []Checkpoint
	waited := false
	for {
		cp, gap, err := s.sealOnce(ctx)
		if errors.Is(err, ErrBusy) {
			return out, nil
		}
		if err != nil && !errors.Is(err, ErrNothingToSeal) {
			return out, err
		}
		if err == nil {
			out = append(out, cp)
			if cp.LastEventID-cp.FirstEventID+1 == int64(s.cfg.MaxLeaves) {
				continue
			}
		}
		if gap == 0 || waited {
			return out, nil // caught up with the horizon
		}
		waited = true
		if ok, err := s.awaitGap(ctx, gap); err != nil || !ok {
			return out, err
		}
	}
}

// SealOnce writes the next checkpoint, covering at most MaxLeaves ids, or
// returns ErrNothingToSeal or ErrBusy.
func (s *Sealer) SealOnce(ctx context.Context) (Checkpoint, error) {
	cp, _, err := s.sealOnce(ctx)
	return cp, err
}

// sealOnce is SealOnce, also returning the id of the gap it stopped at
// because inserts that may hold it could still be running (0 when none).
func (s *Sealer) sealOnce(ctx context.Context) (Checkpoint, int64, error) {
	var cp Checkpoint
	var gap int64
	err := readCommitted(ctx, s.cfg.DB, func(tx pgx.Tx) error {
		q := queries.New(tx)
		ok, err := q.AuditTrySealLock(ctx, sealLockKey)
		if err != nil {
			return fmt.Errorf("take seal lock: %w", err)
		}
		if !ok {
			return ErrBusy
		}
		var now time.Time
		if err := tx.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
			return fmt.Errorf("read database time: %w", err)
		}
		// Before the events are read: what the gaps among them may be sealed as
		// skipped up to.
		settled, err := s.probe(ctx, tx)
		if err != nil {
			return err
		}
		prev, err := lastCheckpoint(ctx, tx)
		if err != nil {
			return err
		}
		next, stoppedAt, err := s.nextCheckpoint(ctx, tx, prev, now, settled)
		gap = stoppedAt
		if err != nil {
			return err
		}
		if s.beforeInsert != nil {
			s.beforeInsert()
		}
		if err := q.AuditInsertCheckpoint(ctx, queries.AuditInsertCheckpointParams{
			Seq: next.Seq, FirstEventID: next.FirstEventID, LastEventID: next.LastEventID, TreeSize: next.TreeSize,
			RootHash: next.Root[:], PrevHash: next.Prev[:], SkippedIds: next.SkippedIDs,
			LeafHashes: joinHashes(next.leaves), Frontier: joinHashes(next.frontier), CreatedAt: next.CreatedAt, Hash: next.Hash[:],
			MinReceivedAt: next.MinReceivedAt, MaxReceivedAt: next.MaxReceivedAt,
		}); err != nil {
			return fmt.Errorf("insert checkpoint %d: %w", next.Seq, err)
		}
		cp = next
		return nil
	})
	if err != nil {
		return Checkpoint{}, gap, err
	}
	s.cfg.Logger.Info("audit checkpoint sealed", slog.Int64("seq", cp.Seq),
		slog.Int64("first_event_id", cp.FirstEventID), slog.Int64("last_event_id", cp.LastEventID),
		slog.Int("skipped", len(cp.SkippedIDs)), slog.String("hash", cp.HashHex()))
	return cp, gap, nil
}

// readCommitted runs fn in a transaction of db at READ COMMITTED, whatever
// the database's or the role's default_transaction_isolation. The gap rule
// (package doc) needs every statement to take its own snapshot: the events
// read must see each insert that ended before the probe read pg_locks. Under
// a REPEATABLE READ or SERIALIZABLE default the whole pass would share its
// first statement's snapshot, and an insert that committed in between would
// be neither a writer of the probe nor visible: its id sealed as skipped, a
// false out_of_order_event for good (review helper-192). SET TRANSACTION
// rather than BeginTx keeps DB to Begin, so any pool, connection or wrapper
// still fits.
func readCommitted(ctx context.Context, db DB, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
			return fmt.Errorf("set seal transaction to read committed: %w", err)
		}
		return fn(tx)
	})
}

// lastCheckpoint is the newest checkpoint, the zero Checkpoint when none.
func lastCheckpoint(ctx context.Context, tx pgx.Tx) (Checkpoint, error) {
	row, err := queries.New(tx).AuditLastCheckpoint(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		return Checkpoint{}, nil
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("read last checkpoint: %w", err)
	}
	cp := Checkpoint{Seq: row.Seq, LastEventID: row.LastEventID, TreeSize: row.TreeSize}
	root, frontier, hash := row.RootHash, row.Frontier, row.Hash
	bad := func(what string, err error) error {
		return fmt.Errorf("checkpoint %d: %s: %v: the checkpoint table was altered (run inlet audit verify)", cp.Seq, what, err)
	}
	if cp.Root, err = toHash(root); err != nil {
		return cp, bad("root_hash", err)
	}
	if cp.Hash, err = toHash(hash); err != nil {
		return cp, bad("hash", err)
	}
	if cp.frontier, err = splitHashes(frontier); err != nil {
		return cp, bad("frontier", err)
	}
	if frontierRoot(cp.frontier) != cp.Root || cp.TreeSize != cp.LastEventID {
		return cp, bad("frontier", errors.New("does not match root_hash and tree_size"))
	}
	return cp, nil
}

// readEventsToSeal reads what the leaves seal of the next limit events from
// id first, in id order, through audit_events_to_seal (078): webhook_sealer
// reads neither raw_body nor payload, only whether payload is stored.
func readEventsToSeal(ctx context.Context, tx pgx.Tx, first int64, limit int) ([]Event, error) {
	rows, err := queries.New(tx).AuditEventsToSeal(ctx, queries.AuditEventsToSealParams{FirstID: first, BatchSize: int64(limit)})
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && (pgErr.Code == "42883" || pgErr.Code == "42501") {
		// Most likely a sealer of this version on a schema before 078,
		// which creates the function (undefined_function) and lets
		// webhook_sealer execute it.
		return nil, fmt.Errorf("read events from id %d: %w (the sealer reads events through webhook_ingress.audit_events_to_seal "+
			"since migration 078, which creates it for webhook_sealer: run inlet migrate)", first, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read events from id %d: %w", first, err)
	}
	events := make([]Event, len(rows))
	for i, r := range rows {
		events[i] = Event{ID: r.ID, Provider: r.Provider, ExternalEventID: r.ExternalEventID, EventType: r.EventType,
			ReceivedAt: r.ReceivedAt, BodySHA256: r.BodySha256, HeadersSHA256: r.HeadersSha256,
			Scheme: r.Scheme, RequestURI: r.RequestUri, SignatureVerified: r.SignatureVerified, SecretIndex: int(r.SecretIndex),
			OccurredAt: r.OccurredAt, PayloadStored: r.PayloadStored}
	}
	return events, nil
}

// nextCheckpoint builds the checkpoint after prev from the events past it,
// up to the horizon (see the package doc): ids with no visible event are
// sealed as skipped only up to settled. It also returns the first id of a gap
// it stopped at because that id is past settled (0 when none).
func (s *Sealer) nextCheckpoint(ctx context.Context, tx pgx.Tx, prev Checkpoint, now time.Time, settled int64) (Checkpoint, int64, error) {
	cutoff := now.Add(-s.cfg.Grace)
	first := prev.LastEventID + 1
	read := readEventsToSeal
	if s.read != nil {
		read = s.read
	}
	events, err := read(ctx, tx, first, s.cfg.MaxLeaves)
	if err != nil {
		return Checkpoint{}, 0, err
	}

	cp := Checkpoint{Seq: prev.Seq + 1, FirstEventID: first, Prev: prev.Hash, CreatedAt: now,
		frontier: append([]tlog.Hash(nil), prev.frontier...)}
	n := prev.TreeSize
	add := func(h tlog.Hash) {
		cp.leaves = append(cp.leaves, h)
		cp.frontier = frontierAppend(cp.frontier, n, h)
		n++
	}
	leaf := eventLeaf
	if s.leaf != nil {
		leaf = s.leaf
	}
	expect := first
	var gap int64
fill:
	for _, e := range events {
		if !e.ReceivedAt.Before(cutoff) {
			break // too young; the gap before it, if any, waits with it
		}
		if e.ID < expect {
			// Ids are unique unless someone with the owner's rights wrote
			// a second row with one: sealing it would add a second leaf
			// for the id. `inlet audit verify` names it.
			return Checkpoint{}, 0, fmt.Errorf("%w: a second row with id %d (received_at %s): run inlet audit verify",
				ErrTampered, e.ID, e.ReceivedAt.UTC().Format(time.RFC3339Nano))
		}
		for ; expect < e.ID; expect++ { // a gap: ids of inserts that rolled back, or still running
			if len(cp.leaves) == s.cfg.MaxLeaves {
				break fill
			}
			if expect > settled {
				gap = expect
				break fill
			}
			cp.SkippedIDs = append(cp.SkippedIDs, expect)
			add(skipLeaf(expect))
		}
		if len(cp.leaves) == s.cfg.MaxLeaves {
			break
		}
		add(leaf(e))
		expect = e.ID + 1
		// The received_at range a prune of these ids must overlap (v2).
		if cp.MinReceivedAt == nil || e.ReceivedAt.Before(*cp.MinReceivedAt) {
			cp.MinReceivedAt = &e.ReceivedAt
		}
		if cp.MaxReceivedAt == nil || e.ReceivedAt.After(*cp.MaxReceivedAt) {
			cp.MaxReceivedAt = &e.ReceivedAt
		}
	}
	if len(cp.leaves) == 0 {
		return Checkpoint{}, gap, ErrNothingToSeal
	}
	cp.LastEventID = expect - 1
	cp.TreeSize = n
	cp.Root = frontierRoot(cp.frontier)
	if cp.SkippedIDs == nil {
		cp.SkippedIDs = []int64{}
	}
	cp.Hash = checkpointHash(cp)
	return cp, gap, nil
}
