package streamer

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/schema/queries"
)

// inFlight keeps each handler's count of leased jobs in memory, so a claim
// need not re-count every lease: the count read from Postgres now and then
// (CountLeasedJobs, every lease of every streamer) plus what this streamer
// leased since. Completions lower it only at the next recount, so between
// recounts it errs high: a handler reaching its limit is recounted sooner.
// Streamers running side by side each add their own leases to a shared base,
// so together they may overshoot the limit by what they lease in one
// refresh interval.
type inFlight struct {
	limit   int
	refresh time.Duration
	// A handler's leases nobody has extended yet (unext: references waiting
	// in the bus beyond the message a consumer has at hand, attempts younger
	// than an extension) are also held to what its consumers start within
	// half a lease at its pace: nothing extends a reference waiting in the
	// bus, and the reaper, a consumer being alive, counts each that expires
	// as an attempt, so a slow handler's leased backlog burned its attempts
	// and was dead-lettered without its handler being called. Extended
	// leases (attempts running, references a consumer holds) do not count:
	// a handler of long jobs runs as many as its consumers take. floor is
	// what may be leased whatever the pace (MinLeasedPerHandler).
	lease time.Duration
	floor int
	pace  map[string]*handlerPace
	unext map[string]int
	// batch is the main claim's size (ClaimJobs leases up to that many of a
	// handler): a handler with less room under its pace is claimed apart,
	// by ClaimHandlerJobs with its room as the batch.
	batch int
	// atLimitRefresh is the shorter refresh while some handler is at its
	// limit: its consumers are finishing jobs that the count does not show.
	atLimitRefresh time.Duration

	mu     sync.Mutex
	counts map[string]int
	// quiet are the handlers whose known consumers have all gone quiet:
	// nothing of theirs is leased until one is back (an outage burns no
	// attempts and no leases).
	quiet []string
	// limited are the handlers with rate limits, in-flight limits or a
	// circuit breaker (handler_limits): claimed apart, one ClaimLimitedJobs
	// each, never by ClaimJobs.
	limited []string
	// ordered are the handlers with an order key (ListOrderedHandlers):
	// claimed apart too, one ClaimHandlerJobs each, so a backlog their order
	// holds back costs the other handlers' claims nothing.
	ordered []string
	// routes are the scoped roles of each handler shared by roles
	// (ListJobRoutes): its jobs are published on a role's topic (topicOf).
	routes  jobRoutes
	routed  time.Time // when routes were read: at most every routesRefresh
	counted time.Time
	// topics pace each topic of a routed handler (a role's, or the
	// handler's own for jobs no scope covers) as pace and unext pace a
	// handler: its consumers are one role's, which may be far slower than
	// another role's sharing the handler, and the handler's pace is theirs
	// together (review helper-173). See Streamer.paceRoutes.
	topics map[string]*topicPace
	// origin is when this inFlight was made, on this process's monotonic
	// clock: the topics' deferral chains are offsets from it (durations,
	// never wall-clock instants), so a due time is handed to the database
	// as a delay from its own now() (DeferJobs).
	origin time.Time
}

// topicPace is one topic's pace and its unextended leases, by the recounts
// (CountLeasedRoutedJobs mapped through topicOf) plus what this streamer
// published on it since.
type topicPace struct {
	pace  handlerPace
	unext int
	// deferred is when the last reference deferred on the topic is due
	// again, as an offset from inFlight.origin on the monotonic clock: the
	// next one is due a job's time after it, so a backlog deferred over
	// several claims comes back at the topic's pace, not all at once.
	deferred time.Duration
	// counted is the server's time of the last recount's snapshot: a lease
	// taken before it is in the count (pace.prev), a later one is not.
	// Other claim loops of this streamer lease, publish and defer between
	// recounts, so each lease's time says whether the count holds it: a
	// lease counted and then deferred unpublished, or published after the
	// count and added again, read as jobs the role finished, and the pace
	// read high leased more than the role starts (to expire).
	counted time.Time
}

func newInFlight(limit int, refresh, lease time.Duration, floor, batch int) *inFlight {
	return &inFlight{limit: limit, refresh: refresh, atLimitRefresh: refresh / 10, counts: map[string]int{},
		lease: lease, floor: floor, batch: batch, pace: map[string]*handlerPace{}, unext: map[string]int{},
		topics: map[string]*topicPace{}, origin: time.Now()}
}

// handlerPace estimates how fast a handler's leases end (completed, failed,
// given back), from the recounts: what was leased at the last one, plus what
// this streamer leased since, less what is leased now. Other streamers'
// leases since are not seen, so with several each reads the pace low and
// holds the handler to less than it could take (never more).
type handlerPace struct {
	prev, mine int
	window     time.Time // start of the window finished is summed over
	started    int       // ends the window needs (leases out, see note)
	peak       int       // the most leases out seen in the window
	finished   int
	perSecond  float64   // fast up, slowly down (paceDecay)
	decayed    time.Time // when perSecond was last read or decayed
	measured   bool      // a window has ended: perSecond is a reading
	// longest is the longest window: read then whatever ended in it (0:
	// paceMaxWindow). Half a lease, as a pace is read to fill half a lease.
	longest time.Duration
}

const (
	paceWindow    = 100 * time.Millisecond // shortest window a pace is read over
	paceMaxWindow = 2 * time.Second        // longest window, at least
	paceEnds      = 4                      // ends a window shorter than the longest needs, at least
	paceDecay     = 10 * time.Second       // time constant of a pace going down
)

// note records a recount of h: leased now.
//
// A window is read once every lease out when it started could have ended
// in it: it holds as many ends as there were leases then, or as the last
// window saw out at most (paceEnds at least), and is paceWindow long; or it
// is the longest window long, whatever it holds. The pace goes down between
// readings (paceDecay) and up at once with a reading. Read sooner, a window read part of the ends of attempts
// that run together, not their pace: read over any 100 ms, one end was 10
// jobs/s and a handler slower than that got several times the room it
// starts in half a lease (review helper-185); read over 4 ends, a handler of
// concurrency 4 whose attempts end together had its ends split by a window
// closing among them, the rest read over the next 100 ms as 30–40 jobs/s
// for a handler of 1.9/s (review helper-187). A fast handler turns its
// leases over within a recount or two, so it is read as soon as before. An
// idle handler (nothing leased, nothing ended) starts a new window at each
// recount, so a burst after an idle spell is read up at once.
func (p *handlerPace) note(leased int, now time.Time) {
	p.finished += max(p.prev+p.mine-leased, 0)
	p.prev, p.mine = leased, 0
	p.peak = max(p.peak, leased)
	dt := now.Sub(p.window)
	if now.Sub(p.decayed) >= paceWindow {
		// Down between readings, but not below the open window's rate
		// so far (a lower bound: it never raises the pace): a handler
		// kept at its room has half a lease of work out, its window
		// takes half a lease, and decayed meanwhile its room shrank while
		// it was busy (review helper-189).
		before := p.perSecond
		p.decay(now)
		if !p.window.IsZero() && dt >= paceWindow && p.finished >= paceEnds {
			p.perSecond = max(p.perSecond, min(float64(p.finished)/dt.Seconds(), before))
		}
	}
	if p.window.IsZero() || (leased == 0 && p.finished == 0) {
		p.window, p.started, p.peak = now, leased, leased
		return
	}
	longest := p.longest
	if longest < paceMaxWindow {
		longest = paceMaxWindow
	}
	switch {
	case p.finished >= max(paceEnds, p.started) && dt >= paceWindow:
	case dt >= longest:
	default:
		return
	}
	p.decay(now)
	p.perSecond = max(float64(p.finished)/dt.Seconds(), p.perSecond)
	// The next window needs as many ends as the most leases out in this
	// one: attempts that ran beside those that just ended, of another
	// batch, are still out, and their ends alone in a short window read
	// as a burst (review helper-189: two groups of 4, 200 ms apart, read
	// as 20 jobs/s for a handler of 1/s).
	p.window, p.started, p.peak, p.finished, p.measured = now, max(leased, p.peak), leased, 0, true
}

// decay lowers the pace for the time since it was last read or decayed.
func (p *handlerPace) decay(now time.Time) {
	if !p.decayed.IsZero() {
		p.perSecond *= math.Exp(-now.Sub(p.decayed).Seconds() / paceDecay.Seconds())
	}
	p.decayed = now
}

// capOf is how many unextended leases h may have: what its consumers start
// in half a lease at its pace, at least floor, at most limit.
//
// A handler shared by consumer roles (in the route table) is held to
// limit only: its roles are paced each by its own consumers
// (Streamer.paceRoutes), and the handler's pace is theirs together, so a
// slow role's references waiting for its consumers filled the handler's
// room, cut its claims to the few jobs ahead in due order (the slow role's),
// and the other roles' jobs behind them were never reached (review
// helper-180).
func (f *inFlight) capOf(h string) int {
	if len(f.routes[h]) > 0 {
		return f.limit
	}
	return f.capAt(f.pace[h])
}

// capAt is what consumers start in half a lease at pace p (nil: not seen
// yet), at least floor, at most limit: a handler's cap, or a topic's.
func (f *inFlight) capAt(p *handlerPace) int {
	if p == nil {
		return min(f.floor, f.limit)
	}
	return min(max(int(p.perSecond*f.lease.Seconds()/2), f.floor), f.limit)
}

// apartHandlers are the handlers to claim apart (not at their limit, with a
// live consumer), by the loop that claims them.
type apartHandlers struct {
	// limited are the limited handlers that are not ordered
	// (ClaimLimitedJobs, in the limited loop).
	limited []string
	// ordered are the ordered handlers (in the ordered loop): by
	// ClaimLimitedJobs those in limitedToo, else by ClaimHandlerJobs.
	ordered    []string
	limitedToo map[string]bool
	// room is how many more leases a handler whose pace holds it below a
	// claim batch may take: its claim's batch, in its own loop when limited
	// or ordered, else in the ordered loop (ClaimHandlerJobs).
	room map[string]int
}

// atLimit returns the handlers ClaimJobs must lease nothing of: those with
// limit jobs or more leased, those without a live consumer, and those
// claimed apart; and the handlers to claim apart. It counts again first
// when the count is older than its refresh interval.
func (f *inFlight) atLimit(ctx context.Context, pool *pgxpool.Pool) (full []string, apart apartHandlers, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	full = f.full()
	age := time.Since(f.counted)
	if age >= f.refresh || ((f.atHardLimit() || f.unmeasuredAtFloor()) && age >= f.atLimitRefresh) {
		if err := f.recount(ctx, pool); err != nil {
			return nil, apartHandlers{}, err
		}
		full = f.full()
	}
	apart.limitedToo = map[string]bool{}
	for _, h := range f.limited {
		switch {
		case slices.Contains(full, h):
		case slices.Contains(f.ordered, h):
			apart.limitedToo[h] = true
		default:
			apart.limited = append(apart.limited, h)
		}
	}
	for _, h := range f.ordered {
		if !slices.Contains(full, h) {
			apart.ordered = append(apart.ordered, h)
		}
	}
	all := append(full, f.limited...)
	for _, h := range f.ordered {
		if !slices.Contains(all, h) {
			all = append(all, h)
		}
	}
	// A handler whose pace leaves it room for less than a claim batch is
	// claimed apart with that room as its batch: an unlimited, unordered
	// one in the ordered loop (ClaimHandlerJobs), not by ClaimJobs, which
	// would lease up to a batch of it; a limited or ordered one in its own
	// loop.
	// So is a limited or ordered one whose pace is not read yet, with the
	// floor's room: it is claimed apart anyway, where nothing else cut its
	// first claims to the floor (the main claim's beyondFloor does that for
	// the others), and a slow one's first reading takes up to
	// paceMaxWindow.
	candidates := map[string]bool{}
	for h := range f.pace {
		candidates[h] = true
	}
	for _, h := range all {
		candidates[h] = true
	}
	for h := range candidates {
		if slices.Contains(full, h) {
			continue
		}
		if p := f.pace[h]; (p == nil || !p.measured) && !slices.Contains(f.limited, h) && !slices.Contains(f.ordered, h) {
			continue
		}
		room := f.capOf(h) - f.unext[h]
		if room >= f.batch {
			continue
		}
		if apart.room == nil {
			apart.room = map[string]int{}
		}
		apart.room[h] = room
		if !slices.Contains(all, h) {
			apart.ordered = append(apart.ordered, h)
			all = append(all, h)
		}
	}
	return all, apart, nil
}

func (f *inFlight) full() []string {
	full := append([]string{}, f.quiet...)
	for h, n := range f.counts {
		if n >= f.limit || f.unext[h] >= f.capOf(h) {
			full = append(full, h)
		}
	}
	return full
}

// unmeasuredAtFloor reports whether a handler whose pace is not read yet
// is held at the floor: counted again soon, so a fast handler's first
// reading comes within a few milliseconds.
func (f *inFlight) unmeasuredAtFloor() bool {
	for h, p := range f.pace {
		// Soon only while a fast handler's first reading may come (its
		// window paceWindow long): a slow one's takes up to paceMaxWindow,
		// and is counted at refresh.
		if !p.measured && f.unext[h] >= f.floor && len(f.routes[h]) == 0 &&
			(p.window.IsZero() || time.Since(p.window) < 2*paceWindow) {
			return true
		}
	}
	return false
}

// atHardLimit reports whether a handler has limit leases: counted again
// sooner, its consumers finishing jobs the count does not show. One held
// by its pace is not: its jobs end slowly.
func (f *inFlight) atHardLimit() bool {
	for _, n := range f.counts {
		if n >= f.limit {
			return true
		}
	}
	return false
}

func (f *inFlight) recount(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := queries.New(pool).CountLeasedJobs(ctx)
	if err != nil {
		return fmt.Errorf("count leased jobs: %w", err)
	}
	counts, unext := map[string]int{}, map[string]int{}
	var quiet []string
	for _, r := range rows {
		if r.Quiet {
			quiet = append(quiet, r.Handler)
			continue
		}
		counts[r.Handler], unext[r.Handler] = int(r.Leased), int(r.Unextended)
	}
	limited, err := queries.New(pool).ListLimitedHandlers(ctx)
	if err != nil {
		return fmt.Errorf("list limited handlers: %w", err)
	}
	ordered, err := queries.New(pool).ListOrderedHandlers(ctx)
	if err != nil {
		return fmt.Errorf("list ordered handlers: %w", err)
	}
	routes, routed := f.routes, f.routed
	if time.Since(f.routed) >= routesRefresh {
		routeRows, err := queries.New(pool).ListJobRoutes(ctx)
		if err != nil {
			return fmt.Errorf("list job routes: %w", err)
		}
		routes, routed = jobRoutes{}, time.Now()
		for _, r := range routeRows {
			routes[r.Handler] = append(routes[r.Handler], jobRoute{role: r.RoleName, provider: r.ProviderPattern, eventType: r.EventTypePattern})
		}
	}
	topicCounts, countedAt, err := countRouted(ctx, pool, routes)
	if err != nil {
		return err
	}
	now := time.Now()
	for t, tp := range f.topics {
		c, ok := topicCounts[t]
		if !ok && !routes.hasTopic(t) {
			delete(f.topics, t) // its handler is no longer shared, or its role gone
			continue
		}
		tp.pace.note(c.leased, now)
		tp.unext, tp.counted = c.unext, countedAt
	}
	for t, c := range topicCounts {
		if _, ok := f.topics[t]; !ok {
			tp := f.topicPaceOf(t)
			tp.unext, tp.counted = c.unext, countedAt
			tp.pace.note(c.leased, now)
		}
	}
	for h, p := range f.pace {
		if _, ok := counts[h]; !ok {
			p.note(0, now)
		}
	}
	for h, n := range counts {
		f.paceOf(h).note(n, now)
	}
	f.counts, f.unext, f.quiet, f.limited, f.ordered, f.counted = counts, unext, quiet, limited, ordered, now
	f.routes, f.routed = routes, routed
	return nil
}

// paceOf is h's pace, a new one for a handler not seen before. f.mu is held.
func (f *inFlight) paceOf(h string) *handlerPace {
	p := f.pace[h]
	if p == nil {
		p = &handlerPace{longest: f.lease / 2}
		f.pace[h] = p
	}
	return p
}

// topicPaceOf is topic t's pace, a new one for a topic not seen before, as
// paceOf a handler's. f.mu is held.
func (f *inFlight) topicPaceOf(t string) *topicPace {
	tp := f.topics[t]
	if tp == nil {
		tp = &topicPace{pace: handlerPace{longest: f.lease / 2}}
		f.topics[t] = tp
	}
	return tp
}

// floorRoom is how many more leases h may take while its pace is not read
// (ok false once it is): what its floor leaves beside its unextended leases.
func (f *inFlight) floorRoom(h string) (room int, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.pace[h]; (p != nil && p.measured) || len(f.routes[h]) > 0 {
		return 0, false // paced, or paced per role (capOf)
	}
	return max(f.floor-f.unext[h], 0), true
}

// expired says the reaper took back n expired leases of h: they ended, but
// not at the consumers' pace (counted as ended they raised it, leasing more
// to expire in turn).
func (f *inFlight) expired(h string, n int) {
	f.mu.Lock()
	if p := f.pace[h]; p != nil {
		p.mine -= n
	}
	f.mu.Unlock()
}

// leased adds n leases of handler h, taken by this streamer.
func (f *inFlight) leased(h string, n int) {
	f.mu.Lock()
	f.counts[h] += n
	f.unext[h] += n
	f.paceOf(h).mine += n
	f.mu.Unlock()
}

// routedCount is one topic's leases: all, and those nobody has extended.
type routedCount struct{ leased, unext int }

// countRouted counts the leases of the routed handlers per topic
// (CountLeasedRoutedJobs, each group mapped by topicOf), and returns the
// server's time of the count; nothing is read when no handler is routed.
func countRouted(ctx context.Context, pool *pgxpool.Pool, routes jobRoutes) (map[string]routedCount, time.Time, error) {
	if len(routes) == 0 {
		return nil, time.Time{}, nil
	}
	handlers := make([]string, 0, len(routes))
	for h := range routes {
		handlers = append(handlers, h)
	}
	rows, err := queries.New(pool).CountLeasedRoutedJobs(ctx, handlers)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("count leased jobs of shared handlers: %w", err)
	}
	counts := map[string]routedCount{}
	var at time.Time
	for _, r := range rows {
		at = r.CountedAt
		if r.Handler == "" {
			continue // the row that carries the time alone
		}
		t := routes.topicOf(r.Handler, r.Provider, r.EventType)
		c := counts[t]
		c.leased += int(r.Leased)
		c.unext += int(r.Unextended)
		counts[t] = c
	}
	return counts, at, nil
}

// topicRoom is how many more references may wait on topic t of a routed
// handler (what its consumers start in half a lease at its pace, at least
// floor, at most limit, less its unextended leases) and how long, at that
// pace, its consumers take per job: at a pace read as zero (a role stalled
// or gone quiet), the floor's pace (floor jobs in half a lease); while the
// pace is not read yet (a topic new to this streamer), 0.
func (f *inFlight) topicRoom(t string) (room int, per time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tp := f.topics[t]
	if tp == nil || !tp.pace.measured {
		unext := 0
		if tp != nil {
			unext = tp.unext
		}
		return max(f.capAt(nil)-unext, 0), 0
	}
	limit := f.capAt(&tp.pace)
	per = f.lease / 2 / time.Duration(f.floor)
	if tp.pace.perSecond*per.Seconds() > 1 {
		per = time.Duration(float64(time.Second) / tp.pace.perSecond)
	}
	return max(limit-tp.unext, 0), per
}

// topicPublished adds a reference published on topic t of a routed
// handler, leased at leasedAt (the server's time): to what the last
// recount did not count.
func (f *inFlight) topicPublished(t string, leasedAt time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tp := f.topicPaceOf(t)
	if !leasedAt.Before(tp.counted) {
		tp.unext++
		tp.pace.mine++
	}
}

// released takes back n leases of h that leased counted and this streamer
// gave back unpublished.
func (f *inFlight) released(h string, n int) {
	f.mu.Lock()
	f.counts[h] -= n
	f.unext[h] -= n
	f.paceOf(h).mine -= n
	f.mu.Unlock()
}

// topicDefer is how long after now a reference deferred now on topic t is
// due again: a job's time per after the topic's last deferred one (or after
// now), at most deferLimit. With per 0 (the topic's pace not read yet) it is
// paceMaxWindow, unchained: by then the pace is read (a reading comes
// within paceMaxWindow), and the references are deferred by it if need be;
// sooner, a slow role's whole backlog was leased and deferred again every
// few recounts until then.
//
// now is a reading of this process's clock (time.Now): the chain is kept
// on its monotonic clock, and the delay is added to the database's now()
// by DeferJobs, as every claim compares due times with that. A due time on
// this process's wall clock was the skew between the clocks off: in the
// database's past when its clock ran ahead, the slow role's deferred
// backlog was due again at once, leased and deferred on every claim, and
// the other roles' jobs behind it never reached (review helper-270).
func (f *inFlight) topicDefer(t string, per time.Duration, now time.Time) time.Duration {
	if per == 0 {
		return paceMaxWindow
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	tp := f.topicPaceOf(t)
	at := now.Sub(f.origin)
	due := at + per
	if tp.deferred > at {
		due = tp.deferred + per
	}
	due = min(due, at+f.deferLimit())
	tp.deferred = due
	return due - at
}

// deferLimit is how far ahead a deferred reference may be due: a lease
// (paceMaxWindow at least). The chain is spaced at the topic's pace when
// the reference is deferred, and a pace read while the role was given
// little (its floor, then room it grows into at once) is its supply, not
// what it can take: deferred far on it, a fast role's jobs waited behind a
// slow start long after its pace was read (a role's first seconds put
// 2,000 jobs 47 s ahead). Beyond a lease, a slow role's backlog comes
// back and is deferred again, once a lease.
func (f *inFlight) deferLimit() time.Duration {
	return max(paceMaxWindow, f.lease)
}

// topicDeferred says a lease on topic t, taken at leasedAt, was given back
// unpublished: if the last recount counted it, the next must not read it
// as a job the topic's consumers finished.
func (f *inFlight) topicDeferred(t string, leasedAt time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if tp := f.topics[t]; tp != nil && leasedAt.Before(tp.counted) {
		tp.unext--
		tp.pace.mine--
	}
}

// topicExpired says the reaper took back an expired lease on topic t: it
// ended, but not at the consumers' pace (counted as published or at the
// last recount, it must not read as finished).
func (f *inFlight) topicExpired(t string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if tp := f.topics[t]; tp != nil {
		tp.pace.mine--
	}
}
