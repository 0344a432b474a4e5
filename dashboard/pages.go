package dashboard

import (
	"encoding/hex"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/admin"
)

// Page sizes.
const (
	overviewDeadLetters = 50
	overviewEvents      = 20
	eventsPerPage       = 50
)

// overviewPage is the data of the overview template.
type overviewPage struct {
	Plot   template.HTML
	Rates  rates
	Colors []string
	// Activity: from the silence detector, or last events from the
	// database (ActivityFromDB: nothing flagged). SilenceErr when the
	// detector failed.
	Activity       []activityRow
	ActivityFromDB bool
	SilenceErr     string
	Handlers       []handlerStats
	DeadLetters    admin.DeadLetterPage
	Events         admin.EventPage
	// UnroutedTypes are the event types whose latest events created no job
	// (no enabled subscription matched, or a filter rejected it), shown first.
	UnroutedTypes []admin.EventType
	// Audit is shown first when the newest verification found tampering.
	Audit auditStatus
	// Reconcile is the last inlet reconcile run of each source and
	// listing scope, the scopes no longer run apart (loadReconcileRuns).
	Reconcile reconcileRuns
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := d.context(r)
	defer cancel()
	now := d.cfg.Now()
	var p overviewPage
	since, n := d.cfg.window(now)
	var seen []SourceActivity
	err := readTx(ctx, d.cfg.DB, func(tx pgx.Tx) error {
		var err error
		if p.Rates, err = loadRates(ctx, tx, d.cfg.Sources, since, d.cfg.Bucket, n); err != nil {
			return err
		}
		if p.Handlers, err = loadHandlers(ctx, tx, now); err != nil {
			return err
		}
		if p.Audit, err = loadAuditStatus(ctx, tx); err != nil {
			return err
		}
		if p.Reconcile, err = loadReconcileRuns(ctx, tx); err != nil {
			return err
		}
		if d.cfg.Silence == nil {
			seen, err = lastSeen(ctx, tx, sourceNames(d.cfg.Sources, p.Rates))
		}
		return err
	})
	if err == nil {
		p.DeadLetters, err = admin.ListDeadLetters(ctx, d.cfg.DB, admin.DeadLetterFilter{Limit: overviewDeadLetters})
	}
	if err == nil {
		p.Events, err = admin.ListEvents(ctx, d.cfg.DB, admin.EventFilter{Limit: overviewEvents})
	}
	if err == nil {
		var types []admin.EventType
		types, err = admin.EventTypes(ctx, d.cfg.DB, d.cfg.MaxTypesPerSource)
		for _, t := range types {
			if t.Unrouted() {
				p.UnroutedTypes = append(p.UnroutedTypes, t)
			}
		}
	}
	if err != nil {
		d.failErr(w, r, s, err)
		return
	}
	if d.cfg.Silence != nil {
		var silenceErr error
		if seen, silenceErr = d.cfg.Silence.SourceActivity(ctx); silenceErr != nil {
			d.cfg.Logger.Warn("dashboard: silence detector", slog.String("error", silenceErr.Error()))
			p.SilenceErr = silenceErr.Error()
		}
	} else {
		p.ActivityFromDB = true
	}
	for _, a := range seen {
		row := activityRow{SourceActivity: a}
		if !a.LastSeen.IsZero() {
			row.Age = max(now.Sub(a.LastSeen), 0)
		}
		p.Activity = append(p.Activity, row)
	}
	p.Plot = renderPlot(p.Rates)
	p.Colors = make([]string, len(p.Rates.Series))
	for i := range p.Colors {
		p.Colors[i] = seriesColor(i)
	}
	d.render(w, r, s, http.StatusOK, "overview", "Overview", p)
}

// eventsPage is the data of the events template.
type eventsPage struct {
	Source  string
	Sources []string
	Page    admin.EventPage
}

func (d *Dashboard) events(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	ctx, cancel := d.context(r)
	defer cancel()
	p := eventsPage{Source: q.Get("source"), Sources: d.cfg.Sources}
	// before is the previous page's cursor (EventPage.Next: every page shows
	// the log as of the first's snapshot), or a bare id.
	var err error
	p.Page, err = admin.ListEvents(ctx, d.cfg.DB, admin.EventFilter{Provider: p.Source, Cursor: q.Get("before"), Limit: eventsPerPage})
	if err != nil {
		d.failErr(w, r, s, err)
		return
	}
	d.render(w, r, s, http.StatusOK, "events", "Events", p)
}

// maxShownBody bounds the bytes of a body the event page shows; the API's
// /api/events/{id}/raw has them all.
const maxShownBody = 256 << 10

// maxHexBody bounds the bytes of a binary body shown as a hex dump.
const maxHexBody = 16 << 10

// body is how the event page shows a body.
type body struct {
	Size int
	// Text is the body when it is UTF-8 (up to maxShownBody bytes).
	Text   string
	IsText bool
	// Hex is a hex dump of the first maxHexBody bytes otherwise.
	Hex string
	// Shown is how many bytes Text or Hex holds.
	Shown     int
	Truncated bool
}

func showBody(b []byte) body {
	v := body{Size: len(b)}
	text := b
	if len(text) > maxShownBody {
		text = text[:maxShownBody]
		// Do not count a rune cut in half as binary.
		for i := 0; i < utf8.UTFMax && len(text) > 0 && !utf8.Valid(text); i++ {
			text = text[:len(text)-1]
		}
	}
	if utf8.Valid(text) {
		v.IsText, v.Text, v.Shown = true, string(text), len(text)
	} else {
		dump := b[:min(len(b), maxHexBody)]
		v.Hex, v.Shown = hex.Dump(dump), len(dump)
	}
	v.Truncated = v.Shown < v.Size
	return v
}

// header is one header of the event page.
type header struct {
	Name   string
	Values []string
}

// eventPage is the data of the event template.
type eventPage struct {
	Event   admin.EventDetail
	Headers []header
	Body    body
	// Audit is what the newest recorded verification says of the event.
	Audit eventAudit
}

func (d *Dashboard) event(w http.ResponseWriter, r *http.Request, s *session) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		d.fail(w, r, s, http.StatusNotFound, fmt.Sprintf("No event %q: an event id is a positive integer.", r.PathValue("id")))
		return
	}
	ctx, cancel := d.context(r)
	defer cancel()
	e, err := admin.GetEvent(ctx, d.cfg.DB, id)
	if err != nil {
		d.failErr(w, r, s, err)
		return
	}
	p := eventPage{Event: e, Body: showBody(e.RawBody)}
	if p.Audit, err = loadEventAudit(ctx, d.cfg.DB, id); err != nil {
		d.failErr(w, r, s, err)
		return
	}
	for name, values := range e.Headers {
		p.Headers = append(p.Headers, header{Name: name, Values: values})
	}
	slices.SortFunc(p.Headers, func(a, b header) int { return compareFold(a.Name, b.Name) })
	d.render(w, r, s, http.StatusOK, "event", fmt.Sprintf("Event %d", e.ID), p)
}

// replay re-queues the form's job_id, only while it still has the form's
// expect_status and had been replayed expect_replays times
// (admin.ReplayRequest.ExpectStatus and ExpectReplays, checked under the
// job's row lock): the job as the page showed it, not a run of it someone
// else started since. A form without them (posted by a script, or rendered
// before the fields existed) replays the job whatever its status and
// replays.
func (d *Dashboard) replay(w http.ResponseWriter, r *http.Request, s *session) {
	id, err := strconv.ParseInt(r.PostFormValue("job_id"), 10, 64)
	if err != nil || id <= 0 {
		d.fail(w, r, s, http.StatusBadRequest, "job_id: a job id is a positive integer.")
		return
	}
	req := admin.ReplayRequest{JobID: id, ExpectStatus: r.PostFormValue("expect_status")}
	if v := r.PostFormValue("expect_replays"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			d.fail(w, r, s, http.StatusBadRequest, "expect_replays: a replay count is a non-negative integer.")
			return
		}
		req.ExpectReplays = &n
	}
	back := localPath(r.PostFormValue("return"))
	ctx, cancel := d.context(r)
	defer cancel()
	res, err := admin.Replay(ctx, d.cfg.DB, req)
	switch code := statusOf(err); {
	case err == nil:
		d.cfg.Logger.Info("dashboard replay", slog.Int64("job_id", id), slog.Int("requeued", res.Requeued))
		d.sessions.setFlash(s, flash{OK: true, Message: fmt.Sprintf("Job %d re-queued.", id)})
	case code == http.StatusNotFound || code == http.StatusConflict || code == http.StatusBadRequest:
		d.sessions.setFlash(s, flash{Message: fmt.Sprintf("Not replayed: %v.", err)})
	default:
		d.failErr(w, r, s, err)
		return
	}
	http.Redirect(w, r, back, http.StatusSeeOther) //nolint:gosec // G710: back went through localPath: a path under the dashboard, never another host
}

// age is now - t for display, never negative.
func age(now, t time.Time) time.Duration { return max(now.Sub(t), 0) }
