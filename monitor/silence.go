package monitor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/schema/queries"
)

// SilenceConfig configures the silent-source detector.
type SilenceConfig struct {
	// DB reads event arrival times (provider, received_at) and claims each
	// change's report in a transaction of its own (see Check), as
	// webhook_streamer: a pool. Required.
	DB TxQuerier
	// Factor: a source is silent once the time since its last event exceeds
	// Factor × the median gap between its recent events. Defaults to 2.
	Factor float64
	// History is how many recent events the median is taken over. Defaults
	// to 50.
	History int
	// MinEvents is the fewest recent events a median needs; a source with
	// fewer is judged by MaxSilence alone. Defaults to 10.
	MinEvents int
	// MinSilence is the shortest silence ever reported (a bursty source's
	// median gap can be milliseconds). Defaults to 1m.
	MinSilence time.Duration
	// MaxSilence is a fixed per-source limit; a source is silent past it
	// whatever its history. Sources named here are watched even before their
	// first event.
	MaxSilence map[string]time.Duration
	// Sources, when not nil, are the sources watched (the configuration's,
	// and those of MaxSilence): a source removed from the configuration is
	// no longer judged, though its events stay in the database, and one
	// last reported silent is reported "removed" once. Nil: every source
	// with an event is judged.
	Sources []string
	// AlertURL, when set, receives a JSON POST on each change (silent,
	// resumed, removed): alert_id, source, status, last_seen,
	// threshold_seconds, reason. alert_id is the same on every POST of one
	// change (one sent again after its answer was lost) and differs between
	// changes (see silenceAlertID): a sink may drop a POST whose alert_id it
	// took. See postAlert for what each answer does.
	AlertURL string
	// HTTPClient posts the alerts. Defaults to a client with a 10s timeout
	// that follows no redirect (see alertClient).
	HTTPClient *http.Client
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger receives one line per change. Defaults to slog.Default().
	Logger *slog.Logger
	// Metrics registers inlet_source_* gauges and
	// inlet_alerts_refused_total{kind="silence"}. Nil: not exported.
	Metrics prometheus.Registerer
	// Leader, when set, lets only the replica it elects report changes (log
	// line and alert); the others still judge every source and export the
	// gauges. If the election fails the change is reported anyway: twice
	// beats never. Nil: this replica always reports. Either way each change
	// is claimed in PostgreSQL before it is reported (see Check), so a
	// leader deposed while its POST is in flight and the one after it do
	// not both send it.
	Leader interface {
		Leading(context.Context) (bool, error)
	}
}

// SourceStatus is the detector's judgement of one source.
type SourceStatus struct {
	Source string `json:"source"`
	// LastSeen is the newest event's received_at; zero when none. For a
	// source held silent (see Evaluate), the last_seen reported.
	LastSeen time.Time `json:"last_seen"`
	// Median is the median gap between recent events (0 with too few).
	Median time.Duration `json:"median_gap"`
	// Threshold is the silence after which the source counts as silent; 0
	// when nothing can judge it yet.
	Threshold time.Duration `json:"threshold"`
	Silent    bool          `json:"silent"`
	// Reason says why it is silent.
	Reason string `json:"reason,omitempty"`

	removed bool // reported silent, and no longer watched
}

// SilenceDetector is the silent-source detector: Check judges every source now;
// Run checks at an interval. Changes are logged, counted and POSTed.
type SilenceDetector struct {
	cfg SilenceConfig

	mu   sync.Mutex
	last []SourceStatus

	lastSeen  *prometheus.GaugeVec
	silentG   *prometheus.GaugeVec
	threshold *prometheus.GaugeVec
	refused   prometheus.Counter
}

// NewSilenceDetector checks cfg and returns the detector.
func NewSilenceDetector(cfg SilenceConfig) (*SilenceDetector, error) {
	if cfg.DB == nil {
		return nil, errors.New("monitor: SilenceConfig.DB is required")
	}
	if cfg.Factor == 0 {
		cfg.Factor = 2
	}
	if cfg.Factor < 1 {
		return nil, fmt.Errorf("monitor: silence factor %g must be at least 1", cfg.Factor)
	}
	if cfg.History == 0 {
		cfg.History = 50
	}
	if cfg.MinEvents == 0 {
		cfg.MinEvents = 10
	}
	if cfg.MinEvents < 2 || cfg.History < cfg.MinEvents {
		return nil, fmt.Errorf("monitor: silence min_events %d must be at least 2 and at most history %d", cfg.MinEvents, cfg.History)
	}
	if cfg.MinSilence == 0 {
		cfg.MinSilence = time.Minute
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = alertClient()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: "source", Name: name, Help: help}, []string{"source"})
	}
	h := &SilenceDetector{cfg: cfg,
		lastSeen:  gauge("last_event_timestamp_seconds", "Unix time of the source's newest event."),
		silentG:   gauge("silent", "1 while the source is silent: no event for longer than its threshold."),
		threshold: gauge("silence_threshold_seconds", "The silence after which the source counts as silent (Factor × its median gap, or its max_silence); 0 when not yet judged."),
		refused:   newRefusedCounter("silence"),
	}
	reg := metrics.OrDiscard(cfg.Metrics)
	for _, c := range []prometheus.Collector{h.lastSeen, h.silentG, h.threshold, h.refused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("monitor: silence metrics: %w", err)
		}
	}
	return h, nil
}

// Run checks every interval until ctx is done; failures are logged.
func (h *SilenceDetector) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := h.Check(ctx); err != nil && ctx.Err() == nil {
			h.cfg.Logger.Warn("silence check failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Last is the result of the latest Check (nil before the first).
func (h *SilenceDetector) Last() []SourceStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.last)
}

// Evaluate judges every source at cfg.Now() and returns them in name order;
// it reports nothing (a page showing source activity calls it).
//
// A source last reported silent (source_alerts) stays silent while too few
// of its arrivals are left to judge it and none is newer than the last_seen
// reported: retention dropping its old events is no delivery, and only a
// delivery resumes a source (see hold).
func (h *SilenceDetector) Evaluate(ctx context.Context) ([]SourceStatus, error) {
	rows, err := queries.New(h.cfg.DB).MonitorReportedSilence(ctx)
	if err != nil {
		return nil, fmt.Errorf("silence: read what was reported: %w", err)
	}
	reported := make(map[string]queries.MonitorReportedSilenceRow, len(rows))
	for _, r := range rows {
		reported[r.Source] = r
	}
	names, err := h.sources(ctx, rows)
	if err != nil {
		return nil, err
	}
	now := h.cfg.Now()
	out := make([]SourceStatus, 0, len(names))
	for _, name := range names {
		arrivals, err := h.arrivals(ctx, name)
		if err != nil {
			return nil, err
		}
		out = append(out, h.hold(h.judge(name, arrivals, now), reported[name], now))
	}
	return out, nil
}

// hold is st, or, when nothing can judge st (fewer than MinEvents arrivals
// and no max_silence) and its row r says it was reported silent with a
// last_seen no arrival is newer than, the silence reported: a source
// silent for weeks loses its arrivals to retention, and was judged not
// silent then, so "resumed" (or "removed") was sent while the provider
// still sent nothing (review helper-168). A row without last_seen (no
// median then: judged by max_silence alone; or written before 065) is
// not held.
func (h *SilenceDetector) hold(st SourceStatus, r queries.MonitorReportedSilenceRow, now time.Time) SourceStatus {
	if st.Silent || st.Threshold != 0 || !r.Silent || r.LastSeen == nil || st.LastSeen.After(*r.LastSeen) {
		return st
	}
	held := SourceStatus{Source: st.Source, LastSeen: *r.LastSeen, Silent: true}
	if r.Threshold != nil {
		held.Threshold = *r.Threshold
	}
	held.Reason = fmt.Sprintf("no event for %s (reported silent then; fewer than min_events %d arrivals are left to judge it, "+
		"as after retention dropped the older ones: silent until a newer one arrives)", now.Sub(held.LastSeen).Round(time.Second), h.cfg.MinEvents)
	return held
}

// Check is Evaluate, then updates the gauges and, on the replica that
// reports (the leader, or every replica when the election fails), reports
// each source whose judgement differs from what was last reported
// (webhook_ingress.source_alerts: log line, alert POST). A report moves
// that row only once the alert was taken (or no alert URL is set), so an
// alert the sink did not take is sent again at the next check, by whichever
// replica leads then, and a restart neither repeats nor loses one. The
// exception is an alert the sink refuses for good (a 4xx that refuses its
// payload, see postAlert): it is logged at ERROR, counted and recorded as
// if taken, as every retry would get the same answer.
//
// Each report is claimed first (claimReport): its source_alerts row is
// locked in a transaction across the POST and the record, so a replica
// that leads meanwhile skips that change while the POST is in flight, and
// finds it reported once the claim commits. The lead alone did not fence
// it: checked once before posting, a leader whose election connection died
// during a slow POST and the one elected after it both sent the change
// (review helper-323).
func (h *SilenceDetector) Check(ctx context.Context) ([]SourceStatus, error) {
	out, err := h.Evaluate(ctx)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.last = out
	h.mu.Unlock()
	for _, st := range out {
		silent := 0.0
		if st.Silent {
			silent = 1
		}
		h.silentG.WithLabelValues(st.Source).Set(silent)
		h.threshold.WithLabelValues(st.Source).Set(st.Threshold.Seconds())
		if !st.LastSeen.IsZero() {
			h.lastSeen.WithLabelValues(st.Source).Set(float64(st.LastSeen.UnixMilli()) / 1000)
		}
	}
	if h.cfg.Leader != nil {
		// Every check, changes or not: a replica takes over as soon as the
		// leader is gone.
		leading, err := h.cfg.Leader.Leading(ctx)
		if err != nil && ctx.Err() != nil {
			return out, ctx.Err() // stopping: nothing to report, nothing failed
		}
		if err != nil {
			h.cfg.Logger.Warn("silence reporter election failed; reporting changes from this replica", slog.String("error", err.Error()))
		} else if !leading {
			return out, nil // the leader reports
		}
	}
	rows, err := queries.New(h.cfg.DB).MonitorReportedSilence(ctx)
	if err != nil {
		return out, fmt.Errorf("silence: read what was reported: %w", err)
	}
	// left are the rows of sources not judged in out (deleted as judged).
	left := make(map[string]queries.MonitorReportedSilenceRow, len(rows))
	for _, r := range rows {
		left[r.Source] = r
	}
	changed := make([]SourceStatus, 0, len(out))
	for _, st := range out {
		if r := left[st.Source]; st.Silent != r.Silent {
			changed = append(changed, st)
		} else if st.Silent && st.Median != 0 && (r.LastSeen == nil || st.LastSeen.After(*r.LastSeen)) {
			// Silent as reported, but it delivered since (its "resumed"
			// was refused or never sent, the leader away): a later hold
			// must wait for an arrival newer than the latest, not the
			// one reported first (review helper-174).
			if err := queries.New(h.cfg.DB).MonitorRefreshSilence(ctx, queries.MonitorRefreshSilenceParams{
				Source: st.Source, LastSeen: nonZero(st.LastSeen), Threshold: nonZero(st.Threshold)}); err != nil {
				return out, fmt.Errorf("silence: refresh the report of %s: %w", st.Source, err)
			}
		}
		delete(left, st.Source)
	}
	// Reported silent, and no longer watched: removed from the
	// configuration (an alert left open would never resolve).
	for _, r := range rows {
		if left[r.Source].Silent {
			changed = append(changed, SourceStatus{Source: r.Source, removed: true})
		}
	}
	post := true
	for _, st := range changed {
		// Once the sink is down (not reached, no answer in time, 5xx, 408,
		// 429), the rest are logged but not posted: unrecorded, they are
		// sent at the next check, so one check never takes longer than one
		// alert's timeout (one after another, a hanging sink held every
		// check for sources × the timeout: review helper-168, as helper-83
		// found in EventTypes). A refusal of one alert's payload does not
		// stop the others: a sink that refuses one source's alert for good
		// held back every later source's, at every check (review
		// helper-176).
		down, err := h.claimReport(ctx, st, post)
		if err != nil {
			return out, err
		}
		post = post && !down
	}
	return out, nil
}

// claimReport reports st's change (report) and records it, under a claim
// on its source_alerts row: the row is made to exist (on its own, see
// MonitorEnsureSilenceRow), then, in a transaction on the pool (not the
// election's connection), locked (SKIP LOCKED) and checked to still differ
// from st; only then is the change logged and POSTed, and recorded on the
// locked row before the commit. A row locked
// by another replica's claim is skipped this check: its POST is in flight,
// and if that replica dies its transaction rolls back and the change is
// reported at the next check. An alert is never lost, and never sent by
// two leaders; one whose answer was lost (or whose record failed) is sent
// again, with the same alert_id. down: as report's.
func (h *SilenceDetector) claimReport(ctx context.Context, st SourceStatus, post bool) (down bool, err error) {
	if err := queries.New(h.cfg.DB).MonitorEnsureSilenceRow(ctx, st.Source); err != nil {
		return false, fmt.Errorf("silence: add the report row of %s: %w", st.Source, err)
	}
	tx, err := beginClaim(ctx, h.cfg.DB, h.cfg.HTTPClient)
	if err != nil {
		return false, fmt.Errorf("silence: claim the report of %s: %w", st.Source, err)
	}
	defer rollbackClaim(ctx, tx)
	q := queries.New(tx)
	row, err := q.MonitorClaimSilence(ctx, st.Source)
	if errors.Is(err, pgx.ErrNoRows) {
		h.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "silence change being reported by another replica; left to it",
			slog.String("source", st.Source))
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("silence: claim the report of %s: %w", st.Source, err)
	}
	if row.Silent == st.Silent {
		return false, nil // another replica reported it since this check read the rows
	}
	record, down := h.report(ctx, st, post, silenceAlertID(st, row.ReportedAt))
	if !record {
		return down, nil // rolled back: sent again at the next check
	}
	// last_seen only for a judgement of the source's own pace (enough
	// arrivals for a median): a hold keeps such a report after retention,
	// not one that max_silence alone made, which must close when that
	// max_silence goes (review helper-174).
	var lastSeen *time.Time
	if st.Median != 0 {
		lastSeen = nonZero(st.LastSeen)
	}
	if err := q.MonitorRecordSilence(ctx, queries.MonitorRecordSilenceParams{
		Source: st.Source, Silent: st.Silent, LastSeen: lastSeen, Threshold: nonZero(st.Threshold)}); err != nil {
		return down, fmt.Errorf("silence: record the report of %s: %w", st.Source, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return down, fmt.Errorf("silence: commit the report of %s: %w", st.Source, err)
	}
	return down, nil
}

// silenceAlertID is the alert_id of st's change: the source, the status
// and the instant of the report the change follows (source_alerts'
// reported_at, the row's insert for a source never reported). That row
// moves only when a change is recorded, so every POST of one change (sent
// again after an answer that was lost) carries the same id, from whichever
// replica, and the next change another; last_seen alone would not do, as
// a "resumed" sent again has a newer last_seen, and a source whose
// max_silence is raised and lowered again goes silent twice with one.
func silenceAlertID(st SourceStatus, after time.Time) string {
	return alertID("silence", st.Source, silenceStatus(st), after.UTC().Format(time.RFC3339Nano))
}

// silenceStatus is the alert's status of st's change.
func silenceStatus(st SourceStatus) string {
	switch {
	case st.Silent:
		return "silent"
	case st.removed:
		return "removed"
	}
	return "resumed"
}

// nonZero is &v, or nil (NULL) for the zero value.
func nonZero[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// judge decides one source from its arrivals, newest first.
func (h *SilenceDetector) judge(name string, arrivals []time.Time, now time.Time) SourceStatus {
	st := SourceStatus{Source: name}
	if len(arrivals) > 0 {
		st.LastSeen = arrivals[0]
	}
	if len(arrivals) >= h.cfg.MinEvents {
		gaps := make([]time.Duration, 0, len(arrivals)-1)
		for i := 1; i < len(arrivals); i++ {
			gaps = append(gaps, arrivals[i-1].Sub(arrivals[i]))
		}
		sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
		n := len(gaps)
		st.Median = gaps[n/2]
		if n%2 == 0 {
			st.Median = (gaps[n/2-1] + gaps[n/2]) / 2
		}
		// Saturated: a product past int64 converts to a negative duration,
		// which would make every source silent after MinSilence.
		st.Threshold = max(time.Duration(min(h.cfg.Factor*float64(st.Median), math.MaxInt64/2)), h.cfg.MinSilence)
	}
	fixed, hasFixed := h.cfg.MaxSilence[name]
	if hasFixed && (st.Threshold == 0 || fixed < st.Threshold) {
		st.Threshold = fixed
	}
	if st.Threshold == 0 {
		return st
	}
	if st.LastSeen.IsZero() {
		if hasFixed {
			st.Silent, st.Reason = true, fmt.Sprintf("no event yet; max_silence %s", fixed)
		}
		return st
	}
	if since := now.Sub(st.LastSeen); since > st.Threshold {
		st.Silent = true
		switch {
		case hasFixed && st.Threshold == fixed:
			st.Reason = fmt.Sprintf("no event for %s (max_silence %s)", since.Round(time.Second), fixed)
		case st.Threshold == h.cfg.MinSilence && h.cfg.MinSilence > time.Duration(h.cfg.Factor*float64(st.Median)):
			st.Reason = fmt.Sprintf("no event for %s (min_silence %s; the median gap is %s)", since.Round(time.Second), h.cfg.MinSilence, st.Median.Round(time.Second))
		default:
			st.Reason = fmt.Sprintf("no event for %s (%g× the median gap %s)", since.Round(time.Second), h.cfg.Factor, st.Median.Round(time.Second))
		}
	}
	return st
}

// report logs st's change and, when post, POSTs its alert, named id.
// record: the change is to be recorded as reported (the alert was taken or
// refused for good, or there is no alert URL; false when not post). down:
// the sink cannot take alerts now (see postAlert), so the check posts no
// more.
func (h *SilenceDetector) report(ctx context.Context, st SourceStatus, post bool, id string) (record, down bool) {
	status := silenceStatus(st)
	if st.removed {
		st.Reason = "no longer a configured source: not watched"
	}
	attrs := []slog.Attr{slog.String("source", st.Source), slog.String("status", status),
		slog.Time("last_seen", st.LastSeen), slog.Duration("threshold", st.Threshold)}
	switch {
	case st.Silent:
		h.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "source silent", append(attrs, slog.String("reason", st.Reason))...)
	case st.removed:
		h.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "source removed from the configuration; no longer watched for silence", attrs[:2]...)
	default:
		h.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "source resumed", attrs...)
	}
	if h.cfg.AlertURL == "" {
		return true, false
	}
	if !post {
		return false, false
	}
	err := postAlert(ctx, h.cfg.HTTPClient, h.cfg.AlertURL, h.cfg.Logger, "silence", map[string]any{
		"alert_id": id, "source": st.Source, "status": status, "last_seen": st.LastSeen,
		"threshold_seconds": st.Threshold.Seconds(), "reason": st.Reason,
	}, slog.String("source", st.Source))
	switch {
	case err == nil:
		return true, false
	case errors.Is(err, errAlertRejected):
		h.refused.Inc()
		return true, false // never taken: the state moves on
	default:
		return false, errors.Is(err, errSinkUnavailable)
	}
}

// What postAlert's error says of the sink; the checks branch on it.
var (
	// errSinkUnavailable: the sink was not reached, did not answer in
	// time, or answered 5xx or a 4xx saying to send it again (408, 421,
	// 425, 429: sinkTransient), or a 4xx that refuses every alert (401,
	// 403, 404, 405, 407, 410, 415, 426: sinkConfigRefusal): it cannot take
	// alerts now. The
	// alert is sent again at the next check, and this check posts no more
	// (each would wait out the same fault).
	errSinkUnavailable = errors.New("alert sink unavailable")
	// errAlertRejected: the sink answered this alert with another 4xx
	// (400, 413, 422, ...): it refuses the payload (a chat webhook rejecting a
	// field, a schema validator) and would refuse it on every retry, as
	// Alertmanager's notifiers judge it. The alert is logged at ERROR,
	// counted (inlet_alerts_refused_total) and recorded as reported, not
	// sent again; the check's other alerts are still posted.
	errAlertRejected = errors.New("alert refused by the sink")
)

// postAlert POSTs payload as JSON to alertURL; a failure is logged (with
// the URL's host only) and returned. kind names the alert in the log line
// ("silence alert not sent"). The error wraps errSinkUnavailable (not
// reached, no answer, 5xx, a 4xx saying to send it again or refusing every alert: the
// caller stops posting for this check), errAlertRejected (another 4xx: this
// payload is refused for good),
// or neither (a 3xx: the alert URL is wrong, the sink never saw the alert;
// sent again at the next check, until the operator fixes the URL).
//
// The POST is bounded by alertTimeout(client), also when the client sets no
// timeout: it runs inside its claim's transaction (beginClaim).
func postAlert(ctx context.Context, client *http.Client, alertURL string, log *slog.Logger, kind string, payload map[string]any, attrs ...slog.Attr) error {
	if client.Timeout <= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, alertTimeout(client))
		defer cancel()
	}
	body, _ := json.Marshal(payload)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, alertURL, bytes.NewReader(body))
	if err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, kind+" alert not sent", append(attrs, slog.String("error", alertError(err)))...)
		return fmt.Errorf("%w: %s", errSinkUnavailable, alertError(err))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, kind+" alert not sent", append(attrs,
			slog.String("alert_host", req.URL.Host), slog.String("error", alertError(err)))...)
		return fmt.Errorf("%w: %s", errSinkUnavailable, alertError(err))
	}
	resp.Body.Close()
	switch code := resp.StatusCode; {
	case code/100 == 2:
		return nil
	case code/100 == 5 || sinkTransient(code) || sinkConfigRefusal(code):
		log.LogAttrs(ctx, slog.LevelWarn, kind+" alert refused", append(attrs, slog.Int("status", code))...)
		return fmt.Errorf("%w: HTTP %d", errSinkUnavailable, code)
	case code/100 == 4:
		log.LogAttrs(ctx, slog.LevelError, kind+" alert refused by the sink, not retried", append(attrs, slog.Int("status", code))...)
		return fmt.Errorf("%w: HTTP %d", errAlertRejected, code)
	default:
		log.LogAttrs(ctx, slog.LevelWarn, kind+" alert refused", append(attrs, slog.Int("status", code))...)
		return fmt.Errorf("alert refused: HTTP %d", code)
	}
}

// sinkTransient reports whether a 4xx says the same request may be sent
// again as it is: 408, 429, 421 (a proxy routed it to the wrong server, RFC
// 9110 §15.5.20) and 425 (too early, RFC 8470). Recorded as refused, an
// alert answered so once was lost for good (review helper-181).
func sinkTransient(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusMisdirectedRequest, http.StatusTooEarly:
		return true
	}
	return false
}

// sinkConfigRefusal reports whether a 4xx says the sink refuses every
// alert from this URL, not this alert's payload (a revoked token, a wrong
// path, plain HTTP to a sink that demands TLS, a sink that takes no JSON):
// dropped, each alert would be lost until the operator notices; held, they
// are all sent once the URL or token is fixed.
func sinkConfigRefusal(code int) bool {
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusMethodNotAllowed,
		http.StatusProxyAuthRequired, http.StatusGone, http.StatusUnsupportedMediaType, http.StatusUpgradeRequired:
		return true
	}
	return false
}

// newRefusedCounter is inlet_alerts_refused_total{kind}: the alerts the
// sink refused for good (errAlertRejected). The silence detector and the
// event-type watcher each register their kind in the process's registry.
func newRefusedCounter(kind string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: "alerts", Name: "refused_total",
		Help: "Alerts the alert sink refused for good (a 4xx refusing the payload: 400, 413, 422, ...), by kind (silence, event_type): " +
			"logged at ERROR and recorded as reported, never sent again.",
		ConstLabels: prometheus.Labels{"kind": kind},
	})
}

// alertClient is the default client of the alerts: a 10s timeout, and no
// redirect followed. Go's client follows a 301 or 302 with a GET without
// the body, and a 2xx to that GET was recorded as the alert taken: never
// delivered, never sent again (review helper-168). A 3xx is now a refusal
// logged with its status and retried (the other alerts still posted), and
// the operator fixes the URL.
func alertClient() *http.Client {
	return &http.Client{
		Timeout:       defaultAlertTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// defaultAlertTimeout bounds an alert's POST when its client sets no
// timeout; alertClient's is the same.
const defaultAlertTimeout = 10 * time.Second

// alertTimeout is how long an alert's POST may take with client: its
// Timeout, or defaultAlertTimeout when it sets none.
func alertTimeout(client *http.Client) time.Duration {
	if client.Timeout > 0 {
		return client.Timeout
	}
	return defaultAlertTimeout
}

// claimMargin is how much longer than its POST an alert's claim may last:
// the statements around the POST, and a process slowed down (a GC pause,
// a starved CPU). A claim ended by it rolls back, and the alert, posted
// but not recorded, is sent again at the next check.
const claimMargin = 10 * time.Second

// TxQuerier is what the silence detector and the event-type watcher read
// through and claim their reports in: a pool.
type TxQuerier interface {
	Querier
	Begin(ctx context.Context) (pgx.Tx, error)
}

// beginClaim begins the transaction that claims one report (a silence
// change, an event type), bounded so that the claim outlives the POST of
// client (alertTimeout) but not by much: a role's or database's
// idle_in_transaction_session_timeout (or transaction_timeout) shorter than
// the POST ended the claim before the alert was recorded, so it was sent
// again at every check; none left a leader cut off by the network holding
// the row, and the change unreported, until TCP gave up on it (hours).
func beginClaim(ctx context.Context, db TxQuerier, client *http.Client) (pgx.Tx, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	bound := (alertTimeout(client) + claimMargin).Milliseconds()
	if err := queries.New(tx).MonitorBoundAlertClaim(ctx, strconv.FormatInt(bound, 10)); err != nil {
		rollbackClaim(ctx, tx)
		return nil, fmt.Errorf("bound the claim to %d ms: %w", bound, err)
	}
	return tx, nil
}

// rollbackClaim ends a claim not committed (a no-op after Commit), also
// when ctx is done (stopping): the row would stay locked until the pool
// closes the connection.
func rollbackClaim(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// alertID is the alert_id of an alert, from what names its change: an
// opaque 32 hex digits (the first 128 bits of a SHA-256), short enough for
// any sink's deduplication key (an event type is up to 256 bytes the
// sender chose).
func alertID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		_, _ = fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// alertError is err without the alert URL: a chat webhook URL carries its
// secret in the path or query, and *url.Error repeats it whole.
func alertError(err error) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Op + " (alert URL withheld): " + alertError(uerr.Err)
	}
	return err.Error()
}

// sources are the names to judge. Without Sources, every source with an
// event, and every one reported silent with a last_seen: its events may
// all have been dropped by retention, which does not make it "removed"
// (that is for a source the configuration no longer names, or whose
// max_silence it no longer sets).
func (h *SilenceDetector) sources(ctx context.Context, reported []queries.MonitorReportedSilenceRow) ([]string, error) {
	seen := h.cfg.Sources
	if seen == nil {
		var err error
		if seen, err = queries.New(h.cfg.DB).MonitorSources(ctx); err != nil {
			return nil, fmt.Errorf("silence: list sources: %w", err)
		}
		for _, r := range reported {
			if r.Silent && r.LastSeen != nil {
				seen = append(seen, r.Source)
			}
		}
	}
	set := map[string]bool{}
	for name := range h.cfg.MaxSilence {
		set[name] = true
	}
	for _, p := range seen {
		set[p] = true
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

func (h *SilenceDetector) arrivals(ctx context.Context, source string) ([]time.Time, error) {
	out, err := queries.New(h.cfg.DB).MonitorArrivals(ctx, queries.MonitorArrivalsParams{Provider: source, MaxRows: int64(h.cfg.History)})
	if err != nil {
		return nil, fmt.Errorf("silence: arrivals of %s: %w", source, err)
	}
	return out, nil
}
