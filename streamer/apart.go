package streamer

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/schema/queries"
)

// The handlers whose claims can be slow are claimed apart from the others,
// one statement per handler, each group in a loop of its own beside the
// claim loop, so that no other handler's claims wait for theirs:
//
//   - the limited group: handlers with limits (handler_limits) that are not
//     ordered, by ClaimLimitedJobs (their row lock, their quota);
//   - the ordered group: ordered handlers, by ClaimHandlerJobs, or by
//     ClaimLimitedJobs when they have limits too. A backlog their order
//     holds back is walked past by each of their claims.
//
// Handlers of one group wait for each other's claims; apartPace bounds how
// often a slow one runs.

// apartGroup is one of the two loops that claim handlers apart.
type apartGroup struct {
	name    string // for logs: "limited" or "ordered"
	ordered bool
	wake    chan struct{}

	timerMu sync.Mutex
	timer   *time.Timer // the wake-up the last round asked for (wakeIn)
}

func newApartGroups() [2]*apartGroup {
	return [2]*apartGroup{
		{name: "limited", wake: make(chan struct{}, 1)},
		{name: "ordered", ordered: true, wake: make(chan struct{}, 1)},
	}
}

// wakeUp asks g's loop for a round now. It never blocks.
func (g *apartGroup) wakeUp() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// wakeIn asks g's loop for a round in d: one timer per group, each round's
// ask replacing the one before (the round that asks has the fresher view).
// A timer per round piled up: each wake-up from elsewhere (a NOTIFY hint, a
// poll tick, Wake) started another chain re-arming itself every 50 ms while
// an in-flight limit stayed full, and the loop claimed back to back, each
// claim locking the handler's handler_limits row (review helper-222).
func (g *apartGroup) wakeIn(d time.Duration) {
	g.timerMu.Lock()
	defer g.timerMu.Unlock()
	if g.timer == nil {
		g.timer = time.AfterFunc(d, g.wakeUp)
		return
	}
	g.timer.Reset(d)
}

// stopWake stops the wake-up a round asked for (wakeIn), as g's loop ends.
func (g *apartGroup) stopWake() {
	g.timerMu.Lock()
	defer g.timerMu.Unlock()
	if g.timer != nil {
		g.timer.Stop()
	}
}

// apartClaimStarting is called as each claim of a handler apart starts,
// with its handler, on the claim's clock: a test holds it to make that
// claim slow.
var apartClaimStarting = func(string) {}

const (
	// slowApartClaim is how long a claim apart's statement may take before
	// it counts as slow (see apartPace).
	slowApartClaim = 25 * time.Millisecond
	// apartBatch caps the jobs one claim apart leases (an ordered or a
	// limited handler's): each keyed job takes an advisory lock until the
	// claim commits (030, 033), from the server's shared lock table
	// (max_locks_per_transaction × max_connections slots, 6,400 by
	// default).
	apartBatch = 256
)

// apartPace is the apart loop's memory of each handler it claims: when it
// may be claimed next, and why.
//
//   - A handler whose claim came back short after more than slowApartClaim,
//     twice in a row (once can be a cold plan or a busy machine; a held-back
//     backlog is slow every time), is claimed again only after nine times
//     that claim's time: walking such a backlog takes at most a tenth of
//     the database's time for it, and its keys not held back wait that much
//     longer. A full claim, or a quick one, ends it.
//   - A handler whose claim failed is claimed again after a backoff of its
//     own (100 ms, doubling to 5 s), so one handler's failing claims (a
//     database without 031, a statement timeout) hold up no other.
type apartPace struct {
	next   map[string]time.Time // not claimed before
	slow   map[string]int       // consecutive slow short claims
	failed map[string]int       // consecutive failed claims
}

func newApartPace() *apartPace {
	return &apartPace{next: map[string]time.Time{}, slow: map[string]int{}, failed: map[string]int{}}
}

// due reports whether h may be claimed at now; a nil pace (ClaimOnce)
// claims every handler.
func (p *apartPace) due(h string, now time.Time) bool {
	return p == nil || !now.Before(p.next[h])
}

// claimed records a claim of h that took took in the database and leased
// a full batch or not.
func (p *apartPace) claimed(h string, took time.Duration, full bool) {
	if p == nil {
		return
	}
	delete(p.failed, h)
	if full || took <= slowApartClaim {
		delete(p.slow, h)
		return
	}
	p.slow[h]++
	if p.slow[h] >= 2 {
		p.next[h] = time.Now().Add(9 * took)
	}
}

// claimFailed records a failed claim of h.
func (p *apartPace) claimFailed(h string) {
	if p == nil {
		return
	}
	p.failed[h]++
	p.next[h] = time.Now().Add(min(100*time.Millisecond<<min(p.failed[h]-1, 6), 5*time.Second))
}

// earliest is the soonest time a handler held back may be claimed again
// (zero: none is), forgetting the times past.
func (p *apartPace) earliest(now time.Time) time.Time {
	var first time.Time
	for h, at := range p.next {
		if !at.After(now) {
			delete(p.next, h)
		} else if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first
}

// apartLoop claims the handlers of group g (claimApart) on every wake-up,
// beside the claim loop, as the claim loop does (claimLoop), and wakes
// itself when the first handler its pace holds back may be claimed again.
func (s *Streamer) apartLoop(ctx context.Context, g *apartGroup) {
	pace := newApartPace()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		g.stopWake()
	}()
	round := func(ctx context.Context) (int, bool, error) {
		// Each claim runs to its own deadline, not Stop's (see claimRound);
		// once Stop has come no other claim starts, and what the round
		// still waits for in the database is cut off claimRoundTimeout
		// after Stop (claimsCut), as the main claim's round is: the round
		// had no deadline of its own, and its recount, which holds
		// inFlight.mu that every claim needs, waited on a database that
		// did not answer for as long as it took, and Stop with it
		// (review helper-311).
		rctx, uncut := cutBy(context.WithoutCancel(ctx), s.claimsCut)
		defer uncut()
		return s.claimApart(rctx, ctx.Done(), g, pace)
	}
	s.claimLoop(ctx, g.wake, g.wakeUp, round, func() {
		now := time.Now()
		if first := pace.earliest(now); !first.IsZero() {
			if timer == nil {
				timer = time.AfterFunc(first.Sub(now), g.wakeUp)
			} else {
				timer.Reset(first.Sub(now))
			}
		}
	})
}

// claimApart leases, for each handler of group g that pace lets claim now
// (nil: every one), until stop is closed, one batch of its due jobs, and
// publishes them: a limited handler's as its limits allow
// (ClaimLimitedJobs), an ordered one's by ClaimHandlerJobs. It returns how many it leased and whether a
// handler's claim came back full (more may be due). A handler's failed
// claim is logged (and paced: one handler's failures hold up no other);
// the error is ErrPublish when the bus refused every reference (a handler
// whose references it refused is held out of the claims a while:
// publishHolds).
func (s *Streamer) claimApart(ctx context.Context, stop <-chan struct{}, g *apartGroup, pace *apartPace) (int, bool, error) {
	// The recount (inFlight.atLimit) within claimRoundTimeout, as the main
	// claim's: it holds inFlight.mu, which every claim and publish needs.
	actx, cancel := context.WithTimeout(ctx, claimRoundTimeout)
	_, apart, err := s.inFlight.atLimit(actx, s.cfg.Pool)
	cancel()
	if err != nil {
		return 0, false, fmt.Errorf("claim jobs: %w", err)
	}
	handlers := apart.limited
	if g.ordered {
		handlers = apart.ordered
	}
	var b leaseBatch
	more := false
	limitedLeased := 0
	heldWake := time.Duration(-1) // the soonest a limited handler's held-back jobs can be leased
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for _, h := range handlers {
		if stopped() { // no other claim starts; what is leased is published
			break
		}
		if now := time.Now(); !pace.due(h, now) || s.holds.isHeld(h, now) {
			continue
		}
		s.claims.Add(1)
		var rows []queries.ClaimJobsRow
		var took time.Duration
		var err error
		// Capped for a limited handler too, ordered or not: the list that
		// says which limited handlers are ordered is a round old, and
		// claim_limited_jobs locks the key of each keyed job (033).
		batch := min(s.cfg.BatchSize, apartBatch)
		if room, paced := apart.room[h]; paced {
			batch = min(batch, room) // the room its pace leaves it
		}
		if !g.ordered || apart.limitedToo[h] {
			took, err = s.timed(ctx, h, func(ctx context.Context, conn *pgxpool.Conn) error {
				lrows, wake, err := s.claimLimited(ctx, conn, h, batch)
				if wake >= 0 && (heldWake < 0 || wake < heldWake) {
					heldWake = wake
				}
				for _, j := range lrows {
					rows = append(rows, queries.ClaimJobsRow{ID: j.ID, EventID: j.EventID, Handler: j.Handler, Provider: j.Provider,
						EventType: j.EventType, AttemptCount: j.AttemptCount, MaxAttempts: j.MaxAttempts, LeaseExpiresAt: j.LeaseExpiresAt,
						TraceParent: j.TraceParent, EventReceivedAt: j.EventReceivedAt, AttemptedAt: j.AttemptedAt})
					if j.Probe {
						s.cfg.Logger.Info("circuit half-open: probing with one job", slog.String("handler", h), slog.Int64("job_id", j.ID))
					}
				}
				return err
			})
			// Limited handlers are paced by their own limits (and a
			// wake-up while they lease).
			limitedLeased += len(rows)
		} else {
			took, err = s.timed(ctx, h, func(ctx context.Context, conn *pgxpool.Conn) error {
				// Synchronous, unlike the main claim (asyncCommit): a
				// running attempt of an ordered handler holds its key.
				hrows, err := queries.New(conn).ClaimHandlerJobs(ctx, queries.ClaimHandlerJobsParams{
					Handler: h, BatchSize: int64(batch), LeaseHolder: s.cfg.ID, LeaseFor: s.cfg.LeaseDuration})
				for _, j := range hrows {
					rows = append(rows, queries.ClaimJobsRow(j))
				}
				return err
			})
			if err != nil {
				err = fmt.Errorf("claim jobs of ordered handler %q: %w", h, err)
			}
		}
		if err != nil {
			s.cfg.Logger.Warn("claim of a handler apart failed", slog.String("handler", h), slog.String("group", g.name),
				slog.String("error", err.Error()))
			s.giveBackUnseen(ctx, func(c string) bool { return c == h }) // it may have committed
			pace.claimFailed(h)
			continue
		}
		s.seen(rows)
		full := len(rows) >= batch
		pace.claimed(h, took, full)
		more = more || full
		for _, j := range rows {
			b.add(s, j)
		}
	}
	switch {
	case heldWake >= 0:
		// Due jobs its limits held back: look again when the next can be
		// leased (its next token, its next probe), or soon when its
		// in-flight limit is full (a slot frees when a job ends, which
		// nothing signals), not at the next poll.
		if heldWake == 0 {
			heldWake = limitedWake
		}
		g.wakeIn(max(heldWake, 5*time.Millisecond))
	case limitedLeased > 0:
		// Tokens refill continuously: look again soon rather than at the
		// next poll, so a rate limit paces evenly.
		g.wakeIn(limitedWake)
	}
	n, err := s.publishBatch(ctx, &b)
	return n, more, err
}

// timed runs the claim of handler h on a connection of the pool under its
// own deadline (claimRoundTimeout) and returns how long it took, from when
// it had the connection: the database's time, not the wait for a
// connection.
func (s *Streamer) timed(ctx context.Context, h string, claim func(context.Context, *pgxpool.Conn) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, claimRoundTimeout)
	defer cancel()
	conn, err := s.cfg.Pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	started := time.Now()
	apartClaimStarting(h)
	err = claim(ctx, conn)
	return time.Since(started), err
}
