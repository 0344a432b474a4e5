package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/schema/queries"
)

// ReconcileHeader is the header every event stored by a reconcile run
// carries, its value the run's id in webhook_ingress.reconcile_runs. With
// signature_verified = false and Inlet-Backfill naming the API, it tells an
// auditor the event was fetched from the provider's list, not delivered.
const ReconcileHeader = "Inlet-Reconcile"

// ErrWindowDropped is the error of a Reconcile whose whole window lies
// before the end of the newest period inlet retention dropped: nothing is
// compared (the log no longer holds those events, nor their dedupe keys)
// and no run is recorded.
var ErrWindowDropped = errors.New("inlet retention dropped the whole window")

// SkippedRetention is the Reason of the part of a window before the end of
// the newest period inlet retention dropped.
const SkippedRetention = "retention"

// ReconcileConfig configures one reconcile run.
type ReconcileConfig struct {
	// Source is the configured source name the events are stored under
	// (events.provider). Required.
	Source string
	// Scheme is the source's verifier type (events.scheme). Required.
	Scheme string
	// Store is ingress's write path (ingress.NewPGStore). Required.
	Store ingress.Store
	// DB reads which keys are stored (event_keys) and records the run
	// (reconcile_runs), as the ingress role. Required.
	DB queries.DBTX
	// Since and Until bound the window: events the provider made (Stripe)
	// or sent (GitHub) in [Since, Until]. Required. A Since before the end
	// of the newest period inlet retention dropped starts the run there
	// (Report.Skipped).
	Since, Until time.Time
	// DryRun counts what is missing and stores nothing (the run is still
	// recorded, marked dry_run).
	DryRun bool
	// OccurredAt, StoreJSON, StoreJSONMaxBytes derive columns as ingress
	// does for the source (see Config).
	OccurredAt        verify.OccurredAt
	StoreJSON         bool
	StoreJSONMaxBytes int
	// EventType reads each event's type from its body, as Config's.
	EventType verify.EventTypeOf
	// HTTPClient, MaxRetries, Backoff, MaxBackoff and MaxRateLimitWait are
	// the API client's, with Config's defaults.
	HTTPClient       *http.Client
	MaxRetries       int
	Backoff          time.Duration
	MaxBackoff       time.Duration
	MaxRateLimitWait time.Duration
	// Metrics counts missing events; nil counts nothing.
	Metrics *ReconcileMetrics
	// Logger gets a line for each missing delivery gone before its fetch
	// (its id, never its bytes). Defaults to slog.Default().
	Logger *slog.Logger
}

func (c ReconcileConfig) validate() error {
	switch {
	case c.Source == "":
		return errors.New("reconcile config: Source is required")
	case c.Scheme == "":
		return errors.New("reconcile config: Scheme is required")
	case c.Store == nil:
		return errors.New("reconcile config: Store is required")
	case c.DB == nil:
		return errors.New("reconcile config: DB is required")
	case c.Since.IsZero() || c.Until.IsZero() || !c.Since.Before(c.Until):
		return fmt.Errorf("reconcile config: the window [%s, %s] is empty", c.Since.Format(time.RFC3339), c.Until.Format(time.RFC3339))
	case c.MaxRetries < 0:
		return errors.New("reconcile config: MaxRetries must not be negative")
	}
	return nil
}

// Counts are what a reconcile run found, in total or for one event type.
type Counts struct {
	// Listed is the distinct events the provider listed in the window.
	Listed int64 `json:"listed"`
	// AlreadyStored is those the log held (received as webhooks, or stored
	// by an earlier backfill or reconcile), including any that arrived
	// between the look and the store.
	AlreadyStored int64 `json:"already_stored"`
	// Missing is those the log did not hold.
	Missing int64 `json:"missing"`
	// Stored is the missing events this run stored (0 in a dry run; less
	// than Missing when a listed delivery has no payload to store, or is
	// Gone).
	Stored int64 `json:"stored"`
	// Duplicates is extra listings of an event already listed (a GitHub
	// redelivery, a page that shifted under the cursor).
	Duplicates int64 `json:"duplicates"`
	// Gone is the Missing events not stored because the provider no longer
	// had them when their payload was fetched (a GitHub delivery answering
	// 404 or 410: aged out between the list and the fetch). Left out of
	// the JSON when 0.
	Gone int64 `json:"gone,omitempty"`
}

func (c *Counts) add(o Counts) {
	c.Listed += o.Listed
	c.AlreadyStored += o.AlreadyStored
	c.Missing += o.Missing
	c.Stored += o.Stored
	c.Duplicates += o.Duplicates
	c.Gone += o.Gone
}

// TypeCounts are the Counts of one event type.
type TypeCounts struct {
	Type string `json:"type"`
	Counts
}

// Skipped is a part of the asked window a run did not compare.
type Skipped struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Reason is why: SkippedRetention, inlet retention dropped the periods
	// before Until (the end of the newest it dropped) and their dedupe
	// keys, so each event listed there would have been taken for missing,
	// stored again under a new id and handled a second time.
	Reason string `json:"reason"`
}

// Report is what a reconcile run did.
type Report struct {
	RunID  int64     `json:"run_id"` // reconcile_runs.id, the Inlet-Reconcile header of what it stored
	Source string    `json:"source"`
	API    string    `json:"api"`
	Since  time.Time `json:"since"` // the window compared and recorded: the asked one, less Skipped
	Until  time.Time `json:"until"`
	// Skipped is the part of the asked window not compared: nil when none.
	// It ends after Since only when retention dropped a period while the
	// run listed.
	Skipped        *Skipped     `json:"skipped,omitempty"`
	DryRun         bool         `json:"dry_run"`
	Types          []TypeCounts `json:"items"` // by type, sorted
	Total          Counts       `json:"total"`
	Pages          int          `json:"pages"`
	RateLimitWaits int          `json:"rate_limit_waits"`
	Retries        int          `json:"retries"`
}

// Reconcile compares l's list of events in [cfg.Since, cfg.Until] with the
// log and stores each event the log lacks through cfg.Store, as a backfill
// does (signature_verified = false, the API's bytes), with the
// Inlet-Reconcile header naming this run. Which events the log holds is
// asked per page of the list, by dedupe key; an event listed twice is
// counted once (and as a duplicate). A GitHub delivery's payload is fetched
// only when it is missing. The run is recorded in reconcile_runs when it
// starts and when it ends, with the error if it stops early, and with what
// l lists (its scope: its account label, Stripe's types, GitHub's hook),
// the only listing the run's window counts as compared for in the scheduled
// reconcile's coverage (a Stripe run with neither an account label nor a
// type filter counts for every scope of its source); the
// Report is valid on error too. Running it again stores nothing more: what
// it stored is then already stored.
//
// Nothing before the end of the newest period inlet retention dropped is
// compared or stored (read when the run starts and again with each page):
// the log no longer holds those events, nor event_keys their keys, so each
// would be taken for missing and handled a second time under a new id. A
// window reaching back past it starts there, recorded and reported so
// (Report.Since), the part left out in Report.Skipped; a window wholly
// before it is ErrWindowDropped, with no run recorded.
//
// A missing GitHub delivery whose fetch answers 404 or 410 (gone from
// GitHub between the list and the fetch) is counted Missing and Gone, not
// stored, and logged with its id; any other failed fetch stops the run.
func Reconcile(ctx context.Context, cfg ReconcileConfig, l Lister) (Report, error) {
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := Config{HTTPClient: cfg.HTTPClient, MaxRetries: cfg.MaxRetries, Backoff: cfg.Backoff,
		MaxBackoff: cfg.MaxBackoff, MaxRateLimitWait: cfg.MaxRateLimitWait}.WithDefaults()
	rep := Report{Source: cfg.Source, API: apiName(l), Since: cfg.Since.UTC(), Until: cfg.Until.UTC(), DryRun: cfg.DryRun}
	c := &client{http: d.HTTPClient, auth: l.auth, maxRetries: d.MaxRetries, backoff: d.Backoff,
		maxBackoff: d.MaxBackoff, maxWait: d.MaxRateLimitWait, onWait: func(rateLimited bool, _ time.Duration, _ error) {
			if rateLimited {
				rep.RateLimitWaits++
			} else {
				rep.Retries++
			}
		}}
	q := queries.New(cfg.DB)
	kept, err := keptSince(ctx, q)
	if err != nil {
		return rep, fmt.Errorf("reconcile %s: %w", cfg.Source, err)
	}
	if !rep.skip(kept) {
		return rep, fmt.Errorf("reconcile %s: %w: [%s, %s] ends before %s, the end of the newest period it dropped; the log keeps no older event nor its dedupe key: nothing compared, no run recorded",
			cfg.Source, ErrWindowDropped, rep.Skipped.Since.Format(time.RFC3339), rep.Until.Format(time.RFC3339), kept.UTC().Format(time.RFC3339))
	}
	if rep.Skipped != nil {
		rep.Since = rep.Skipped.Until
	}
	id, err := q.StartReconcileRun(ctx, queries.StartReconcileRunParams{Source: cfg.Source, Api: rep.API,
		WindowSince: rep.Since, WindowUntil: rep.Until, DryRun: cfg.DryRun, Scope: l.scope()})
	if err != nil {
		return rep, fmt.Errorf("reconcile %s: record the run: %w", cfg.Source, err)
	}
	rep.RunID = id
	byType := map[string]*Counts{}
	err = reconcile(ctx, cfg, l, c, q, &rep, byType)
	for t, n := range byType {
		rep.Types = append(rep.Types, TypeCounts{Type: t, Counts: *n})
		rep.Total.add(*n)
	}
	slices.SortFunc(rep.Types, func(a, b TypeCounts) int {
		if a.Type < b.Type {
			return -1
		}
		if a.Type > b.Type {
			return 1
		}
		return 0
	})
	cfg.Metrics.finished(cfg.Source, err)
	// Recorded even when ctx is done: the run's row should say how it ended.
	finishCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if ferr := finishRun(finishCtx, q, rep, err); ferr != nil && err == nil {
		err = fmt.Errorf("reconcile %s: record the run's counts: %w", cfg.Source, ferr)
	}
	return rep, err
}

// skip records in r.Skipped the part of r's window before kept, the end of
// the newest period retention dropped (zero: none), and whether anything of
// the window is left. It only ever extends Skipped: the window's start, once
// recorded, stays.
func (r *Report) skip(kept time.Time) bool {
	since := r.Since
	if r.Skipped != nil {
		since = r.Skipped.Until
	}
	if !kept.After(since) {
		return true
	}
	if r.Skipped == nil {
		r.Skipped = &Skipped{Since: r.Since, Reason: SkippedRetention}
	}
	if kept.Before(r.Until) {
		r.Skipped.Until = kept.UTC()
		return true
	}
	r.Skipped.Until = r.Until
	return false
}

// keptSince is the end of the newest period inlet retention dropped: the
// log keeps nothing received before it. Zero when none was dropped.
func keptSince(ctx context.Context, q *queries.Queries) (time.Time, error) {
	end, err := q.RetentionDroppedThrough(ctx)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("read where inlet retention's dropped periods end (retention_log; run inlet migrate if permission is denied): %w", err)
	}
	return end, nil
}

func reconcile(ctx context.Context, cfg ReconcileConfig, l Lister, c *client, q *queries.Queries, rep *Report, byType map[string]*Counts) error {
	counts := func(typ string) *Counts {
		n := byType[typ]
		if n == nil {
			n = &Counts{}
			byType[typ] = n
		}
		return n
	}
	listed := map[string]bool{}
	cursor := ""
	seen := map[string]bool{cursor: true}
	for {
		pg, err := l.list(ctx, c, cursor)
		if err != nil {
			return fmt.Errorf("reconcile %s: page %d: %w", cfg.Source, rep.Pages+1, err)
		}
		if err := checkCursor(seen, pg.Next); err != nil {
			return fmt.Errorf("reconcile %s: page %d: %w", cfg.Source, rep.Pages+1, err)
		}
		rep.Pages++
		// A period retention dropped since the last look is out too: its
		// events' keys are going.
		kept, err := keptSince(ctx, q)
		if err != nil {
			return fmt.Errorf("reconcile %s: page %d: %w", cfg.Source, rep.Pages, err)
		}
		rep.skip(kept)
		since := rep.Since
		if kept.After(since) {
			since = kept
		}
		// The lists are newest first: past since, the rest of the list is
		// older still.
		older := false
		var fresh []item
		for _, it := range pg.Events {
			if !it.At.IsZero() && it.At.After(cfg.Until) {
				continue
			}
			if !it.At.IsZero() && it.At.Before(since) {
				older = true
				continue
			}
			if listed[it.ID] {
				counts(it.Type).Duplicates++
				continue
			}
			listed[it.ID] = true
			counts(it.Type).Listed++
			fresh = append(fresh, it)
		}
		have, err := storedKeys(ctx, q, cfg.Source, fresh)
		if err != nil {
			return fmt.Errorf("reconcile %s: %w", cfg.Source, err)
		}
		for _, it := range fresh {
			n := counts(it.Type)
			if have[it.ID] {
				n.AlreadyStored++
				continue
			}
			if cfg.DryRun {
				n.Missing++
				cfg.Metrics.missing(cfg.Source)
				continue
			}
			stored, err := storeMissing(ctx, cfg, c, rep.RunID, it)
			if err != nil {
				return fmt.Errorf("reconcile %s: %w", cfg.Source, err)
			}
			switch stored {
			case storedNow:
				n.Missing++
				n.Stored++
				cfg.Metrics.missing(cfg.Source)
			case storedMeanwhile:
				n.AlreadyStored++
			case notStorable:
				n.Missing++
				cfg.Metrics.missing(cfg.Source)
			case gone:
				n.Missing++
				n.Gone++
				cfg.Metrics.missing(cfg.Source)
			}
		}
		if pg.Next == "" || older {
			return nil
		}
		cursor = pg.Next
	}
}

// storedKeys is the set of items' ids the log holds for source.
func storedKeys(ctx context.Context, q *queries.Queries, source string, items []item) (map[string]bool, error) {
	if len(items) == 0 {
		return nil, nil
	}
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	have, err := q.ReconcileStoredKeys(ctx, queries.ReconcileStoredKeysParams{Provider: source, ExternalIds: ids})
	if err != nil {
		return nil, fmt.Errorf("look up %d listed events in the log: %w", len(ids), err)
	}
	set := make(map[string]bool, len(have))
	for _, id := range have {
		set[id] = true
	}
	return set, nil
}

type storeOutcome int

const (
	storedNow       storeOutcome = iota
	storedMeanwhile              // arrived (by webhook) between the look and the insert
	notStorable                  // listed without a payload
	gone                         // listed, but gone from the provider when fetched
)

func storeMissing(ctx context.Context, cfg ReconcileConfig, c *client, runID int64, it item) (storeOutcome, error) {
	if it.load != nil {
		loaded, err := it.load(ctx, c)
		var g *goneError
		if errors.As(err, &g) {
			logGone(ctx, cfg.Logger, "reconcile", cfg.Source, g)
			return gone, nil
		}
		if err != nil {
			return 0, err
		}
		loaded.At = it.At
		it = loaded
	}
	if it.Skip {
		return notStorable, nil
	}
	headers := make(map[string][]string, len(it.Headers)+1)
	for k, v := range it.Headers {
		headers[k] = v
	}
	headers[ReconcileHeader] = []string{strconv.FormatInt(runID, 10)}
	stored, err := cfg.Store.Insert(ctx, &ingress.Event{
		Provider:   cfg.Source,
		Scheme:     cfg.Scheme,
		ExternalID: it.ID,
		EventType:  eventType(cfg.EventType, it),
		Headers:    headers,
		RawBody:    it.Body,
		Verified:   false,
		OccurredAt: occurredAt(cfg.OccurredAt, it),
		StoreJSON:  cfg.StoreJSON && ingress.JSONCopyable(it.Body, cfg.StoreJSONMaxBytes),
	})
	if err != nil {
		return 0, err
	}
	if !stored {
		return storedMeanwhile, nil
	}
	return storedNow, nil
}

func finishRun(ctx context.Context, q *queries.Queries, rep Report, runErr error) error {
	types := rep.Types
	if types == nil {
		types = []TypeCounts{}
	}
	byType, err := json.Marshal(types)
	if err != nil {
		return err
	}
	var msg *string
	if runErr != nil {
		s := runErr.Error()
		msg = &s
	}
	return q.FinishReconcileRun(ctx, queries.FinishReconcileRunParams{ID: rep.RunID, Listed: rep.Total.Listed,
		AlreadyStored: rep.Total.AlreadyStored, Missing: rep.Total.Missing, Stored: rep.Total.Stored,
		Duplicates: rep.Total.Duplicates, ByType: byType, Error: msg})
}

// apiName is the Inlet-Backfill provenance of l's events.
func apiName(l Lister) string {
	switch l.(type) {
	case *Stripe:
		return stripeProvenance
	case *GitHub:
		return githubProvenance
	}
	return "unknown"
}
