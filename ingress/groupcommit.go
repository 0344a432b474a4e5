package ingress

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema"
)

// GroupConfig tunes a GroupStore.
type GroupConfig struct {
	// MaxBatch is the most events one transaction stores. Defaults to 128.
	MaxBatch int
	// MaxWait is how long a batch that is not full waits for more events
	// once it holds two (a lone event never waits). Defaults to 1ms; a
	// negative value never waits (a batch is then whatever queued while the
	// last commit ran).
	MaxWait time.Duration
	// Committers is how many batches commit at once (each holds a pool
	// connection). Defaults to 4.
	Committers int
	// Timeout bounds one batch's statement. Defaults to 5s.
	Timeout time.Duration
}

func (c GroupConfig) withDefaults() GroupConfig {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 128
	}
	if c.MaxWait == 0 {
		c.MaxWait = time.Millisecond
	}
	if c.Committers <= 0 {
		c.Committers = 4
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	return c
}

// GroupStore is a Store whose concurrent inserts share transactions: each
// committer takes the events waiting (up to MaxBatch, waiting at most MaxWait
// for more), stores them with one multi-row INSERT, and answers each caller
// after that COMMIT with its own stored or duplicate. A batch that fails on
// one event's data is retried event by event, so only that event fails; a
// batch that fails because the database is unavailable fails all of its
// callers (none was acknowledged).
type GroupStore struct {
	pool   *pgxpool.Pool
	hinter Hinter
	cfg    GroupConfig
	single *PGStore

	queue  chan *pending
	stop   chan struct{}
	wg     sync.WaitGroup
	closed sync.Once
}

type pending struct {
	ctx     context.Context
	e       *Event
	headers string
	done    chan result
}

type result struct {
	stored bool
	err    error
}

// NewGroupStore starts the committers; Close stops them.
func NewGroupStore(pool *pgxpool.Pool, hinter Hinter, cfg GroupConfig) *GroupStore {
	cfg = cfg.withDefaults()
	g := &GroupStore{pool: pool, hinter: hinter, cfg: cfg, single: NewPGStore(pool, nil),
		queue: make(chan *pending, cfg.MaxBatch*cfg.Committers), stop: make(chan struct{})}
	for range cfg.Committers {
		g.wg.Go(g.commitLoop)
	}
	return g
}

// ErrStoreClosed is returned by Insert after Close.
var ErrStoreClosed = errors.New("ingress store closed")

// Insert implements Store.
func (g *GroupStore) Insert(ctx context.Context, e *Event) (bool, error) {
	headers, err := json.Marshal(e.Headers)
	if err != nil {
		return false, fmt.Errorf("encode headers of %s event %q: %w", e.Provider, e.ExternalID, err)
	}
	p := &pending{ctx: ctx, e: e, headers: string(headers), done: make(chan result, 1)}
	select {
	case <-g.stop: // checked first: the queue may have room after Close
		return false, ErrStoreClosed
	default:
	}
	select {
	case g.queue <- p:
	case <-ctx.Done():
		return false, ctx.Err()
	case <-g.stop:
		return false, ErrStoreClosed
	}
	select {
	case r := <-p.done:
		return r.stored, r.err
	case <-g.stop:
		// Closed while queued (or committing): unacknowledged either way.
		select {
		case r := <-p.done:
			return r.stored, r.err
		default:
			return false, ErrStoreClosed
		}
	case <-ctx.Done():
		// The batch may still commit it: unacknowledged, so the provider
		// retries and gets "duplicate".
		return false, ctx.Err()
	}
}

// Close stops the committers after the batches in flight; events still
// queued are failed with ErrStoreClosed.
func (g *GroupStore) Close() {
	g.closed.Do(func() {
		close(g.stop)
		g.wg.Wait()
		for {
			select {
			case p := <-g.queue:
				p.done <- result{err: ErrStoreClosed}
			default:
				return
			}
		}
	})
}

func (g *GroupStore) commitLoop() {
	batch := make([]*pending, 0, g.cfg.MaxBatch)
	for {
		batch = batch[:0]
		select {
		case <-g.stop:
			return
		case p := <-g.queue:
			batch = append(batch, p)
		}
		batch = g.fill(batch)
		g.commit(batch)
	}
}

// fill adds what is queued, waiting up to MaxWait for a full batch.
func (g *GroupStore) fill(batch []*pending) []*pending {
	var timeout <-chan time.Time
	if g.cfg.MaxWait > 0 {
		t := time.NewTimer(g.cfg.MaxWait)
		defer t.Stop()
		timeout = t.C
	}
	for len(batch) < g.cfg.MaxBatch {
		select {
		case p := <-g.queue:
			batch = append(batch, p)
			continue
		default:
		}
		// Alone (nothing else was waiting): commit at once, so a lone webhook
		// pays no wait. Company: wait a little for more of it.
		if timeout == nil || len(batch) == 1 {
			return batch
		}
		select {
		case p := <-g.queue:
			batch = append(batch, p)
		case <-timeout:
			return batch
		case <-g.stop:
			return batch
		}
	}
	return batch
}

var insertEventsSQL = schema.Query("InsertEvents")

func (g *GroupStore) commit(batch []*pending) {
	// Callers that gave up before their turn are not stored: they already
	// answered 503.
	live := batch[:0]
	for _, p := range batch {
		if p.ctx.Err() != nil {
			p.done <- result{err: p.ctx.Err()}
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	// In key order: two batches claiming overlapping keys then wait on each
	// other in one order and cannot deadlock. Stable, so of two requests
	// with one key the first to arrive is the one stored.
	slices.SortStableFunc(live, func(a, b *pending) int {
		return cmp.Or(strings.Compare(a.e.Provider, b.e.Provider), strings.Compare(a.e.ExternalID, b.e.ExternalID))
	})
	n := len(live)
	provider, scheme, extID, evType, headers, uri, trace := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	bodies, verified, secret := make([][]byte, n), make([]bool, n), make([]*int16, n)
	for i, p := range live {
		e := p.e
		provider[i], scheme[i], extID[i], evType[i], headers[i] = e.Provider, e.Scheme, e.ExternalID, e.EventType, p.headers
		bodies[i], verified[i], secret[i], uri[i], trace[i] = e.RawBody, e.Verified, secretIndex(e), e.RequestURI, e.TraceParent
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.Timeout)
	defer cancel()
	rows, err := g.pool.Query(ctx, insertEventsSQL, provider, scheme, extID, evType, headers, bodies, verified, secret, uri, trace)
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
	switch {
	case err == nil:
		anyStored := len(stored) > 0
		for _, p := range live {
			k := [2]string{p.e.Provider, p.e.ExternalID}
			p.done <- result{stored: stored[k]}
			delete(stored, k) // a second request with the same key in this batch is a duplicate
		}
		if anyStored && g.hinter != nil {
			g.hinter.Hint()
		}
	case database.IsUnavailable(err) || ctx.Err() != nil:
		err = fmt.Errorf("insert %d events: %w", n, err)
		for _, p := range live {
			p.done <- result{err: err}
		}
	default:
		// One event's data failed the statement: store each alone, so only
		// that one fails.
		anyStored := false
		for _, p := range live {
			s, err := g.single.Insert(p.ctx, p.e)
			anyStored = anyStored || s
			p.done <- result{stored: s, err: err}
		}
		if anyStored && g.hinter != nil {
			g.hinter.Hint()
		}
	}
}
