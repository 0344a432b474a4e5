package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/filter"
	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// filterRefresh is how often ingress reads its copy of the filtered
// subscriptions again. A change in between still applies to the next event:
// the insert's trigger refuses a transaction whose copy is out of date (its
// version, 040), and the store reads the copy again (filters.changed).
const filterRefresh = time.Second

// filters is ingress's copy of the enabled subscriptions that carry a CEL
// filter (the events_fan_out trigger makes the jobs of the others), compiled,
// and what each evaluation concluded.
type filters struct {
	pool   *pgxpool.Pool
	logger *slog.Logger

	mu     sync.Mutex
	loaded time.Time
	// version is filtered routing's version (040) when subs was read; stale
	// asks the next call to read again, sooner than filterRefresh.
	version int64
	stale   bool
	subs    []filteredSub
	// compiled holds the programs of the expressions in subs, by
	// expression, across refreshes; each reload keeps only those still
	// carried (a consumer role may write its filter: an expression changed
	// a thousand times must not hold a thousand programs).
	compiled map[string]*filter.Filter

	// room bounds the memory of the bodies parsed at once (see parseRoom);
	// the server sizes it from its budget (useParseRoom).
	room atomic.Pointer[parseRoom]

	evaluations *prometheus.CounterVec
}

type filteredSub struct {
	id              int64
	handler         string
	provider, etype *regexp.Regexp
	f               *filter.Filter
}

func newFilters(pool *pgxpool.Pool) *filters {
	f := &filters{pool: pool, logger: slog.Default().With(slog.String("component", "ingress")),
		compiled: map[string]*filter.Filter{},
		evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "ingress", Name: "filter_evaluations_total",
			Help: "Subscription filters evaluated at ingress, by handler and result (match, miss, error: a miss whose expression failed on the event); once per event stored or found a duplicate, with the verdict its insert used.",
		}, []string{"handler", "result"})}
	f.room.Store(newParseRoom(DefaultMaxInflightBytes))
	return f
}

// filterLoadTimeout bounds one read of the filtered subscriptions.
const filterLoadTimeout = 5 * time.Second

// current returns the filtered subscriptions, reloaded when older than
// filterRefresh. Until one read has succeeded there is no copy to route
// by: the events_fan_out trigger skips filtered subscriptions, so an event
// stored then would silently miss their jobs. A failed first read therefore
// fails with errNotWritten (the insert is answered "not stored" and the
// provider retries), and the next call reads again. After a success, a
// failed reload keeps the last copy until the next attempt, a filterRefresh
// later: the insert that follows fails the same way if Postgres is
// unreachable.
//
// The read runs on its own context (ctx's values, not its cancellation,
// with filterLoadTimeout): the request that happens to trigger it giving up
// must not decide the routing of the others.
func (f *filters) current(ctx context.Context) ([]filteredSub, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.loaded.IsZero() && !f.stale && time.Since(f.loaded) < filterRefresh {
		return f.subs, f.version, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), filterLoadTimeout)
	defer cancel()
	// The version first: a change committed between the two reads leaves
	// a copy newer than its version, which only costs a read more.
	q := queries.New(f.pool)
	version, err := q.IngressFilterVersion(ctx)
	var rows []queries.IngressFilteredSubscriptionsRow
	if err == nil {
		rows, err = q.IngressFilteredSubscriptions(ctx)
	}
	if err != nil {
		if f.loaded.IsZero() {
			return nil, 0, fmt.Errorf("read filtered subscriptions: %w: %w", errNotWritten, err)
		}
		// Reloaded at most once per filterRefresh, also when reading fails
		// (stale or not: a frozen database costs one wait a second).
		f.loaded, f.stale = time.Now(), false
		f.logger.Warn("read filtered subscriptions failed; using the last copy", slog.String("error", err.Error()))
		return f.subs, f.version, nil
	}
	f.loaded, f.version, f.stale = time.Now(), version, false
	var subs []filteredSub
	compiled := make(map[string]*filter.Filter, len(rows))
	for _, r := range rows {
		id, handler, provider, etype := r.ID, r.Handler, r.ProviderPattern, r.EventTypePattern
		var expr string
		if r.Filter != nil { // always: the query reads only rows with a filter
			expr = *r.Filter
		}
		prg, ok := compiled[expr]
		if !ok {
			prg, ok = f.compiled[expr]
		}
		if !ok {
			if prg, err = filter.Compile(expr); err != nil {
				// Consumers compile their filters before registering them,
				// so this is a row written by hand, or by a consumer whose
				// filter module knows more than this ingress's: its handler
				// gets no jobs from it. It stays in the copy without a
				// program, so each event its patterns match counts as an
				// error (match); this line says it once per expression
				// while a subscription carries it (compiled remembers it).
				f.logger.Error("subscription filter does not compile; its handler gets no jobs through it",
					slog.Int64("subscription", id), slog.String("handler", handler), slog.String("error", err.Error()))
				prg = nil
			}
		}
		compiled[expr] = prg // nil: does not compile
		subs = append(subs, filteredSub{id: id, handler: handler, provider: filter.Pattern(provider), etype: filter.Pattern(etype), f: prg})
	}
	f.subs, f.compiled = subs, compiled
	return subs, version, nil
}

// changed marks the copy stale: a store found filtered routing changed
// since it was read (errFiltersChanged).
func (f *filters) changed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stale = true
}

// verdicts is what matching one event concluded: the filtered subscriptions
// it passed (ids), the version of filtered routing they were read at (the
// insert's trigger checks it), and each evaluation's result, counted in
// inlet_ingress_filter_evaluations_total only once the insert that used
// them committed (filters.count): verdicts an insert refused for a changed
// filter (filtersChanged) threw away, or one that failed, are not counted.
type verdicts struct {
	ids     []int64
	version int64
	results []verdict
}

// verdict is one evaluation's result: match, miss or error.
type verdict struct{ handler, result string }

// count adds v's results to inlet_ingress_filter_evaluations_total: call it
// once per event, after the insert that used v committed (the event stored
// or a duplicate).
func (f *filters) count(v verdicts) {
	for _, r := range v.results {
		f.evaluations.WithLabelValues(r.handler, r.result).Inc()
	}
}

// match returns the verdicts of the filtered subscriptions on e; it counts
// nothing (see verdicts). The body is parsed once, and only when some
// subscription's patterns match e, within the parse room (waiting in line
// for it: past ctx's end the error wraps errOverloaded). An error (see
// current) means e must not be stored yet.
func (f *filters) match(ctx context.Context, e *Event) (verdicts, error) {
	subs, version, err := f.current(ctx)
	v := verdicts{version: version}
	if err != nil || len(subs) == 0 {
		return v, err
	}
	var (
		ev     filter.Event
		parsed bool
		room   = f.room.Load()
		held   int64 // in room, until the filters are evaluated
	)
	defer func() { room.release(held) }()
	for _, s := range subs {
		if !s.provider.MatchString(e.Provider) || !s.etype.MatchString(e.EventType) {
			continue
		}
		if !parsed {
			parsed = true
			ev = filter.Event{Source: e.Provider, Type: e.EventType, Headers: e.Headers}
			if !e.OccurredAt.IsZero() {
				at := e.OccurredAt
				ev.OccurredAt = &at
			}
			if held, err = room.acquire(ctx, e.RawBody); err != nil {
				// Nothing of it written: 503 overloaded, the provider retries.
				return verdicts{version: version}, fmt.Errorf("wait for room to parse a %d-byte body for the filter of subscription %d: %w: %w: %w",
					len(e.RawBody), s.id, errOverloaded, errNotWritten, err)
			}
			ev.Payload = filter.ParsePayload(e.RawBody)
		}
		if s.f == nil { // its filter does not compile (current)
			v.results = append(v.results, verdict{s.handler, "error"})
			continue
		}
		ok, err := s.f.MatchContext(ctx, ev)
		switch {
		case err != nil && ctx.Err() != nil:
			// The request's deadline, not the filter's verdict: the
			// webhook is not stored (503), the provider retries. Matching
			// runs before any write (and after a refused one), so nothing
			// of it can commit: not written, not outcome_unknown.
			return verdicts{version: version}, fmt.Errorf("evaluate filter of subscription %d: %w: %w", s.id, errNotWritten, err)
		case err != nil:
			v.results = append(v.results, verdict{s.handler, "error"})
		case ok:
			v.results = append(v.results, verdict{s.handler, "match"})
			v.ids = append(v.ids, s.id)
		default:
			v.results = append(v.results, verdict{s.handler, "miss"})
		}
	}
	return v, nil
}

var fanOutFilteredSQL = schema.Query("FanOutFiltered")

// filtersChangedCode is the SQLSTATE an insert fails with when filtered
// routing changed since the version it says its events were matched at
// (the events_fan_out trigger, 040).
const filtersChangedCode = "IN001"

// filtersChanged reports whether err is that failure: nothing of the
// transaction was stored, and the events are to be matched again on a
// fresh copy of the filtered subscriptions and stored again.
func filtersChanged(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == filtersChangedCode
}

// fanOutArgs flattens (event key, subscription) pairs for FanOutFiltered.
func fanOutArgs(events []*Event, matches [][]int64) (providers, extIDs []string, subs []int64) {
	for i, e := range events {
		for _, id := range matches[i] {
			providers, extIDs, subs = append(providers, e.Provider), append(extIDs, e.ExternalID), append(subs, id)
		}
	}
	return providers, extIDs, subs
}

// useParseRoom sizes the room of the bodies parsed for the filters at once
// from the server's ingress.max_inflight_bytes (ingress.New).
func (s *PGStore) useParseRoom(inflight int64) { s.filters.room.Store(newParseRoom(inflight)) }

// useParseRoom: see PGStore.useParseRoom.
func (g *GroupStore) useParseRoom(inflight int64) { g.single.useParseRoom(inflight) }

// FilterMetrics is the subscription filters' metric
// (inlet_ingress_filter_evaluations_total); ingress.New registers it.
func (s *PGStore) FilterMetrics() prometheus.Collector { return s.filters.evaluations }

// FilterMetrics is the subscription filters' metric; ingress.New registers it.
func (g *GroupStore) FilterMetrics() prometheus.Collector { return g.single.filters.evaluations }
