package streamer

import (
	"context"
	"fmt"
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
	counted time.Time
}

func newInFlight(limit int, refresh time.Duration) *inFlight {
	return &inFlight{limit: limit, refresh: refresh, atLimitRefresh: refresh / 10, counts: map[string]int{}}
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
	if age >= f.refresh || (len(full) > len(f.quiet) && age >= f.atLimitRefresh) {
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
	return all, apart, nil
}

func (f *inFlight) full() []string {
	full := append([]string{}, f.quiet...)
	for h, n := range f.counts {
		if n >= f.limit {
			full = append(full, h)
		}
	}
	return full
}

func (f *inFlight) recount(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := queries.New(pool).CountLeasedJobs(ctx)
	if err != nil {
		return fmt.Errorf("count leased jobs: %w", err)
	}
	counts := map[string]int{}
	var quiet []string
	for _, r := range rows {
		if r.Quiet {
			quiet = append(quiet, r.Handler)
			continue
		}
		counts[r.Handler] = int(r.Leased)
	}
	limited, err := queries.New(pool).ListLimitedHandlers(ctx)
	if err != nil {
		return fmt.Errorf("list limited handlers: %w", err)
	}
	ordered, err := queries.New(pool).ListOrderedHandlers(ctx)
	if err != nil {
		return fmt.Errorf("list ordered handlers: %w", err)
	}
	f.counts, f.quiet, f.limited, f.ordered, f.counted = counts, quiet, limited, ordered, time.Now()
	return nil
}

// leased adds n leases of handler h, taken by this streamer.
func (f *inFlight) leased(h string, n int) {
	f.mu.Lock()
	f.counts[h] += n
	f.mu.Unlock()
}
