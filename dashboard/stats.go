package dashboard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema/queries"
)

// readTx runs f in one read-only snapshot, as package admin reads, each
// statement bounded by the time ctx (the page's RequestTimeout) has left:
// PostgreSQL stops it there itself, beside the cancel request the pool
// sends when ctx ends (review helper-295).
func readTx(ctx context.Context, db admin.DB, f func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if timeout := database.LocalStatementTimeout(ctx); timeout != "" {
			if _, err := tx.Exec(ctx, timeout); err != nil {
				return fmt.Errorf("set statement_timeout: %w", err)
			}
		}
		return f(tx)
	})
}

// series is one source's events per bucket.
type series struct {
	Source string
	Counts []int64
	Total  int64
}

// rates is the plotted window: bucket starts and a series per source.
type rates struct {
	Starts []time.Time
	Bucket time.Duration
	Series []series
}

// window returns the plotted buckets ending with the one holding now.
func (c Config) window(now time.Time) (since time.Time, n int) {
	n = int((c.Window + c.Bucket - 1) / c.Bucket)
	end := now.Truncate(c.Bucket).Add(c.Bucket)
	return end.Add(-time.Duration(n) * c.Bucket), n
}

// loadRates reads events per source per bucket: the configured sources in
// their order, then any other source with events in the window.
func loadRates(ctx context.Context, tx pgx.Tx, sources []string, since time.Time, bucket time.Duration, n int) (rates, error) {
	r := rates{Bucket: bucket, Starts: make([]time.Time, n)}
	for i := range n {
		r.Starts[i] = since.Add(time.Duration(i) * bucket)
	}
	rows, err := queries.New(tx).DashboardEventRates(ctx, queries.DashboardEventRatesParams{
		Since: since, Sources: nonNil(sources), BucketSeconds: int32(bucket / time.Second), Buckets: int32(n)}) //nolint:gosec // G115: the dashboard's own constants (an hour, 24 buckets)
	if err != nil {
		return r, fmt.Errorf("event rates: %w", err)
	}
	bySource := map[string]*series{}
	var order []string
	for _, row := range rows {
		source, count := row.Provider, row.Events
		s := bySource[source]
		if s == nil {
			s = &series{Source: source, Counts: make([]int64, 0, n)}
			bySource[source] = s
			order = append(order, source)
		}
		s.Counts = append(s.Counts, count)
		s.Total += count
	}
	for _, name := range sources {
		if s := bySource[name]; s != nil {
			r.Series = append(r.Series, *s)
			delete(bySource, name)
		}
	}
	for _, name := range order { // the rest, as the query ordered them
		if s := bySource[name]; s != nil {
			r.Series = append(r.Series, *s)
		}
	}
	return r, nil
}

// activityRow is one row of the source activity table.
type activityRow struct {
	SourceActivity
	// Age is how long ago LastSeen was (0 when never).
	Age time.Duration
}

// lastSeen reads each source's last event, for when no silence detector is
// configured: nothing is flagged silent.
func lastSeen(ctx context.Context, tx pgx.Tx, sources []string) ([]SourceActivity, error) {
	rows, err := queries.New(tx).DashboardLastSeen(ctx, nonNil(sources))
	if err != nil {
		return nil, fmt.Errorf("last events per source: %w", err)
	}
	hb := make([]SourceActivity, len(rows))
	for i, r := range rows {
		hb[i].Source = r.Provider
		if r.Seen {
			hb[i].LastSeen = r.LastSeen
		}
	}
	return hb, nil
}

// handlerStats is one handler's row of the handlers table.
type handlerStats struct {
	Handler                             string
	Pending, Leased, Failed, DeadLetter int64
	// Lag is how long its oldest undelivered due job (pending, failed or
	// leased, as inlet_handler_lag_seconds) has been due;
	// HasLag is false when none is due.
	Lag    time.Duration
	HasLag bool
	// Attempts and Failures (failed, dead_letter and lease_expired
	// outcomes: an expired lease the reaper counted as an attempt ran the
	// handler, which never reported) finished in the failure-rate window.
	Attempts, Failures int64
	// Circuit is the state of its circuit breaker (closed, open, half_open),
	// "" without one; Limits its rate and in-flight limits as text, "" for
	// none.
	Circuit, Limits string
}

// FailureRate is Failures / Attempts, 0 without attempts.
func (h handlerStats) FailureRate() float64 {
	if h.Attempts == 0 {
		return 0
	}
	return float64(h.Failures) / float64(h.Attempts)
}

// failureWindow is the span of the handlers' failure rate.
const failureWindow = time.Hour

func loadHandlers(ctx context.Context, tx pgx.Tx, now time.Time) ([]handlerStats, error) {
	rows, err := queries.New(tx).DashboardHandlers(ctx, queries.DashboardHandlersParams{Now: now, FailuresSince: now.Add(-failureWindow)})
	if err != nil {
		return nil, fmt.Errorf("handler stats: %w", err)
	}
	hs := make([]handlerStats, len(rows))
	for i, r := range rows {
		hs[i] = handlerStats{Handler: r.Handler, Pending: r.Pending, Leased: r.Leased, Failed: r.Failed, DeadLetter: r.DeadLetter,
			Attempts: r.Attempts, Failures: r.Failures}
		if r.HasLag {
			hs[i].HasLag = true
			hs[i].Lag = time.Duration(r.LagSeconds * float64(time.Second))
		}
	}
	limits, err := admin.HandlerLimits(ctx, tx)
	if err != nil {
		return nil, err
	}
	for i := range hs {
		l := limits[hs[i].Handler]
		if l == nil {
			continue
		}
		if l.BreakerFailures > 0 {
			hs[i].Circuit = l.Circuit
		}
		var parts []string
		if l.RateLimit > 0 {
			parts = append(parts, fmt.Sprintf("%g/s", l.RateLimit))
		}
		if l.MaxInFlight > 0 {
			parts = append(parts, fmt.Sprintf("%d in flight", l.MaxInFlight))
		}
		hs[i].Limits = strings.Join(parts, ", ")
	}
	return hs, nil
}

// sourceNames is the configured sources, then the others the plot found.
func sourceNames(configured []string, r rates) []string {
	names := slices.Clone(configured)
	for _, s := range r.Series {
		if !slices.Contains(names, s.Source) {
			names = append(names, s.Source)
		}
	}
	return names
}

// nonNil keeps a text[] parameter from being NULL.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
