package backfill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Config configures one backfill run.
type Config struct {
	// Source is the configured source name the events are stored under
	// (events.provider). Required.
	Source string
	// Scheme is the source's verifier type (events.scheme). Required.
	Scheme string
	// Store is ingress's write path (ingress.NewPGStore). Required.
	Store ingress.Store
	// DB reads where the log inlet retention keeps starts (retention_log),
	// as the ingress role: the pool Store writes through. Required: an
	// event made before it is skipped, never stored again (see Run).
	DB queries.DBTX
	// Logger gets a line for each listed delivery gone before its fetch
	// (its id, never its bytes). Defaults to slog.Default().
	Logger *slog.Logger
	// OccurredAt reads each event's time, as ingress does for the source
	// (verify.NewOccurredAt). Defaults to nil: occurred_at NULL.
	OccurredAt verify.OccurredAt
	// EventType reads each event's type from its body, as ingress does for
	// a source with event_type_json (verify.NewEventTypeOf). Defaults to
	// nil: the provider's own type.
	EventType verify.EventTypeOf
	// StoreJSON stores a payload copy of each body that
	// ingress.JSONCopyable(body, StoreJSONMaxBytes) accepts, as ingress does
	// for the source (sources.Source.JSONCopy). Defaults to false.
	StoreJSON         bool
	StoreJSONMaxBytes int
	// StatePath is the JSON file holding the cursor of an unfinished run.
	// Required.
	StatePath string
	// Restart ignores (and replaces) the cursor in StatePath and starts from
	// the newest event.
	Restart bool
	// HTTPClient makes the API requests. Defaults to a client with a 60s
	// timeout.
	HTTPClient *http.Client
	// MaxRetries bounds the retries of one request (rate limits, 5xx,
	// network errors). Defaults to 8.
	MaxRetries int
	// Backoff is the first retry delay after a 5xx that names no wait or a
	// network error, and after a rate limit that names none (Stripe's
	// usually; GitHub's from at least a minute); it doubles with each retry,
	// jittered. Defaults to 1s.
	Backoff time.Duration
	// MaxBackoff caps the retry delay after a 5xx or network error (a rate
	// limit's is capped by MaxRateLimitWait). Defaults to 1m.
	MaxBackoff time.Duration
	// MaxRateLimitWait caps one wait asked for by a rate limit (Retry-After,
	// X-RateLimit-Reset) or by a 5xx's Retry-After, and the backoff after a
	// rate limit that names no wait. Defaults to 15m.
	MaxRateLimitWait time.Duration
	// Progress receives the progress line; nil prints none.
	Progress io.Writer
	// Terminal redraws one progress line in place (\r); otherwise a plain
	// line is written every ProgressInterval.
	Terminal bool
	// ProgressInterval is the period of plain progress lines. Defaults to 10s.
	ProgressInterval time.Duration
}

// WithDefaults returns a copy with every unset field at its default.
func (c Config) WithDefaults() Config {
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 60 * time.Second}
	}
	c.MaxRetries = cmp.Or(c.MaxRetries, 8)
	c.Backoff = cmp.Or(c.Backoff, time.Second)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, time.Minute)
	c.MaxRateLimitWait = cmp.Or(c.MaxRateLimitWait, 15*time.Minute)
	c.ProgressInterval = cmp.Or(c.ProgressInterval, 10*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Source == "":
		return errors.New("backfill config: Source is required")
	case c.Scheme == "":
		return errors.New("backfill config: Scheme is required")
	case c.Store == nil:
		return errors.New("backfill config: Store is required")
	case c.DB == nil:
		return errors.New("backfill config: DB is required")
	case c.StatePath == "":
		return errors.New("backfill config: StatePath is required")
	case c.MaxRetries < 0:
		return errors.New("backfill config: MaxRetries must not be negative")
	}
	return nil
}

// Lister reads one provider's history, a page at a time: NewStripe,
// NewGitHub.
type Lister interface {
	// key identifies the query (account, repository, filters) so a cursor
	// is never resumed against another one.
	key() string
	// scope is what narrows the listing within its source (the operator's
	// account label; Stripe's types, GitHub's repository or organization
	// and hook), "" for the whole source: a reconcile run records it, and
	// its coverage counts for that scope only (ReconcileCoveredUntil).
	scope() string
	// list returns the events of the page that starts at cursor ("" for
	// the newest) and the cursor of the next page ("" when this is the
	// last). Where reading an event's bytes costs a request of its own
	// (GitHub's deliveries) they are left out and the item has load set:
	// Run loads each just before storing it, so one payload is held at a
	// time; reconcile loads the missing events only.
	list(ctx context.Context, c *client, cursor string) (page, error)
	// auth sets the request's credentials.
	auth(r *http.Request)
}

// pinner is a Lister whose query holds a time resolved from the clock (a
// relative --since): the first run keeps it in the state file, and a run
// resumed from that file asks for the same.
type pinner interface {
	pinned() string
	pin(saved string) error
}

// page is one page of a provider's history.
type page struct {
	Events []item
	Next   string
}

// item is one event as the provider's API returned it.
type item struct {
	ID      string              // the provider's event id: the dedupe key
	Type    string              // events.event_type
	Headers map[string][]string // provenance; never credentials
	Body    []byte              // the event's bytes exactly as returned
	Skip    bool                // not storable (no payload); counted, not stored
	At      time.Time           // when the provider made it (Stripe) or sent it (GitHub); zero: unknown
	// load reads Headers and Body (and Skip) when list left them out.
	load func(ctx context.Context, c *client) (item, error)
}

// Stats counts what a run did.
type Stats struct {
	Pages      int // pages finished, including those of earlier interrupted runs
	Seen       int // events read in this run
	Stored     int // new events
	Duplicates int // already in the log (by webhook or an earlier backfill)
	// Skipped is the events listed but not stored: without a payload, gone
	// before their fetch (Gone), or made before KeptSince (Dropped).
	Skipped int
	// Dropped is the events of Skipped made before KeptSince: inlet
	// retention dropped their period and their dedupe keys, so each would
	// have been stored again and handled a second time.
	Dropped int
	// Gone is the events of Skipped the provider listed but no longer had
	// when their payload was fetched (a GitHub delivery answering 404 or
	// 410: aged out between the list and the fetch).
	Gone int
	// KeptSince is the end of the newest period inlet retention dropped, as
	// last read: the log keeps nothing received before it. Zero: none.
	KeptSince      time.Time
	RateLimitWaits int  // waits asked for by the provider
	Retries        int  // retries after a 5xx or network error
	Resumed        bool // started from a saved cursor
}

func (s Stats) String() string {
	var why []string
	if s.Dropped > 0 {
		why = append(why, fmt.Sprintf("%d made before %s, where the log inlet retention keeps starts", s.Dropped, s.KeptSince.UTC().Format(time.RFC3339)))
	}
	if s.Gone > 0 {
		why = append(why, fmt.Sprintf("%d gone from the provider before their fetch", s.Gone))
	}
	skipped := strconv.Itoa(s.Skipped) + " skipped"
	if len(why) > 0 {
		skipped += " (" + strings.Join(why, ", ") + ")"
	}
	return fmt.Sprintf("%d pages, %d events seen: %d stored, %d duplicates, %s, %d rate-limit waits, %d retries",
		s.Pages, s.Seen, s.Stored, s.Duplicates, skipped, s.RateLimitWaits, s.Retries)
}

// Run reads l's history from the saved cursor (or the newest event) to its
// end, storing each event through cfg.Store. After every page the cursor is
// saved, so a failed or cancelled run is resumed by the next; the state file
// is removed when the end is reached. The Stats are valid on error too.
//
// The end is also the end of what the log keeps: nothing made before the
// end of the newest period inlet retention dropped is stored (read when the
// run starts and again with each page, as Reconcile reads it). The log no
// longer holds those events nor their dedupe keys, so each would be stored
// again under a new id and handled a second time. Such events are counted
// in Stats.Skipped and Stats.Dropped, and since the lists are newest first
// the pages after one are not read. A listing wholly before that point (a
// Stripe Until before it) is ErrWindowDropped, with nothing listed.
//
// A listed GitHub delivery whose fetch answers 404 or 410 (gone from
// GitHub between the list and the fetch) is counted in Stats.Skipped and
// Stats.Gone and logged with its id; any other failed fetch stops the run.
func Run(ctx context.Context, cfg Config, l Lister) (Stats, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Stats{}, err
	}
	st := &state{Source: cfg.Source, Key: l.key()}
	pl, pins := l.(pinner)
	if pins {
		st.Pinned = pl.pinned()
	}
	if !cfg.Restart {
		saved, err := loadState(cfg.StatePath)
		if err != nil {
			return Stats{}, err
		}
		if saved != nil {
			if saved.Source != cfg.Source || saved.Key != st.Key {
				return Stats{}, fmt.Errorf("%w: %s holds a cursor for source %q, %s; this run is source %q, %s (run with --restart to start over)",
					ErrStateMismatch, cfg.StatePath, saved.Source, saved.Key, cfg.Source, st.Key)
			}
			if pins && saved.Pinned != "" {
				if err := pl.pin(saved.Pinned); err != nil {
					return Stats{}, fmt.Errorf("%w: %s: %v (run with --restart to start over)", ErrStateMismatch, cfg.StatePath, err)
				}
			}
			st = saved
		}
	}
	q := queries.New(cfg.DB)
	kept, err := keptSince(ctx, q)
	if err != nil {
		return Stats{}, fmt.Errorf("backfill %s: %w", cfg.Source, err)
	}
	if w, ok := l.(windowed); ok {
		if _, until := w.window(); !until.IsZero() && !kept.Before(until) {
			return Stats{KeptSince: kept}, fmt.Errorf("backfill %s: %w: the events asked for end %s, before %s, the end of the newest period it dropped; the log keeps no older event nor its dedupe key: nothing listed or stored",
				cfg.Source, ErrWindowDropped, until.UTC().Format(time.RFC3339), kept.UTC().Format(time.RFC3339))
		}
	}
	p := &progress{w: cfg.Progress, terminal: cfg.Terminal, interval: cfg.ProgressInterval, source: cfg.Source}
	p.stats.Pages, p.stats.Resumed, p.stats.KeptSince = st.Pages, st.Cursor != "", kept
	c := &client{http: cfg.HTTPClient, auth: l.auth, maxRetries: cfg.MaxRetries,
		backoff: cfg.Backoff, maxBackoff: cfg.MaxBackoff, maxWait: cfg.MaxRateLimitWait, onWait: p.wait}
	defer p.finish()
	seen := map[string]bool{st.Cursor: true}
	for {
		pg, err := l.list(ctx, c, st.Cursor)
		if err != nil {
			if st.Cursor != "" && cursorRefused(statusCode(err)) {
				return p.snapshot(), fmt.Errorf("backfill %s: page %d: %w: %w (the saved cursor in %s may have aged out of the provider's history, or belong to another key's account or mode: remove that file, or run with --restart, to start over from the newest event)",
					cfg.Source, st.Pages+1, ErrCursorRefused, err, cfg.StatePath)
			}
			return p.snapshot(), fmt.Errorf("backfill %s: page %d: %w", cfg.Source, st.Pages+1, err)
		}
		if err := checkCursor(seen, pg.Next); err != nil {
			return p.snapshot(), fmt.Errorf("backfill %s: page %d: %w", cfg.Source, st.Pages+1, err)
		}
		// A period retention dropped since the last look is out too: its
		// events' keys are going.
		if kept, err = keptSince(ctx, q); err != nil {
			return p.snapshot(), fmt.Errorf("backfill %s: page %d: %w", cfg.Source, st.Pages+1, err)
		}
		p.update(func(s *Stats) { s.KeptSince = kept })
		older := false
		// Each item's bytes are read just before it is stored: a page of
		// GitHub deliveries (100 payloads of up to 25 MB) is never held
		// whole, and a failed read keeps what was stored before it. The
		// page's cursor is saved only after the page, so a run stopped
		// inside it reads the whole page again (duplicates, nothing lost).
		for i := range pg.Events {
			it := pg.Events[i]
			pg.Events[i] = item{} // the list's copy is not needed again
			p.update(func(s *Stats) { s.Seen++ })
			if !it.At.IsZero() && it.At.Before(kept) {
				// Judged by the listed time, before a GitHub payload is
				// fetched. The lists are newest first: the pages after
				// this one are older still.
				older = true
				p.update(func(s *Stats) { s.Skipped++; s.Dropped++ })
				continue
			}
			if it.load != nil {
				loaded, err := it.load(ctx, c)
				var gone *goneError
				if errors.As(err, &gone) {
					logGone(ctx, cfg.Logger, "backfill", cfg.Source, gone)
					p.update(func(s *Stats) { s.Skipped++; s.Gone++ })
					continue
				}
				if err != nil {
					return p.snapshot(), fmt.Errorf("backfill %s: page %d: %w", cfg.Source, st.Pages+1, err)
				}
				if loaded.At.IsZero() {
					loaded.At = it.At
				}
				it = loaded
			}
			if it.Skip {
				p.update(func(s *Stats) { s.Skipped++ })
				continue
			}
			stored, err := cfg.Store.Insert(ctx, &ingress.Event{
				Provider:   cfg.Source,
				Scheme:     cfg.Scheme,
				ExternalID: it.ID,
				EventType:  eventType(cfg.EventType, it),
				Headers:    it.Headers,
				RawBody:    it.Body,
				Verified:   false,
				OccurredAt: occurredAt(cfg.OccurredAt, it),
				StoreJSON:  cfg.StoreJSON && ingress.JSONCopyable(it.Body, cfg.StoreJSONMaxBytes),
			})
			if err != nil {
				return p.snapshot(), fmt.Errorf("backfill %s: %w", cfg.Source, err)
			}
			p.update(func(s *Stats) {
				if stored {
					s.Stored++
				} else {
					s.Duplicates++
				}
			})
		}
		st.Pages++
		p.update(func(s *Stats) { s.Pages = st.Pages })
		if pg.Next == "" || older {
			return p.snapshot(), removeState(cfg.StatePath)
		}
		st.Cursor = pg.Next
		if err := st.save(cfg.StatePath); err != nil {
			return p.snapshot(), err
		}
	}
}

// windowed is a Lister limited to the events made in [since, until] (zero:
// unbounded): Stripe's.
type windowed interface {
	window() (since, until time.Time)
}

// logGone says which listed delivery was gone when its payload was fetched:
// GitHub's id of it and the status, never its bytes or a header value.
func logGone(ctx context.Context, log *slog.Logger, command, source string, g *goneError) {
	log.WarnContext(ctx, command+": a listed delivery was gone when its payload was fetched (aged out of the provider's history between the list and the fetch); skipped",
		slog.String("source", source), slog.Int64("delivery_id", g.delivery), slog.Int("status", statusCode(g.err)))
}

// progress keeps the Stats and shows them: one line redrawn in place on a
// terminal, a plain line every interval otherwise.
type progress struct {
	w        io.Writer
	terminal bool
	interval time.Duration
	source   string

	mu    sync.Mutex
	stats Stats
	last  time.Time
	drawn bool
}

func (p *progress) update(f func(*Stats)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.stats)
	p.show(false)
}

// wait counts a wait and says why, with its cause (a connection refused is
// not the provider's error), on a line of its own: on a terminal too, where
// the progress line is redrawn below it.
func (p *progress) wait(rateLimited bool, d time.Duration, cause error) {
	p.update(func(s *Stats) {
		if rateLimited {
			s.RateLimitWaits++
		} else {
			s.Retries++
		}
	})
	if p.w == nil {
		return
	}
	why := "request failed"
	if rateLimited {
		why = "rate limited"
	}
	if cause != nil {
		why += " (" + cause.Error() + ")"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
	fmt.Fprintf(p.w, "backfill %s: %s, waiting %s\n", p.source, why, d.Round(time.Second))
}

func (p *progress) snapshot() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// show draws the line; force ignores the interval. p.mu is held.
func (p *progress) show(force bool) {
	if p.w == nil {
		return
	}
	now := time.Now()
	if p.terminal {
		if !force && now.Sub(p.last) < 100*time.Millisecond {
			return // a redraw per event would cost more than the inserts
		}
		line := fmt.Sprintf("backfill %s: %d pages, %d seen, %d stored, %d duplicates, %d rate-limit waits",
			p.source, p.stats.Pages, p.stats.Seen, p.stats.Stored, p.stats.Duplicates, p.stats.RateLimitWaits)
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
		p.drawn = true
	} else {
		if p.last.IsZero() {
			p.last = now // the first line after one interval, not at once
			return
		}
		if !force && now.Sub(p.last) < p.interval {
			return
		}
		fmt.Fprintf(p.w, "backfill %s: %s\n", p.source, strings.TrimSpace(p.stats.String()))
	}
	p.last = now
}

// finish ends the in-place line so what follows starts on its own.
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal && p.w != nil {
		p.show(true)
		if p.drawn {
			fmt.Fprintln(p.w)
		}
	}
}

// eventType is it's type as ingress would store it: from its body where
// the source says so, else the provider's own.
func eventType(f verify.EventTypeOf, it item) string {
	if f != nil {
		if typ, ok := f(it.Body); ok {
			return typ
		}
	}
	return it.Type
}

func occurredAt(f verify.OccurredAt, it item) time.Time {
	if f == nil {
		return time.Time{}
	}
	return f(http.Header(it.Headers), it.Body)
}

// ErrCursorRefused marks a run stopped because the provider refused the
// page at a saved cursor (400, 404, 410, 422): the cursor aged out of the
// provider's history, or names an event of another account or mode.
// Running again would be refused the same way; remove the state file or
// run with Restart.
var ErrCursorRefused = errors.New("the provider refused the saved cursor")

// cursorRefused reports whether a final status answering a page at a
// cursor says the cursor is the fault (a bad or unknown id), not the
// credential (401, 403) or a limit (429).
func cursorRefused(code int) bool {
	switch code {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusGone, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// ErrCursorRepeated marks a provider API that answered a page with a next
// cursor it had given before (the same page again, or a cycle): following
// it would never end, so the run stops.
var ErrCursorRepeated = errors.New("the provider's API gave a page cursor it had given before; stopped rather than list the same pages forever")

// checkCursor records next in seen and fails when it was there already (""
// ends the list and is never checked).
func checkCursor(seen map[string]bool, next string) error {
	if next == "" {
		return nil
	}
	if seen[next] {
		return fmt.Errorf("%w (cursor %q)", ErrCursorRepeated, next)
	}
	seen[next] = true
	return nil
}
