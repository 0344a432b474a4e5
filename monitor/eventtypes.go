package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/logvalue"
	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/schema/queries"
)

// DefaultMaxTypesPerSource is how many distinct event types a source keeps
// in event_types, the metric and the alerts unless configured otherwise.
const DefaultMaxTypesPerSource = 100

// OtherType is the event type that counts a source's types past the cap.
const OtherType = "_other"

// EventTypesConfig configures the event-type watcher.
type EventTypesConfig struct {
	// DB folds and reads event_types, and claims each report in a
	// transaction of its own (see Check), as webhook_streamer: a pool.
	// Required.
	DB TxQuerier
	// MaxTypesPerSource caps the distinct types a source keeps (the rest
	// count as _other): GitHub's and Shopify's type headers are not signed,
	// so a replayed request with random types must not grow the table, the
	// metric or the alerts. Defaults to DefaultMaxTypesPerSource.
	MaxTypesPerSource int
	// AlertURL, when set, receives a JSON POST per new type (alert_id,
	// source, status "new_event_type", event_type, routed, first_seen,
	// reason), the same sink as the silent-source alerts, and per type that
	// stops being routed (status "event_type_unrouted"). Routed is "yes" or "no" by
	// whether an enabled subscription's patterns match the type (a filtered
	// subscription routes only the events that pass it); for _other,
	// "partly" when some of its events created a job, "unknown" otherwise.
	// Answers are judged as for the silence alerts (see postAlert).
	// alert_id is the same on every POST of one report and differs between
	// reports (see typeAlertID): a sink may drop a POST whose alert_id it
	// took.
	AlertURL string
	// HTTPClient posts the alerts. Defaults to a client with a 10s timeout
	// that follows no redirect (see alertClient).
	HTTPClient *http.Client
	// Logger receives one line per new type. Defaults to slog.Default().
	Logger *slog.Logger
	// Metrics registers inlet_events_unrouted_total,
	// inlet_events_types_seen_total and
	// inlet_alerts_refused_total{kind="event_type"}. Nil: not exported.
	Metrics prometheus.Registerer
	// Leader, when set, lets only the replica it elects log and alert new
	// types (every replica folds and exports the metric). Nil: this replica
	// always reports. Either way each report is claimed in PostgreSQL first
	// (see Check), so a leader deposed while its POST is in flight and the
	// one after it do not both send it.
	Leader interface {
		Leading(context.Context) (bool, error)
	}
}

// EventTypes watches the (source, event type) pairs stored: Check folds the
// arrivals into event_types, refreshes the metric and reports each type not
// seen before (log line and alert, once: event_types.alerted_at records it,
// so an alert that failed is retried on the next Check and one that went
// out is not repeated after a restart; one the sink refused for good, a 4xx
// refusing its payload (postAlert), is logged at ERROR, counted and
// recorded as alerted, not retried).
type EventTypes struct {
	cfg EventTypesConfig

	mu     sync.Mutex
	rows   []EventTypeRow
	logged map[[2]string]bool // new types logged by this process, alert pending

	unrouted, seen *prometheus.Desc
	refused        prometheus.Counter
}

// EventTypeRow is one row of event_types as the watcher read it.
type EventTypeRow struct {
	Source, Type   string
	FirstSeen      time.Time
	Events         int64
	UnroutedEvents int64
	// Routed: the latest event created a job (nil: seen only before the
	// upgrade that added event_types).
	Routed *bool
	// New: not yet logged and alerted.
	New bool
	// Subscribed: an enabled subscription's patterns match the type
	// (filters aside).
	Subscribed bool
	// Changed: logged and alerted before, and Subscribed has moved since
	// (a type that stopped being routed is alerted; one routed again is
	// logged).
	Changed bool
}

// NewEventTypes checks cfg and returns the watcher.
func NewEventTypes(cfg EventTypesConfig) (*EventTypes, error) {
	if cfg.DB == nil {
		return nil, errors.New("monitor: EventTypesConfig.DB is required")
	}
	if cfg.MaxTypesPerSource == 0 {
		cfg.MaxTypesPerSource = DefaultMaxTypesPerSource
	}
	if cfg.MaxTypesPerSource < 1 {
		return nil, fmt.Errorf("monitor: max types per source %d must be at least 1", cfg.MaxTypesPerSource)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = alertClient()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &EventTypes{cfg: cfg, logged: map[[2]string]bool{},
		unrouted: prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "events", "unrouted_total"),
			"Events that created no job (no enabled subscription matched, or its filter rejected them), by source and event type; a source's types past "+
				"silence.max_types_per_source count as type _other. From event_types: every replica reports the same total.",
			[]string{"source", "type"}, nil),
		seen: prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "events", "types_seen_total"),
			"Events stored by source and event type since event_types was added (types past the cap as _other).",
			[]string{"source", "type"}, nil),
		refused: newRefusedCounter("event_type"),
	}
	reg := metrics.OrDiscard(cfg.Metrics)
	for _, c := range []prometheus.Collector{w, w.refused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("monitor: event type metrics: %w", err)
		}
	}
	return w, nil
}

// Describe implements prometheus.Collector.
func (w *EventTypes) Describe(ch chan<- *prometheus.Desc) { ch <- w.unrouted; ch <- w.seen }

// Collect implements prometheus.Collector: the rows of the last Check, so a
// scrape never queries the database.
func (w *EventTypes) Collect(ch chan<- prometheus.Metric) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Rows that share a label (a real type named "_none" and the empty
	// type, both from an unsigned header a sender chooses) are one series:
	// two with one label set would fail the whole scrape.
	type key struct{ source, typ string }
	type counts struct{ unrouted, seen float64 }
	series := map[key]counts{}
	var order []key
	for _, r := range w.rows {
		k := key{r.Source, metricType(r.Type)}
		c, ok := series[k]
		if !ok {
			order = append(order, k)
		}
		series[k] = counts{c.unrouted + float64(r.UnroutedEvents), c.seen + float64(r.Events)}
	}
	for _, k := range order {
		c := series[k]
		ch <- prometheus.MustNewConstMetric(w.unrouted, prometheus.CounterValue, c.unrouted, k.source, k.typ)
		ch <- prometheus.MustNewConstMetric(w.seen, prometheus.CounterValue, c.seen, k.source, k.typ)
	}
}

// metricType is the label of an event type: "" (a provider that sends
// none) would read as a missing label.
func metricType(t string) string {
	if t == "" {
		return "_none"
	}
	return t
}

// Last is what the latest Check read.
func (w *EventTypes) Last() []EventTypeRow {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]EventTypeRow(nil), w.rows...)
}

// Run checks every interval until ctx is done; failures are logged.
func (w *EventTypes) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := w.Check(ctx); err != nil && ctx.Err() == nil {
			w.cfg.Logger.Warn("event type check failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Check folds, reads event_types, and reports new types. Each report is
// claimed first (claimReport): the type's event_types row is locked in a
// transaction across the POST and the record, so a replica that leads
// meanwhile skips that type while the POST is in flight, and finds it
// reported once the claim commits (review helper-323).
func (w *EventTypes) Check(ctx context.Context) error {
	db := queries.New(w.cfg.DB)
	maxTypes := int32(min(w.cfg.MaxTypesPerSource, math.MaxInt32)) //nolint:gosec // G115: clamped to int32 just before
	if _, err := db.FoldEventTypes(ctx, maxTypes); err != nil {
		return fmt.Errorf("fold event types: %w", err)
	}
	rows, err := db.MonitorEventTypes(ctx)
	if err != nil {
		return fmt.Errorf("read event types: %w", err)
	}
	out := make([]EventTypeRow, len(rows))
	for i, r := range rows {
		out[i] = EventTypeRow{Source: r.Provider, Type: r.EventType, FirstSeen: r.FirstSeen, Events: r.Events,
			UnroutedEvents: r.UnroutedEvents, Routed: r.Routed, New: r.IsNew, Subscribed: r.Subscribed, Changed: r.IsChanged}
	}
	w.mu.Lock()
	w.rows = out
	w.mu.Unlock()

	var fresh []EventTypeRow
	for _, r := range out {
		if r.New || r.Changed {
			fresh = append(fresh, r)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	if w.cfg.Leader != nil {
		leading, err := w.cfg.Leader.Leading(ctx)
		if err != nil && ctx.Err() != nil {
			return ctx.Err() // stopping: nothing to report, nothing failed
		}
		if err != nil {
			w.cfg.Logger.Warn("event type reporter election failed; reporting from this replica", slog.String("error", err.Error()))
		} else if !leading {
			return nil
		}
	}
	post := true
	for _, r := range fresh {
		// Once the sink is down (not reached, no answer in time, 5xx, 408,
		// 429), the rest are logged but not posted: they wait for the next
		// check, so one check never takes longer than one alert's timeout
		// (one after another, a hanging sink held the fold and the metric
		// for minutes: review helper-83). A refusal of one alert's payload
		// does not stop the others: one type's alert refused for good held
		// back every later type's, at every check (review helper-176).
		if w.claimReport(ctx, r, post) {
			post = false
		}
	}
	return nil
}

// claimReport reports r (report) and records it, under a claim on its
// event_types row: in a transaction on the pool (not the election's
// connection) the row is locked (SKIP LOCKED) and read again; only if it
// is still new or changed is it logged, POSTed and recorded on the locked
// row before the commit. A row locked by another replica's claim is
// skipped this check: its POST is in flight, and if that replica dies its
// transaction rolls back and the type is reported at the next check. An
// alert is never lost, and never sent by two leaders; one whose answer was
// lost (or whose record failed) is sent again, with the same alert_id.
// It reports whether the sink is down (see report). Failures are logged:
// the type is reported at the next check.
func (w *EventTypes) claimReport(ctx context.Context, r EventTypeRow, post bool) (down bool) {
	attrs := typeAttrs(r.Source, r.Type)
	tx, err := beginClaim(ctx, w.cfg.DB, w.cfg.HTTPClient)
	if err != nil {
		w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "event type report not claimed", append(attrs, slog.String("error", err.Error()))...)
		return false
	}
	defer rollbackClaim(ctx, tx)
	q := queries.New(tx)
	c, err := q.MonitorClaimEventType(ctx, queries.MonitorClaimEventTypeParams{Provider: r.Source, EventType: r.Type})
	if errors.Is(err, pgx.ErrNoRows) {
		w.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "event type being reported by another replica; left to it", attrs...)
		return false
	}
	if err != nil {
		w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "event type report not claimed", append(attrs, slog.String("error", err.Error()))...)
		return false
	}
	r = EventTypeRow{Source: c.Provider, Type: c.EventType, FirstSeen: c.FirstSeen, Events: c.Events,
		UnroutedEvents: c.UnroutedEvents, Routed: c.Routed, New: c.IsNew, Subscribed: c.Subscribed, Changed: c.IsChanged}
	if !r.New && !r.Changed {
		return false // another replica reported it since this check read the rows
	}
	record, down, msg := w.report(ctx, r, post, typeAlertID(r, c.ReportedAt))
	if !record {
		return down // rolled back: reported at the next check
	}
	if err := q.MonitorEventTypeAlerted(ctx, queries.MonitorEventTypeAlertedParams{
		Provider: r.Source, EventType: r.Type, Routed: &r.Subscribed}); err != nil {
		w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, msg+": could not record the alert", append(attrs, slog.String("error", err.Error()))...)
		return down
	}
	if err := tx.Commit(ctx); err != nil {
		w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, msg+": could not record the alert", append(attrs, slog.String("error", err.Error()))...)
		return down
	}
	w.mu.Lock()
	delete(w.logged, [2]string{r.Source, r.Type})
	w.mu.Unlock()
	return down
}

// typeAlertID is the alert_id of r's report: the source, the type and the
// status. A type is new once (its row's alerted_at is set once, and the
// row is never deleted); it may stop being routed more than once, so an
// unrouted report is named by the report it follows too (after: the row's
// reported_at, which every recorded report stamps, new, unrouted or routed
// again; alerted_at for a row not reported since 081). That moves only when
// a report is recorded, so every POST of one report (sent again after an
// answer that was lost) carries one id, from whichever replica, and the
// next unrouting another, also when no event of the type arrived in
// between: named by the newest routed event (last_routed_at), a type
// unrouted, routed again and unrouted again by its subscription alone got
// one id twice, and a sink that drops an id it took dropped the second
// (review helper-334); the part "after" keeps these ids apart from those
// that version sent. first_seen is left out: a fold may still move it
// earlier (an event stored before it, committed after) between two POSTs
// of one report.
func typeAlertID(r EventTypeRow, after *time.Time) string {
	status := typeStatus(r)
	if status != "event_type_unrouted" {
		return alertID("event_type", r.Source, r.Type, status)
	}
	prev := "none" // not reached: an unrouted report follows a recorded one
	if after != nil {
		prev = after.UTC().Format(time.RFC3339Nano)
	}
	return alertID("event_type", r.Source, r.Type, status, "after", prev)
}

// typeStatus is the status of r's report: new_event_type for a new type
// (and for _other), event_type_unrouted for one reported before whose
// routing moved (its routed-again report is logged only).
func typeStatus(r EventTypeRow) string {
	if r.Type == OtherType || r.New {
		return "new_event_type"
	}
	return "event_type_unrouted"
}

// report logs a new type once and, when post, alerts it (named id).
// record: the report is to be recorded (the alert was taken, or refused for
// good: see postAlert; or none was due). down: the sink is down (see
// errSinkUnavailable), so that the check posts no more. msg is the log
// line's message.
//
// Routed is judged as 049's change reports judge it: by whether an enabled
// subscription's patterns match the type (r.Subscribed), the state recorded
// with the alert (alerted_routed). A new type judged by its latest event
// instead was alerted routed while no subscription matched it any more (and
// never alerted again), or unrouted while a filtered subscription routed
// its other events (review helper-153).
func (w *EventTypes) report(ctx context.Context, r EventTypeRow, post bool, id string) (record, down bool, msg string) {
	key := [2]string{r.Source, r.Type}
	msg, status, alert := "new event type", typeStatus(r), true
	var routed, reason string
	switch {
	case r.Type == OtherType:
		// Many types, each matched or not: only the events tell.
		routed = "unknown"
		if r.UnroutedEvents < r.Events {
			routed = "partly"
		}
		reason = fmt.Sprintf("source %s sent more than %d distinct event types; the rest are counted as %s", r.Source, w.cfg.MaxTypesPerSource, OtherType)
	case r.New:
		routed, reason = newTypeRouting(r)
	default:
		// Reported before, and its routing moved (049): it stopped being
		// routed (alerted), or is routed again (logged only).
		msg, alert = "event type no longer routed", !r.Subscribed
		routed, reason = "no", "no enabled subscription matches it any more: its events create no job "+
			"(inlet events types; a handler subscribed later catches up with inlet replay --handler H --unrouted)"
		if r.Subscribed {
			msg, routed, reason = "event type routed again", "yes", "a subscription matches it again"
		}
	}
	attrs := append(typeAttrs(r.Source, r.Type), slog.String("routed", routed), slog.Time("first_seen", r.FirstSeen))
	w.mu.Lock()
	first := !w.logged[key]
	w.logged[key] = true
	w.mu.Unlock()
	if first {
		level := slog.LevelInfo
		if routed != "yes" {
			level = slog.LevelWarn
		}
		w.cfg.Logger.LogAttrs(ctx, level, msg, append(attrs, slog.String("reason", reason))...)
	}
	if !post {
		return false, false, msg
	}
	if w.cfg.AlertURL != "" && alert {
		err := postAlert(ctx, w.cfg.HTTPClient, w.cfg.AlertURL, w.cfg.Logger, msg, map[string]any{
			"alert_id": id, "source": r.Source, "status": status, "event_type": r.Type, "routed": routed,
			"first_seen": r.FirstSeen, "reason": reason,
		}, attrs...)
		switch {
		case errors.Is(err, errAlertRejected):
			w.refused.Inc() // recorded: every retry would be refused alike
		case err != nil:
			return false, errors.Is(err, errSinkUnavailable), msg // not recorded: retried next Check
		}
	}
	return true, false, msg
}

// newTypeRouting is the routed field and reason of a new named type's
// report, by the subscriptions (r.Subscribed), with what its events so far
// did when that differs: a filter passes some events and not others, and
// a subscription may have been enabled or disabled since they arrived.
func newTypeRouting(r EventTypeRow) (routed, reason string) {
	jobless, withJob := r.UnroutedEvents, r.Events-r.UnroutedEvents
	if !r.Subscribed {
		reason = "no enabled subscription matches it: its events create no job " +
			"(inlet events types; a handler subscribed later catches up with inlet replay --handler H --unrouted)"
		if withJob > 0 {
			reason += fmt.Sprintf("; %d of its %d events so far did create a job: a subscription that matched them then no longer does", withJob, r.Events)
		}
		return "no", reason
	}
	reason = "an enabled subscription matches it: its events create jobs (under a subscription with a filter, those that pass it)"
	if jobless > 0 {
		reason += fmt.Sprintf("; %d of its %d events so far created no job: a filter rejected them, or they arrived before a subscription "+
			"matched the type (inlet events types; inlet replay --handler H --unrouted catches a handler up)", jobless, r.Events)
	}
	return "yes", reason
}

// typeAttrs are the log attributes of source's event type typ. The type
// comes from an unsigned header the sender chooses (up to 256 bytes stored):
// it is cut to logvalue.Bytes, its length beside it (event_type_bytes), as
// ingress logs it, so a sender cannot grow the log by what it sends. The
// alert's JSON keeps it whole. The source is a configured name.
func typeAttrs(source, typ string) []slog.Attr {
	attrs := []slog.Attr{slog.String("source", source)}
	clipped, cut := logvalue.Clip(typ, logvalue.Bytes)
	attrs = append(attrs, slog.String("event_type", clipped))
	if cut {
		attrs = append(attrs, slog.Int("event_type_bytes", len(typ)))
	}
	return attrs
}
