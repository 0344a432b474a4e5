package backfill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/logvalue"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Leader says whether this replica runs the schedule (monitor.Leader over
// its own lock): of several streamers, one reconciles.
type Leader interface {
	Leading(ctx context.Context) (bool, error)
}

// ScheduleConfig configures [Schedule].
type ScheduleConfig struct {
	Section Section // after WithDefaults and Validate
	// Store and DB are Reconcile's, as Section.DBRole. Required.
	Store ingress.Store
	DB    queries.DBTX
	// Leader elects the one replica that runs. Required.
	Leader  Leader
	Metrics *ReconcileMetrics
	Logger  *slog.Logger
	// HTTPClient makes the API requests; nil: Config's default.
	HTTPClient *http.Client
	// Now defaults to time.Now.
	Now func() time.Time
}

// Schedule runs Reconcile for each source of cfg.Section every Interval over
// the last Window up to Settle ago, while this replica leads, until ctx is
// done. The first round is at once. A round that starts late (the last one
// ran longer than Interval: rate-limit waits, many pages) or follows a
// failed one reaches back to where the completed runs of the entry's
// listing (its account label, its Stripe types, its GitHub hook; or of the
// whole source) first
// left a stretch uncompared (a manual run's later window does not hide it,
// nor does another entry's run of the same source), so no stretch of time
// goes uncompared (at most 30 days back, what the providers keep, and never
// before the end of the newest period inlet retention dropped: the log
// keeps nothing older to compare with, see Reconcile). That
// point is read from reconcile_runs each round, not kept in memory, so it
// survives a restart and a failover to another replica. A source's failure
// is logged and recorded in its reconcile_runs row; the others still run.
// Events keep the stored scheme's default occurred_at and payload copy (the
// streamer does not read sources:).
func Schedule(ctx context.Context, cfg ScheduleConfig) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Idempotent: a caller that skipped it would leave Settle nil, and
	// every round would dereference it.
	cfg.Section = cfg.Section.WithDefaults()
	t := time.NewTicker(cfg.Section.Interval)
	defer t.Stop()
	for {
		scheduledRound(ctx, cfg)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func scheduledRound(ctx context.Context, cfg ScheduleConfig) {
	leading, err := cfg.Leader.Leading(ctx)
	if err != nil {
		cfg.Logger.Warn("reconcile: leader election failed; skipping this round", slog.String("error", err.Error()))
		return
	}
	if !leading {
		return
	}
	until := cfg.Now().Add(-*cfg.Section.Settle)
	for i, src := range cfg.Section.Sources {
		if ctx.Err() != nil {
			return
		}
		// The entry's index (and account label) tells apart several
		// entries of one source.
		log := cfg.Logger.With(slog.String("source", src.Source), slog.Int("entry", i))
		if src.Account != "" {
			log = log.With(slog.String("account", src.Account))
		}
		// What the entry lists (its account, types, hook): the coverage it
		// reaches back over is that of its own listing, not of the other
		// entries of its source. It does not depend on the window.
		probe, err := src.Lister(time.Time{}, time.Time{})
		if err != nil { // Validate saw it already
			log.Error("reconcile: bad source", slog.String("error", err.Error()))
			continue
		}
		since, kept, err := scheduledSince(ctx, cfg, src.Source, probe.scope(), until)
		if err != nil {
			// Without where the completed runs' coverage stops, the
			// default window could leave a stretch uncompared; the next
			// round reaches back over this one.
			cfg.Metrics.finished(src.Source, err)
			log.Error("reconcile failed", logvalue.ErrorAttr(err))
			continue
		}
		if !kept.IsZero() && since.Equal(kept) {
			// Said while no completed run covers from there: the round
			// that does closes the gap, and the next reaches back no more.
			log.Warn("reconcile: the stretch the completed runs left uncompared reaches back past what the log keeps; comparing from the end of the newest period inlet retention dropped",
				slog.Time("retained_since", kept))
		}
		l, err := src.Lister(since, until)
		if err != nil { // Validate saw it already
			log.Error("reconcile: bad source", slog.String("error", err.Error()))
			continue
		}
		d := Derive{OccurredAt: verify.NewOccurredAt(verify.Config{Type: src.Type}), StoreJSON: true, StoreJSONMaxBytes: 256 << 10}
		rep, err := Reconcile(ctx, ReconcileConfig{Source: src.Source, Scheme: src.Type, Store: cfg.Store, DB: cfg.DB,
			Since: since, Until: until, OccurredAt: d.OccurredAt, StoreJSON: d.StoreJSON, StoreJSONMaxBytes: d.StoreJSONMaxBytes,
			HTTPClient: cfg.HTTPClient, Metrics: cfg.Metrics, Logger: cfg.Logger}, l)
		attrs := []any{slog.Int64("run", rep.RunID), slog.Int64("listed", rep.Total.Listed), slog.Int64("already_stored", rep.Total.AlreadyStored),
			slog.Int64("missing", rep.Total.Missing), slog.Int64("stored", rep.Total.Stored), slog.Int64("duplicates", rep.Total.Duplicates)}
		if rep.Total.Gone > 0 {
			attrs = append(attrs, slog.Int64("gone", rep.Total.Gone))
		}
		if sk := rep.Skipped; sk != nil {
			// reconcile.window longer than retention.max_age: each round
			// compares the part of its window the log keeps.
			attrs = append(attrs, slog.Time("skipped_since", sk.Since), slog.Time("skipped_until", sk.Until), slog.String("skipped_reason", sk.Reason))
		}
		switch {
		case errors.Is(err, ErrWindowDropped):
			// retention.max_age shorter than reconcile.settle: nothing the
			// schedule compares is kept. No run, no failure counted.
			log.Warn("reconcile: inlet retention dropped the whole window; nothing compared", append(attrs, logvalue.ErrorAttr(err))...)
		case err != nil && !errors.Is(err, context.Canceled):
			log.Error("reconcile failed", append(attrs, logvalue.ErrorAttr(err))...)
		case err == nil && rep.Total.Missing > 0:
			log.Warn("reconcile stored events the provider listed but never delivered", attrs...)
		case err == nil:
			log.Info("reconcile: nothing missing", attrs...)
		}
	}
}

// scheduledSince is where the scheduled window of source's entry listing
// scope starts: Window before until, or earlier, where the scope's compared
// time first stops (a round that failed, started late, or ran in a process
// that has since stopped left the stretch after it uncompared), at most 30
// days before until and not before kept, the end of the newest period inlet
// retention dropped (zero: none), which it returns too. Coverage before
// kept is not asked for: those events and their dedupe keys are gone, so no
// run compares them (Reconcile starts at kept), and a gap left there would
// make every later round reach back to kept again. That is the end of the earliest stretch of completed
// runs that a gap follows, not the latest run's end: a manual run (inlet
// reconcile --since 2h) after failed rounds would otherwise skip the
// stretch they left. Only the runs that listed scope, or the whole source
// (scope ""), count: another entry of the source (another account label,
// other Stripe types, another repository's hook) compared none of this
// one's events. Read from
// reconcile_runs, which every run of every replica and the command write,
// not from this process's memory.
func scheduledSince(ctx context.Context, cfg ScheduleConfig, source, scope string, until time.Time) (since, kept time.Time, err error) {
	since = until.Add(-cfg.Section.Window)
	oldest := until.Add(-StripeRetention)
	q := queries.New(cfg.DB)
	if kept, err = keptSince(ctx, q); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("reconcile %s (%s): %w", source, scopeName(scope), err)
	}
	if kept.After(oldest) {
		oldest = kept
	}
	covered, err := q.ReconcileCoveredUntil(ctx,
		queries.ReconcileCoveredUntilParams{Source: source, Scope: scope, NotBefore: oldest})
	switch {
	case errors.Is(err, pgx.ErrNoRows): // never completed a run: the window alone
		return since, kept, nil
	case err != nil:
		return time.Time{}, time.Time{}, fmt.Errorf("reconcile %s (%s): read where the completed runs' coverage stops: %w", source, scopeName(scope), err)
	}
	if covered.Before(since) {
		since = covered
		if since.Before(oldest) {
			since = oldest
		}
	}
	return since, kept, nil
}

// scopeName is scope for an error message: "the whole source" for "".
func scopeName(scope string) string {
	if scope == "" {
		return "the whole source"
	}
	return scope
}
