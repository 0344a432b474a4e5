package ingress

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/groupcommit"
	"github.com/inlet-dev/inlet/internal/logvalue"
	"github.com/inlet-dev/inlet/schema"
)

// GroupConfig tunes a GroupStore.
type GroupConfig struct {
	// MaxBatch is the most events one transaction stores. Defaults to 128.
	MaxBatch int
	// MaxBatchBytes closes a batch once its events' bodies and headers reach
	// it: the driver copies a whole statement into its buffers, so this
	// bounds that copy per committer. An event larger than it is stored in a
	// batch of its own. Defaults to DefaultMaxBatchBytes (1 MiB); a
	// negative value sets no byte bound.
	MaxBatchBytes int64
	// MaxWait is how long a batch that is not full waits for more events
	// once it holds two (a lone event never waits). Zero or negative (the
	// default): no wait, a batch is whatever queued while the last commit
	// ran, which grows with load on its own. A wait lengthens every
	// batch's cycle by it: at 32 connections a 1ms wait cost a third of
	// the throughput (docs/performance.md, "Group commit's defaults").
	MaxWait time.Duration
	// Committers is how many batches commit at once (each holds a pool
	// connection). Defaults to 2: more split the same load into smaller
	// batches that contend in the database (4 took 25–30 % fewer webhooks
	// per second than 2 on a 2-core machine).
	Committers int
	// Timeout bounds one batch's statement. Defaults to 5s.
	Timeout time.Duration
}

func (c GroupConfig) withDefaults() GroupConfig {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 128
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.MaxWait <= 0 {
		c.MaxWait = -1 // groupcommit: never wait
	}
	if c.Committers <= 0 {
		c.Committers = DefaultCommitters
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	return c
}

// DefaultCommitters is GroupConfig.Committers' default.
const DefaultCommitters = 2

// GroupStore is a Store whose concurrent inserts share transactions: each
// committer takes the events waiting (up to MaxBatch events and MaxBatchBytes,
// waiting at most MaxWait for more, by default not at all), stores them with
// one multi-row INSERT, and answers each caller after that COMMIT with its
// own stored or duplicate.
// A batch that fails on one event's data is retried event by event, so only
// that event fails; a batch that fails because the database is unavailable
// fails all of its callers (none was acknowledged).
type GroupStore struct {
	pool   *pgxpool.Pool
	hinter Hinter
	cfg    GroupConfig
	single *PGStore
	group  *groupcommit.Group[*pending, bool]
	// batches is what every batch's statement runs under (with Timeout);
	// cut ends it, so a Server.Stop past its deadline cuts the batches
	// still running off as it does its requests (closeBy).
	batches context.Context
	cut     context.CancelFunc
}

// pending is one caller's event. A caller that gives up while its event is
// queued drops the event, so the queue does not keep the body alive.
type pending struct {
	event   atomic.Pointer[Event]
	headers string
	size    int64
	// verdicts are its filters' (the subscriptions it passed and the
	// version they were read at), counted once an insert that used them
	// commits.
	verdicts verdicts
}

// useLogger sends the store's own log lines to l (see PGStore.useLogger).
func (g *GroupStore) useLogger(l *slog.Logger) { g.single.useLogger(l) }

// NewGroupStore starts the committers; Close stops them.
func NewGroupStore(pool *pgxpool.Pool, hinter Hinter, cfg GroupConfig) *GroupStore {
	cfg = cfg.withDefaults()
	g := &GroupStore{pool: pool, hinter: hinter, cfg: cfg, single: NewPGStore(pool, nil)}
	g.batches, g.cut = context.WithCancel(context.Background())
	g.group = groupcommit.New(groupcommit.Config{
		MaxBatch: cfg.MaxBatch, MaxBytes: max(0, cfg.MaxBatchBytes), MaxWait: cfg.MaxWait, Committers: cfg.Committers,
	}, func(p *pending) int64 { return p.size }, g.commit)
	return g
}

// ErrStoreClosed is returned by Insert after Close.
var ErrStoreClosed = errors.New("ingress store closed")

// Insert implements Store. An event over a limit (MaxExternalIDBytes, …) or
// one the database refuses for its data fails with ErrUnstorable.
func (g *GroupStore) Insert(ctx context.Context, e *Event) (bool, error) {
	if err := checkEvent(e); err != nil {
		return false, fmt.Errorf("insert %s event: %w", e.Provider, err)
	}
	headers, err := json.Marshal(e.Headers)
	if err != nil {
		return false, fmt.Errorf("encode headers of %s event %s: %w: %w", e.Provider, logvalue.Text(e.ExternalID), ErrUnstorable, err)
	}
	v, err := g.single.filters.match(ctx, e)
	if err != nil {
		return false, fmt.Errorf("insert %s event %s: %w", e.Provider, logvalue.Text(e.ExternalID), err)
	}
	p := &pending{headers: string(headers), size: int64(len(e.RawBody) + len(headers)), verdicts: v}
	p.event.Store(e)
	stored, err := g.group.Do(ctx, p)
	switch {
	case errors.Is(err, groupcommit.ErrClosed):
		return false, ErrStoreClosed
	case err != nil && ctx.Err() != nil:
		// Unacknowledged: the provider retries. Taking the event back tells
		// whether a committer took it first: a queued event is dropped
		// (and its body with it), never written; one a batch took may
		// still commit, and the retry is then a duplicate.
		if p.event.Swap(nil) != nil {
			return false, fmt.Errorf("insert %s event %s: %w: %w", e.Provider, logvalue.Text(e.ExternalID), errNotWritten, err)
		}
		return false, fmt.Errorf("insert %s event %s while its batch was written: %w", e.Provider, logvalue.Text(e.ExternalID), err)
	}
	return stored, err
}

// Close stops the committers after the batches in flight; events still
// queued are failed with ErrStoreClosed.
func (g *GroupStore) Close() {
	g.group.Close()
	g.cut()
}

// closeBy is Close for Server.Stop: the batches still running when ctx is
// done are cut off, so Stop returns by its deadline. Their callers get the
// batch's error, never a success; a batch cut while its statement ran may
// still have committed, and the provider's retry is then a duplicate.
func (g *GroupStore) closeBy(ctx context.Context) {
	defer context.AfterFunc(ctx, g.cut)()
	g.Close()
}

// SQL text rather than a sqlc method, as InsertEvent (see there): queued in
// one pgx.Batch with FanOutFiltered.
var insertEventsSQL = schema.Query("InsertEvents")

func (g *GroupStore) commit(batch []*groupcommit.Request[*pending, bool]) {
	// Callers that gave up before their turn are not stored: they already
	// answered 503.
	type item struct {
		r       *groupcommit.Request[*pending, bool]
		e       *Event
		headers string
		v       verdicts
		// dup: an earlier item of this batch has the same key. It is not
		// written: it is that item's duplicate, and its filter matches
		// were evaluated on its own body, not the one stored.
		dup bool
	}
	live := make([]item, 0, len(batch))
	for _, r := range batch {
		if err := r.Ctx.Err(); err != nil {
			r.Answer(false, err)
			continue
		}
		// Taken, so a caller giving up from now on knows the batch may
		// write its event (see Insert).
		e := r.Value.event.Swap(nil)
		if e == nil {
			r.Answer(false, context.Canceled)
			continue
		}
		live = append(live, item{r: r, e: e, headers: r.Value.headers, v: r.Value.verdicts})
	}
	if len(live) == 0 {
		return
	}
	// In key order: two batches claiming overlapping keys then wait on each
	// other in one order and cannot deadlock. Stable, so of two requests
	// with one key the first to arrive is the one stored.
	slices.SortStableFunc(live, func(a, b item) int {
		return cmp.Or(strings.Compare(a.e.Provider, b.e.Provider), strings.Compare(a.e.ExternalID, b.e.ExternalID))
	})
	// Only the first of each key goes into the statement. FanOutFiltered
	// joins on the key (the row this transaction wrote), so a later item's
	// matches sent with it would give the stored event the jobs of a body
	// it does not have.
	n := 0
	for i := range live {
		live[i].dup = i > 0 && live[i].e.Provider == live[i-1].e.Provider && live[i].e.ExternalID == live[i-1].e.ExternalID
		if !live[i].dup {
			n++
		}
	}
	provider, scheme, extID, evType, headers, uri, trace := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	bodies, verified, secret := make([][]byte, n), make([]bool, n), make([]*int16, n)
	storeJSON, occurred := make([]bool, n), make([]pgtype.Timestamptz, n)
	events, matches := make([]*Event, n), make([][]int64, n)
	// The oldest version any event was matched at: FanOutFiltered refuses
	// the batch when any of them is out of date.
	version := live[0].v.version
	i := 0
	for _, it := range live {
		version = min(version, it.v.version)
		if it.dup {
			continue
		}
		e := it.e
		provider[i], scheme[i], extID[i], evType[i], headers[i] = e.Provider, e.Scheme, e.ExternalID, e.EventType, it.headers
		bodies[i], verified[i], secret[i], uri[i], trace[i] = e.RawBody, e.Verified, secretIndex(e), e.RequestURI, e.TraceParent
		storeJSON[i], occurred[i] = e.StoreJSON, occurredAt(e)
		events[i], matches[i] = e, it.v.ids
		i++
	}
	ctx, cancel := context.WithTimeout(g.batches, g.cfg.Timeout)
	defer cancel()
	// Events that passed a subscription's filter get those jobs in the
	// same implicit transaction (one round trip: a pipelined batch). The
	// insert's trigger refuses the batch if filtered routing changed since
	// version (filtersChanged).
	fp, fx, fs := fanOutArgs(events, matches)
	var (
		rows pgx.Rows
		br   pgx.BatchResults
		err  error
	)
	if len(fs) == 0 {
		rows, err = g.pool.Query(ctx, insertEventsSQL, provider, scheme, extID, evType, headers, bodies, verified, secret, uri, trace, storeJSON, occurred, version)
	} else {
		b := &pgx.Batch{}
		b.Queue(insertEventsSQL, provider, scheme, extID, evType, headers, bodies, verified, secret, uri, trace, storeJSON, occurred, version)
		b.Queue(fanOutFilteredSQL, fp, fx, fs)
		br = g.pool.SendBatch(ctx, b)
		rows, err = br.Query()
	}
	stored := map[[2]string]bool{}
	if err == nil {
		for rows.Next() {
			var k [2]string
			if err = rows.Scan(&k[0], &k[1]); err != nil {
				break
			}
			stored[k] = true
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if br != nil {
		if err == nil {
			_, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}
	changed := filtersChanged(err)
	if changed {
		// Nothing of the batch was stored: each event is matched again
		// on a fresh copy and stored alone, below.
		g.single.filters.changed()
	}
	if late := answeredLate(ctx, err); late != nil {
		// The batch's deadline passed before PostgreSQL answered: outcome
		// unknown for every caller, below; the streamer's poll finds any
		// jobs it made.
		err = late
	}
	switch {
	case err == nil:
		anyStored := len(stored) > 0
		for _, it := range live {
			// Committed: each event's verdicts applied (a duplicate's
			// too, as on PGStore), counted before its caller hears.
			g.single.filters.count(it.v)
			// A later item of a key answers "duplicate", whether the
			// first was stored or was itself a duplicate.
			it.r.Answer(!it.dup && stored[[2]string{it.e.Provider, it.e.ExternalID}], nil)
		}
		if anyStored && g.hinter != nil {
			g.hinter.Hint()
		}
	case !changed && (database.IsUnavailable(err) || ctx.Err() != nil || !isStatementError(err) || batchWide(err)):
		// Down, too slow, cut off mid-statement, or refused for a cause no
		// one event has (a lock timeout, a privilege, a read-only server):
		// every caller gets the error, which says whether the batch may
		// have committed. Storing each alone would wait and fail again,
		// once per event, on the batch's one committer.
		err = fmt.Errorf("insert %d events: %w", n, err)
		for _, it := range live {
			it.r.Answer(false, err)
		}
	default:
		// One event's data failed the statement (or filtered routing
		// changed): store each alone, so only that one fails. A later item of a key is stored alone too: after
		// its first was, it is a duplicate (FanOutFiltered then finds no row
		// of its own transaction and makes no job); after its first failed
		// on its own data, it gets its own outcome.
		anyStored := false
		for _, it := range live {
			s, err := g.single.insertMatched(it.r.Ctx, it.e, []byte(it.headers), it.v)
			anyStored = anyStored || s
			it.r.Answer(s, err)
		}
		if anyStored && g.hinter != nil {
			g.hinter.Hint()
		}
	}
}
