package audit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema/queries"
)

// gapState is what the sealer has seen of inserts in flight, to tell a gap
// in the ids that will never fill (an insert that rolled back) from one an
// insert still running may fill (see "Sealing without serializing ingress" in
// the package doc). It lives in memory only: a sealer that restarts starts
// from nothing, and a gap that had settled simply waits for one more probe
// whose writers have all ended.
type gapState struct {
	mu sync.Mutex
	// settled: every id at or below it that an events read after the probe
	// that settled it does not see will never appear.
	settled int64
	// pending is the oldest probe whose writers have not all been seen ended;
	// nil when none.
	pending *queries.AuditSealProbeRow
}

// observe takes a probe and returns the settled id: ids at most it that a
// read after this probe does not see are skipped for good.
//
// A probe's ids (max_id and below) were all drawn before its snapshot, and
// every insert that drew one and was still running when its writers were
// read is in writers. Once a later probe lists none of them (or this one
// lists no writers at all), each of those inserts has ended before that
// later probe read the lock table, so before any events read after it: its
// event is visible then, or never will be.
func (g *gapState) observe(p queries.AuditSealProbeRow) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending != nil && !slices.ContainsFunc(g.pending.Writers, func(w string) bool { return slices.Contains(p.Writers, w) }) {
		g.settled = max(g.settled, g.pending.MaxID)
		g.pending = nil
	}
	switch {
	case len(p.Writers) == 0:
		g.settled = max(g.settled, p.MaxID)
		g.pending = nil
	case g.pending == nil:
		// Keep the oldest unsettled probe: any of its writers still running is
		// in every later probe too, so a newer one could not settle sooner.
		g.pending = &p
	}
	return g.settled
}

// probe reads the highest visible id and the inserts in flight on q and
// returns the settled id.
func (s *Sealer) probe(ctx context.Context, q queries.DBTX) (int64, error) {
	p, err := queries.New(q).AuditSealProbe(ctx)
	if err != nil {
		return 0, fmt.Errorf("read inserts in flight: %w", err)
	}
	return s.gaps.observe(p), nil
}

// awaitGap probes until id gap is settled, for at most Grace, and reports
// whether it is.
func (s *Sealer) awaitGap(ctx context.Context, gap int64) (bool, error) {
	if s.cfg.Grace <= 0 {
		return false, nil
	}
	deadline := time.Now().Add(s.cfg.Grace)
	t := time.NewTicker(min(max(s.cfg.Grace/20, 10*time.Millisecond), 250*time.Millisecond))
	defer t.Stop()
	for {
		var settled int64
		// The probe is one statement, one snapshot at any level; it runs at
		// READ COMMITTED all the same, like every transaction of the sealer.
		err := readCommitted(ctx, s.cfg.DB, func(tx pgx.Tx) error {
			var err error
			settled, err = s.probe(ctx, tx)
			return err
		})
		switch {
		case err != nil:
			return false, err
		case settled >= gap:
			return true, nil
		case time.Now().After(deadline):
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
		}
	}
}
