package reporter

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/internal/loop"
	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Config configures a [Reporter].
type Config struct {
	// Pool reads job_attempts and jobs (failed attempts are rows of the
	// first, successes are on the second); webhook_streamer's privileges
	// are enough. Required.
	Pool *pgxpool.Pool
	// URL is the control plane's base URL, without a query or fragment.
	// Required.
	URL string
	// Token is the bearer token of this data plane's tenant. Required.
	Token string
	// Key is the HMAC-SHA256 key of opaque job ids. Required unless
	// SendDatabaseIDs, at least 16 bytes.
	Key []byte
	// SendDatabaseIDs sends jobs.id instead of the opaque id.
	SendDatabaseIDs bool
	// IncludeProvider adds the source name and event type to each record.
	IncludeProvider bool
	// BatchSize is the most records per POST. Defaults to 500, at most
	// [MaxBatch].
	BatchSize int
	// Interval is the wait between looks once caught up. Defaults to 10s.
	Interval time.Duration
	// MinBackoff and MaxBackoff bound the wait before a retry after the
	// control plane failed to answer 2xx. Default to 500ms and 1m.
	MinBackoff, MaxBackoff time.Duration
	// GapTTL is how long an id the cursor passed without seeing it is looked
	// for again (its transaction may commit after later ids). Time the
	// reporter spends retrying a failed read or send (the database or the
	// control plane unavailable) does not count: it cannot look then; nor
	// do rounds that left the id unread for want of budget (they were
	// busy reporting others found late), nor time it spends not leading
	// (Leader: another replica's reporter sends, and knows nothing of this
	// one's gaps). Defaults to 10m.
	GapTTL time.Duration
	// HTTPClient sends the requests. Defaults to a client with a 30s timeout.
	HTTPClient *http.Client
	// Logger receives counts, cursors and status codes, never a record or
	// the token. Defaults to slog.Default().
	Logger *slog.Logger
	// Metrics registers inlet_reporter_*: records acknowledged, failures by
	// step, and when the last step succeeded (alert on its age). Nil
	// discards them.
	Metrics prometheus.Registerer
	// Leader elects the one reporter of a database (cmd/inlet: a
	// monitor.Leader over the advisory lock [LockName], on a connection of
	// its own): the reporter sends nothing while it does not lead, asking
	// again each round and at least every Interval. Several reporters of
	// one tenant would each send every record, and each one's check for a
	// restored control plane would be fooled by the others' records. On
	// taking the lead again it starts from the control plane's cursor, the
	// restartLookback ids below it looked for again, and still looks for
	// the gaps it knew. An election that fails (an error: its connection
	// lost, a reconnect refused) changes nothing: a leader keeps sending
	// (asking again at most every Interval) until an election answers
	// that another replica leads, a follower stays one. Two reporters may
	// so send at once for a while (the lock retaken by another replica
	// while this one's election cannot reach the database): they only
	// send duplicates, which the control plane stores once. Nil: it
	// always leads (one reporter per database is then the caller's to
	// ensure).
	Leader Leader

	// cursorCheck is how often a running reporter asks the control plane
	// for its cursor when no answer to a report carried it. Defaults to
	// cursorCheckEvery; tests shorten it (export_test.go).
	cursorCheck time.Duration
}

// Leader says whether this reporter is the one of its database that sends
// ([Config.Leader]).
type Leader interface {
	Leading(ctx context.Context) (bool, error)
}

// LockName names the session advisory lock under which the reporters of
// the streamers on one database elect the one that sends (cmd/inlet's
// monitor.NewNamedLeader).
const LockName = "inlet:metadata-reporter"

// cursorCheckEvery is how often a running reporter compares the control
// plane's cursor with the highest attempt id it had acknowledged, when no
// answer to a report did (a control plane of a release that does not answer
// cursor_before, or nothing to send): a control plane restored from a
// backup under it is noticed within this, and its lost records sent again.
// Rounds can be tens of milliseconds apart; one GET a minute costs nothing.
const cursorCheckEvery = time.Minute

// WithDefaults returns a copy with every unset field at its default.
func (c Config) WithDefaults() Config {
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.Interval = cmp.Or(c.Interval, 10*time.Second)
	c.MinBackoff = cmp.Or(c.MinBackoff, 500*time.Millisecond)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, time.Minute)
	c.GapTTL = cmp.Or(c.GapTTL, 10*time.Minute)
	c.cursorCheck = cmp.Or(c.cursorCheck, cursorCheckEvery)
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("reporter: Pool is required")
	case c.Token == "":
		return errors.New("reporter: Token is required")
	case !c.SendDatabaseIDs && len(c.Key) < 16:
		return errors.New("reporter: Key of at least 16 bytes is required unless SendDatabaseIDs")
	case c.BatchSize < 1 || c.BatchSize > MaxBatch:
		return fmt.Errorf("reporter: BatchSize %d must be 1..%d", c.BatchSize, MaxBatch)
	case c.Interval <= 0 || c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return errors.New("reporter: Interval and backoffs must be positive, MaxBackoff at least MinBackoff")
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("reporter: URL must be an http:// or https:// URL")
	}
	if strings.ContainsAny(c.URL, "?#") {
		// Paths are appended to it: after a query or a fragment they are no
		// path, and the control plane's page answered 401 to every request.
		return errors.New("reporter: URL must be a base URL without a query or fragment")
	}
	return nil
}

// Reporter sends attempt records to the control plane. It implements the
// start/stop contract: [Reporter.Start], [Reporter.Stop].
type Reporter struct {
	cfg     Config
	base    string
	started chan struct{}

	mu      sync.Mutex
	running bool
	loops   loop.Group

	// gaps are runs of ids the cursor passed without seeing them, each with
	// when: attempts whose transaction committed after a later id's (or
	// never will). A run costs the same however long it is; each is looked
	// for until GapTTL on the reporter's clock. nextGaps is what gaps become
	// once the records read are acknowledged, more whether the gaps had more
	// records than a round's look took.
	gaps, nextGaps []gap
	more           bool
	// tookSince is whether the control plane took a send since the last
	// record skipped on a refusal that named none (settle).
	tookSince bool
	// refusedCursor is the last cursor whose ids advanceIDs refused to
	// follow (too far ahead), so it is logged once.
	refusedCursor int64
	// stalled is the time spent in failed tries of a read or a send and the
	// waits after them, and not leading: no gap was looked for then, so
	// [Reporter.clock] leaves it out and an outage (or another replica's
	// lead) does not expire the gaps.
	stalled time.Duration
	// lastRead is the highest id collect read, valid or not; skipped are
	// the ids it read but could not report, which are no gaps.
	lastRead int64
	skipped  []int64
	// foldedClass is whether an error class outside the list was sent as
	// handler_error yet (logged at info the first time, then at debug).
	foldedClass bool
	// acked is the highest attempt id the control plane acknowledged, or
	// answered as its cursor: its cursor is below it only if it lost
	// records (its database restored from a backup).
	acked int64
	// ackedIDs are the attempt ids the control plane acknowledged since the
	// reporter started or last took the lead (bounded: maxAckedRuns; begin
	// says why not before), by which the rounds after a
	// rewind tell the records it lost that the data plane no longer holds.
	ackedIDs idRuns
	// arrivals map the control plane's arrival numbers to what was sent:
	// a highest number held below the one acknowledged means it lost
	// records, also those stored under ids below its cursor.
	arrivals arrivalLog
	// rewinding is whether the control plane was seen to have lost records
	// since the last round: the next one goes back to rewindTo (the lowest
	// cursor it answered behind acked, or just below the lowest attempt id
	// of the batches whose arrival numbers it lost) and sends the records
	// after it again. lostFrom..lostTo are the ids it certainly lost (above
	// its cursor, up to the highest acknowledged before), when it answered
	// a cursor behind acked; sweepFrom..sweepTo the part of them above the
	// data plane's oldest attempt, whose acknowledged ids the rounds after
	// the rewind look for as they read them again (sweep); readEnd is
	// whether the last read reached the newest attempt.
	rewinding                  bool
	rewindTo, lostFrom, lostTo int64
	sweepFrom, sweepTo         int64
	readEnd                    bool
	// cursorDue is whether the next send first asks the control plane for
	// its cursor (after a send it did not answer: it may have been restored
	// meanwhile); checkedAt is when its cursor was last compared with acked.
	cursorDue bool
	checkedAt time.Time
	// leading is whether this reporter is the one that sends (the last
	// election that answered without an error said so); begun whether it
	// started once (its later starts are on taking the lead again);
	// toldFollowing whether not leading was logged since. electFailed is
	// when the last election of a leader failed (zero once one answers):
	// it keeps sending, and asks again at most every Interval.
	leading, begun, toldFollowing bool
	electFailed                   time.Time

	sent      prometheus.Counter
	failures  *prometheus.CounterVec
	succeeded prometheus.Gauge
}

// gap is the run of ids lo..hi, passed by the cursor at since (on
// [Reporter.clock]).
type gap struct {
	lo, hi int64
	since  time.Time
}

// restartLookback is how many ids below the control plane's cursor a
// starting reporter looks for again, for GapTTL, as gaps: an attempt whose
// transaction committed after later ids were reported, and whose report the
// last process did not get acknowledged, is among them unless more than
// this many ids were finished after it.
const restartLookback = 1000

// maxGaps bounds the remembered runs of missing ids. A run that may never
// commit (a rolled-back transaction's ids) is kept until GapTTL too: a run
// of any length is one entry, and looking for it reads at most half a batch.
const maxGaps = 10_000

// gapChunk is the most runs one statement of readGaps looks for: a round
// looks for every live run, in ceil(runs/gapChunk) statements.
const gapChunk = 1000

// New returns a reporter for cfg.
func New(cfg Config) (*Reporter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Reporter{
		cfg:     cfg,
		base:    strings.TrimRight(cfg.URL, "/"),
		started: make(chan struct{}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "reporter", Name: "records_sent_total",
			Help: "Attempt records the control plane acknowledged (sent again after a restart or a lost answer: counted again)."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "reporter", Name: "failures_total",
			Help: "Failed steps, each retried with backoff: fetch_cursor and send (the control plane), read (the database); refused: records the control plane refused even with their values folded, skipped; " +
				"lost: a control plane restored from a backup lost records the data plane no longer holds, not sent again (the log names their ids); " +
				"and elect: the election of the one reporter of the database failed (a leader keeps sending, a follower sends nothing, until one answers)."}, []string{"step"}),
		succeeded: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: "reporter", Name: "last_success_timestamp_seconds",
			Help: "When a step last succeeded (unix seconds): a reporter that stopped getting through shows as its age, failures_total as why."}),
	}
	for _, step := range []string{"fetch_cursor", "read", "send", "refused", "lost", "elect"} {
		r.failures.WithLabelValues(step)
	}
	reg := metrics.OrDiscard(cfg.Metrics)
	for _, c := range []prometheus.Collector{r.sent, r.failures, r.succeeded} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("reporter metrics: %w", err)
		}
	}
	return r, nil
}

// Start runs the reporter in the background until ctx ends or Stop.
func (r *Reporter) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		return errors.New("reporter: already started")
	}
	r.running = true
	r.loops.Go(ctx, r.run)
	close(r.started)
	return nil
}

// Started is closed once Start has been called.
func (r *Reporter) Started() <-chan struct{} { return r.started }

// Stop ends the reporter and waits for it. Records not yet acknowledged are
// sent again by the next start (the cursor comes from the control plane;
// the start looks again at the restartLookback ids below it). A running
// reporter also goes back whenever the control plane lost records it
// acknowledged: its cursor, or its highest arrival number, below the
// highest acknowledged (rewind). A reporter with a Leader gives up
// nothing itself: the caller closes the Leader after Stop, and another
// replica's reporter takes the lead at its next look.
func (r *Reporter) Stop() {
	r.loops.Stop()
}

func (r *Reporter) run(ctx context.Context) {
	for ctx.Err() == nil {
		// Following, it cannot look for its gaps (and the leader does not
		// know them): that time does not age them (clock).
		waited := time.Now()
		if !r.awaitLead(ctx) {
			return
		}
		r.stalled += time.Since(waited)
		cursor, ok := r.begin(ctx)
		if !ok {
			return
		}
		r.report(ctx, cursor)
	}
}

// awaitLead returns once this reporter leads (true), asking every Interval,
// or when ctx ends (false).
func (r *Reporter) awaitLead(ctx context.Context) bool {
	for {
		if r.leads(ctx) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(r.cfg.Interval):
		}
	}
}

// leads reports whether this reporter is the one of its database that
// sends (Config.Leader; always, without one), and logs a change. Only an
// election that answers changes it: a failed one (an error: the election's
// connection lost and a reconnect refused, a database restart,
// max_connections) is counted in failures_total{step="elect"}, logged at
// warn, and leaves it as it was. A leader that stopped on such a blip
// started over, when it next won, from the control plane's cursor and
// lost the gaps it was looking for (review helper-334); it keeps sending
// instead, asking again at most every Interval, until an election answers.
// The lock may be gone with the election's connection and another
// replica's reporter take it meanwhile: the two then send the same records
// until this one's election answers, which the control plane stores once.
// A follower stays one. A reporter that follows has done its step:
// last_success is set, so a follower does not show as stuck.
func (r *Reporter) leads(ctx context.Context) bool {
	if r.cfg.Leader == nil {
		r.leading = true
		return true
	}
	if r.leading && !r.electFailed.IsZero() && time.Since(r.electFailed) < r.cfg.Interval {
		return true // its election failing: not asked at every round (each a connection attempt)
	}
	ok, err := r.cfg.Leader.Leading(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return false // stopping
	case err != nil:
		r.failures.WithLabelValues("elect").Inc()
		if !r.leading {
			r.cfg.Logger.Warn("reporter: leader election failed; sending nothing until it elects this reporter", slog.String("error", err.Error()))
			return false
		}
		r.electFailed = time.Now()
		r.cfg.Logger.Warn("reporter: leader election failed; still sending as the leader until an election answers "+
			"(another replica's reporter may take the lead meanwhile: both then send the same records, stored once)", slog.String("error", err.Error()))
		return true
	case !ok:
		r.succeeded.SetToCurrentTime()
	}
	switch {
	case ok && !r.electFailed.IsZero():
		r.cfg.Logger.Info("reporter: the election answers again and this reporter took the lead again; it kept sending meanwhile and goes on where it is")
		r.toldFollowing = false
	case ok:
		r.toldFollowing = false
	case r.leading:
		r.toldFollowing = true
		r.cfg.Logger.Info("reporter: no longer leads (another replica's reporter does); " +
			"sending nothing until it leads again, then starting over from the control plane's cursor, still looking for the gaps it knew")
	case !r.toldFollowing:
		r.toldFollowing = true
		r.cfg.Logger.Info("reporter: another replica's reporter leads; sending nothing while it does")
	}
	r.leading, r.electFailed = ok, time.Time{}
	return ok
}

// begin starts reporting, at the start and each time the reporter takes
// the lead again: from the control plane's cursor, with the
// restartLookback ids below it looked for again. It returns the cursor, or
// false when ctx ended. On taking the lead again it keeps, of what it
// knew, what stays true whoever led meanwhile, and forgets what another
// leader's sends made incomplete:
//   - the gaps (runs of ids the cursor passed unseen) are facts about the
//     data plane: kept below the lookback with their ages (the time it
//     followed does not age them), so an attempt that commits late, further
//     below the cursor than the lookback, is still reported (the other
//     leader never knew of it; looking for an id the control plane holds
//     is harmless: it stores each once);
//   - a rewind it had yet to make (the control plane lost records, some
//     below its cursor) is a fact about the control plane: kept;
//   - the arrival log and the acknowledged ids are facts about what this
//     reporter sent, incomplete once another sent: the numbers and ids the
//     other leader was given are not in them, and a log or a set with that
//     hole would go back less far than a restore needs, or leave lost ids
//     unsaid. Both start over at the control plane's answer, as at a
//     start (numbers and ids below are "acknowledged before this reporter
//     started or took the lead"), and so does acked (the control plane's
//     cursor holds the other leader's records too); a sweep for lost ids
//     not finished, which looks among the acknowledged ids, is given up,
//     and said so.
func (r *Reporter) begin(ctx context.Context) (int64, bool) {
	var cursor int64
	var arrival *int64
	err := r.retry(ctx, "fetch_cursor", func() error {
		c, err := r.fetchCursor(ctx)
		if err != nil {
			return err
		}
		cursor, arrival = c.AttemptID, c.Arrival
		return r.advanceIDs(ctx, cursor)
	})
	if err != nil {
		return 0, false // ctx ended
	}
	r.acked, r.checkedAt, r.cursorDue = cursor, time.Now(), false
	r.ackedIDs = idRuns{floor: cursor}
	r.arrivals = arrivalLog{}
	if arrival != nil {
		r.arrivals.begin(*arrival)
	}
	if r.sweepTo > r.sweepFrom {
		r.cfg.Logger.Warn("reporter: took the lead again before it had looked for every acknowledged attempt id the control plane lost; "+
			"those of them the data plane no longer holds are not logged or counted as lost",
			slog.Int64("from_attempt_id", r.sweepFrom+1), slog.Int64("to_attempt_id", r.sweepTo))
	}
	r.sweepFrom, r.sweepTo, r.readEnd = 0, 0, false
	r.lastRead, r.skipped, r.more = 0, r.skipped[:0], false
	// The ids just below the cursor are looked for again (those the control
	// plane holds already are stored once), so an attempt that committed
	// after later ids, and after the last report acknowledged (by the last
	// process, or the last leader), is not lost; the gaps the last process
	// was looking for are gone with it, and those this one knew are kept.
	kept := len(r.gaps)
	var dropped int
	r.gaps, dropped = lookBack(r.gaps, cursor, r.clock())
	r.nextGaps = nil
	r.logDropped(dropped)
	msg := "reporter started"
	if r.begun {
		msg = "reporter took the lead again; starting from the control plane's cursor, still looking for the gaps it knew"
	}
	r.begun = true
	r.cfg.Logger.Info(msg, slog.Int64("cursor", cursor), slog.Int("gaps_known", kept), slog.Bool("elected", r.cfg.Leader != nil),
		slog.Bool("database_ids", r.cfg.SendDatabaseIDs), slog.Bool("provider", r.cfg.IncludeProvider))
	return cursor, true
}

// lookBack returns the gaps of a start, or of a rewind, from cursor: the
// restartLookback ids below it, aged from now, then the parts of known
// (the gaps the reporter was looking for) below those, with their ages;
// the parts above are looked for again by the lookback or read again by
// the cursor. The lookback comes first, so a full memory (maxGaps runs)
// drops old gaps, not it; dropped is how many runs did not fit.
func lookBack(known []gap, cursor int64, now time.Time) (gaps []gap, dropped int) {
	lo := max(cursor-restartLookback, 1)
	gaps = make([]gap, 0, len(known)+1)
	gaps, dropped = addGaps(gaps, lo, cursor-1, nil, now, 0)
	for _, g := range known {
		gaps, dropped = addGaps(gaps, g.lo, min(g.hi, lo-1), nil, g.since, dropped)
	}
	return gaps, dropped
}

// report runs rounds from cursor until ctx ends or the reporter no longer
// leads (asked after each round).
func (r *Reporter) report(ctx context.Context, cursor int64) {
	log := r.cfg.Logger
	for {
		// A control plane restored from a backup under the running
		// reporter holds fewer records than it acknowledged: each answer
		// to a report says so (cursor_before), and its cursor is fetched
		// after a send it did not answer and at least every cursorCheck.
		// Seen behind, it gets the records after its cursor again, oldest
		// first, before anything newer.
		if time.Since(r.checkedAt) >= r.cfg.cursorCheck {
			if err := r.retry(ctx, "fetch_cursor", func() error { return r.checkCursor(ctx) }); err != nil {
				return
			}
		}
		if r.rewinding {
			err := r.retry(ctx, "read", func() error {
				var err error
				cursor, err = r.rewind(ctx, cursor)
				return err
			})
			if err != nil {
				return
			}
		}
		var batch []Record
		var next int64
		err := r.retry(ctx, "read", func() error {
			var err error
			batch, next, err = r.read(ctx, cursor)
			return err
		})
		if err != nil {
			return
		}
		if r.sweepTo > 0 {
			r.sweep(cursor, next, batch)
		}
		if len(batch) > 0 {
			acked, err := r.deliver(ctx, batch)
			if err != nil {
				return
			}
			r.sent.Add(float64(acked))
			log.Debug("report acknowledged", slog.Int("records", acked), slog.Int("refused", len(batch)-acked), slog.Int64("cursor", next))
		}
		r.gaps, r.nextGaps = r.nextGaps, nil
		if next > cursor {
			r.noteGaps(cursor, next, batch)
			cursor = next
		}
		// More may be waiting, or records to send again: the next round
		// follows at once; otherwise after Interval.
		if len(batch) < r.cfg.BatchSize && !r.more && !r.rewinding {
			select {
			case <-ctx.Done():
				return
			case <-time.After(r.cfg.Interval):
			}
		}
		if !r.leads(ctx) {
			return
		}
	}
}

// retry runs f until it succeeds or ctx ends, waiting with exponential
// backoff and jitter between tries. step names it in the log and in
// failures_total. Each failed try and the wait after it are added to
// r.stalled before the next try, so that try's look at the gaps already
// leaves them out. A refusal of what was sent (an [errStatus] that is
// [errStatus.refusal]: the same request meets it again) ends it at once and
// is returned: the caller narrows the batch down instead.
func (r *Reporter) retry(ctx context.Context, step string, f func() error) error {
	wait := r.cfg.MinBackoff
	for try := 1; ; try++ {
		start := time.Now()
		err := f()
		if err == nil {
			r.succeeded.SetToCurrentTime()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if st := (*errStatus)(nil); step == "send" && errors.As(err, &st) && st.refusal() {
			return err
		}
		r.failures.WithLabelValues(step).Inc()
		r.cfg.Logger.Warn("reporter: "+strings.ReplaceAll(step, "_", " ")+" failed, retrying", slog.Int("try", try),
			slog.Duration("wait", wait), slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait/2 + rand.N(wait/2+1)): //nolint:gosec // G404: retry jitter, not a secret
		}
		r.stalled += time.Since(start)
		wait = min(wait*2, r.cfg.MaxBackoff)
	}
}

// read returns the next records: those of the gaps that became visible, then
// up to a batch of ids above cursor. next is the new cursor once they are
// sent; r.nextGaps the gaps then.
func (r *Reporter) read(ctx context.Context, cursor int64) (batch []Record, next int64, err error) {
	next = cursor
	r.lastRead, r.skipped, r.more = 0, r.skipped[:0], false
	batch, err = r.readGaps(ctx, batch)
	if err != nil {
		return nil, cursor, err
	}
	limit := max(r.cfg.BatchSize-len(batch), 1)
	rows, err := queries.New(r.cfg.Pool).ReporterAttemptsAfter(ctx, queries.ReporterAttemptsAfterParams{
		AfterID: cursor, BatchSize: int64(limit)})
	if err != nil {
		return nil, cursor, fmt.Errorf("read attempts after %d: %w", cursor, err)
	}
	r.readEnd = len(rows) < limit
	if len(rows) == 0 {
		// Nothing after the cursor, which is also what a database restored
		// under a running reporter looks like (PITR in place: the
		// connections come back to a sequence that draws ids below the
		// cursor again). Behind, the sequence is moved past the cursor;
		// otherwise this reads it and takes no lock.
		if err := r.advanceIDs(ctx, cursor); err != nil {
			return nil, cursor, err
		}
	}
	n := len(batch)
	for _, row := range rows {
		batch = r.collect(row, batch)
	}
	for _, rec := range batch[n:] {
		next = max(next, rec.AttemptID)
	}
	// collect drops invalid rows; the cursor still moves past them.
	next = max(next, r.lastRead)
	return batch, next, nil
}

// readGaps looks for the attempts of every live gap, up to half a batch, and
// sets r.nextGaps to what is left of them (expired ones dropped). The gaps
// go in ascending order, gapChunk runs to a statement (ReporterAttemptsInRuns:
// per run and place one index range scan, so a run costs the same however
// long it is). A statement that fills the budget has looked at every id up to
// the last it returned; what is above stays a gap, as do the chunks after
// it, aged from this round's clock (not looked at, they do not age: a run of
// more late attempts than GapTTL's rounds can drain was cut off at GapTTL
// before), and r.more makes the next round follow at once (each such round
// reports a full budget, so this ends). So every live gap is looked at in
// every round, at most Interval apart, however many gaps there are; it was
// BatchSize/2 gaps a round before, and more than that many late attempts,
// each its own gap, were lost. The bound of a round: at most
// ceil(maxGaps/gapChunk) = 10 statements, each two index range scans per
// run reading at most half a batch of rows each, and the jobs rows of at
// most half a batch of records.
func (r *Reporter) readGaps(ctx context.Context, batch []Record) ([]Record, error) {
	now := r.clock()
	live := make([]gap, 0, len(r.gaps))
	for _, g := range r.gaps {
		if now.Sub(g.since) <= r.cfg.GapTTL {
			live = append(live, g)
		}
	}
	slices.SortFunc(live, func(a, b gap) int { return cmp.Compare(a.lo, b.lo) })
	q := queries.New(r.cfg.Pool)
	budget := int64(max(r.cfg.BatchSize/2, 1)) // the rest of the batch is for the ids after the cursor
	next := make([]gap, 0, len(live))
	dropped := 0
	for len(live) > 0 {
		chunk := live[:min(len(live), gapChunk)]
		live = live[len(chunk):]
		if budget == 0 {
			// Looked at next round, which follows at once. Not looked at in
			// this one, so not aged by it: from now.
			for _, g := range chunk {
				next, dropped = addGaps(next, g.lo, g.hi, nil, now, dropped)
			}
			continue
		}
		arg := queries.ReporterAttemptsInRunsParams{Lo: make([]int64, len(chunk)), Hi: make([]int64, len(chunk)), BatchSize: budget}
		for i, g := range chunk {
			arg.Lo[i], arg.Hi[i] = g.lo, g.hi
		}
		rows, err := q.ReporterAttemptsInRuns(ctx, arg)
		if err != nil {
			return nil, fmt.Errorf("read attempts of %d gaps from id %d: %w", len(chunk), chunk[0].lo, err)
		}
		budget -= int64(len(rows))
		// looked is the highest id this statement looked at in full: all
		// of them, unless it filled the budget, when the runs may hold more
		// above the last id it read.
		looked := chunk[len(chunk)-1].hi
		if budget == 0 {
			r.more = true
			looked = rows[len(rows)-1].ID
		}
		// rows and chunk are both in ascending id order and the runs are
		// disjoint: one pass splits each run at the ids read. What was
		// looked at and is still missing keeps its age; what lies above
		// looked (the rest of a run being drained, a budget a round) was
		// not looked at, so it ages from now: a transaction of more
		// attempts than GapTTL's rounds can drain, committed in time, is
		// reported whole. It stays bounded: each round that skips it
		// reports a full budget, and once one looks at it in full it ages
		// as any gap.
		k := 0
		for _, g := range chunk {
			var read []int64
			for ; k < len(rows) && rows[k].ID <= g.hi; k++ {
				if rows[k].ID < g.lo {
					continue // not in a run: cannot happen, the statement reads only the runs
				}
				batch = r.collect(queries.ReporterAttemptsAfterRow(rows[k]), batch)
				read = append(read, rows[k].ID)
			}
			next, dropped = addGaps(next, g.lo, min(g.hi, looked), read, g.since, dropped)
			next, dropped = addGaps(next, max(g.lo, looked+1), g.hi, nil, now, dropped)
		}
	}
	r.nextGaps = next
	r.logDropped(dropped)
	return batch, nil
}

// collect appends the row's record, skipping (and logging) a row that is not
// a valid record, and remembers the highest id read in lastRead. An error
// class outside consumers.Classes() does not make a row invalid: it is sent
// as handler_error.
func (r *Reporter) collect(row queries.ReporterAttemptsAfterRow, batch []Record) []Record {
	rec := Record{AttemptID: row.ID, Attempt: int(row.Attempt), StartedAt: row.StartedAt, FinishedAt: row.FinishedAt,
		DurationMS: row.DurationMs}
	r.lastRead = max(r.lastRead, rec.AttemptID)
	rec.Job = r.jobRef(row.JobID)
	rec.Outcome = Outcome(row.Outcome)
	rec.ErrorClass = consumers.ErrorClass(row.ErrorClass)
	if rec.ErrorClass != "" && !slices.Contains(consumers.Classes(), rec.ErrorClass) {
		// error_class is free text: a consumer not built on this SDK, or a
		// newer one mid-upgrade, may write a class outside the list. Its
		// attempt is still metadata worth reporting, under the class the SDK
		// itself gives an error it cannot classify (WithClass), which every
		// control plane accepts. The value is not logged: it is free text.
		// The first such attempt is logged at info, the rest at debug: a
		// consumer that writes its own classes would otherwise log a line
		// per failure.
		level := slog.LevelDebug
		if !r.foldedClass {
			level, r.foldedClass = slog.LevelInfo, true
		}
		r.cfg.Logger.LogAttrs(context.Background(), level, "reporter: attempt with an error class outside the list, reported as "+string(consumers.ClassHandlerError),
			slog.Int64("attempt_id", rec.AttemptID))
		rec.ErrorClass = consumers.ClassHandlerError
	}
	rec.StartedAt, rec.FinishedAt = rec.StartedAt.UTC(), rec.FinishedAt.UTC()
	if rec.FinishedAt.Before(rec.StartedAt) {
		// started_at is the consumer's clock, finished_at the database's:
		// a skew between them is not a reason to lose the record.
		rec.StartedAt, rec.DurationMS = rec.FinishedAt, 0
	}
	if r.cfg.IncludeProvider {
		rec.Provider = row.Provider
		if eventTypePattern.MatchString(row.EventType) {
			rec.EventType = row.EventType
		}
	}
	if err := rec.Validate(); err != nil {
		r.cfg.Logger.Warn("reporter: attempt not reportable, skipped", slog.Int64("attempt_id", rec.AttemptID),
			slog.String("error", err.Error()))
		r.skipped = append(r.skipped, rec.AttemptID)
		return batch
	}
	return append(batch, rec)
}

// jobRef is the job id as the control plane sees it.
func (r *Reporter) jobRef(jobID int64) string {
	id := strconv.FormatInt(jobID, 10)
	if r.cfg.SendDatabaseIDs {
		return id
	}
	return OpaqueJobID(r.cfg.Key, jobID)
}

// OpaqueJobID is the hex HMAC-SHA256 of the decimal job id under key.
func OpaqueJobID(key []byte, jobID int64) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(strconv.FormatInt(jobID, 10)))
	return hex.EncodeToString(m.Sum(nil))
}

// noteGaps remembers the ids in (from, to) that the batch did not carry, as
// runs.
func (r *Reporter) noteGaps(from, to int64, batch []Record) {
	var seen []int64
	for _, rec := range batch {
		if rec.AttemptID > from && rec.AttemptID < to {
			seen = append(seen, rec.AttemptID)
		}
	}
	for _, id := range r.skipped {
		if id > from && id < to {
			seen = append(seen, id)
		}
	}
	slices.Sort(seen)
	var dropped int
	r.gaps, dropped = addGaps(r.gaps, from+1, to-1, slices.Compact(seen), r.clock(), 0)
	r.logDropped(dropped)
}

// clock is the time that ages gaps: wall time less r.stalled, so a gap ages
// only while the reporter can look for it (the Interval waits once caught up
// count: a look follows each). No gap is noted while stalled either, so
// maxGaps alone bounds their memory, and GapTTL how long a run of ids that
// never commits (a rolled-back transaction's) is looked for.
func (r *Reporter) clock() time.Time { return time.Now().Add(-r.stalled) }

// addGaps appends the runs of lo..hi that are not in read (ascending ids
// within lo..hi) to gaps, up to maxGaps runs, and adds those that did not
// fit to dropped.
func addGaps(gaps []gap, lo, hi int64, read []int64, since time.Time, dropped int) ([]gap, int) {
	add := func(lo, hi int64) {
		if lo > hi {
			return
		}
		if len(gaps) >= maxGaps {
			dropped++
			return
		}
		gaps = append(gaps, gap{lo: lo, hi: hi, since: since})
	}
	for _, id := range read {
		add(lo, id-1)
		lo = id + 1
	}
	add(lo, hi)
	return gaps, dropped
}

func (r *Reporter) logDropped(runs int) {
	if runs > 0 {
		r.cfg.Logger.Warn("reporter: too many runs of missing attempt ids to remember; attempts in these that commit late are not reported",
			slog.Int("runs", runs), slog.Int("max", maxGaps))
	}
}

// advanceIDs moves the data plane's attempt id sequence past cursor when it
// is behind it, and says so at warn. Every record's id comes from that one
// sequence (job_attempts.id, jobs.completed_attempt_id), and the control
// plane keeps the first record of each id: a database restored from a backup
// (or a new one under the same tenant token) would give its next attempts
// ids the control plane holds from the lost timeline, and they were lost.
// The function (schema migration 072) never lowers the sequence, and locks
// it only when it is behind.
func (r *Reporter) advanceIDs(ctx context.Context, cursor int64) error {
	drawn, err := queries.New(r.cfg.Pool).ReporterAdvanceAttemptIDs(ctx, cursor)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "22003" /* numeric_value_out_of_range */ {
		// The cursor is further ahead than any restore rewinds (the
		// function refuses 2^32 ids or more): a control plane, or a holder
		// of the tenant's token, pushing this database's ids towards their
		// end. Not followed: reporting stays behind that cursor, delivery
		// here goes on. Said once per cursor.
		if r.refusedCursor != cursor {
			r.refusedCursor = cursor
			r.cfg.Logger.Error("reporter: the control plane's cursor is further ahead of this database's attempt ids than a restore rewinds; "+
				"its ids are not moved, and attempts are not reported until the cursor is corrected on the control plane",
				slog.Int64("cursor", cursor), slog.String("error", pgErr.Message))
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("advance attempt ids past cursor %d: %w", cursor, err)
	}
	if drawn < cursor {
		r.cfg.Logger.Warn("reporter: the data plane's attempt ids were behind the control plane's cursor "+
			"(its database restored from a backup, or a new database under this tenant's token); moved past the cursor, so new attempts are reported. "+
			"The control plane keeps the records of the ids up to the cursor it already held",
			slog.Int64("last_attempt_id", drawn), slog.Int64("cursor", cursor))
	}
	return nil
}

// deliver sends batch until the control plane has acknowledged each record
// or refused it for good, and returns how many it acknowledged. Any other
// failure (no answer, a 5xx) is retried as it was (retry). A refusal (400, 413, 422: the
// same batch would meet it again, and one record the control plane does
// not take, e.g. a class of a newer release, stopped every report after
// it) is narrowed down to the record refused: the one the answer names
// (records[i]), else by halves. That record is sent once more alone with
// its values folded to what every control plane takes (settle), and
// skipped if it is refused again; the batch's other records are sent, and
// the cursor moves on.
func (r *Reporter) deliver(ctx context.Context, batch []Record) (int, error) {
	return r.deliverPart(ctx, batch, true)
}

// deliverPart is deliver of a batch or, not whole, of a part of one being
// narrowed down (the batch's refusal is logged once).
func (r *Reporter) deliverPart(ctx context.Context, batch []Record, whole bool) (int, error) {
	acked := 0
	for first := whole; len(batch) > 0; first = false {
		err := r.retry(ctx, "send", func() error { return r.send(ctx, batch) })
		if err == nil {
			r.tookSince = true
			return acked + len(batch), nil
		}
		var st *errStatus
		if !errors.As(err, &st) || !st.refusal() {
			return acked, err // ctx ended
		}
		if first {
			r.cfg.Logger.Warn("reporter: the control plane refused a batch; looking for the record it refused",
				slog.Int("records", len(batch)), slog.Int64("first_attempt_id", batch[0].AttemptID),
				slog.Int("status", st.status), slog.String("reason", st.reason))
		}
		if len(batch) == 1 {
			n, err := r.settle(ctx, batch[0], st)
			return acked + n, err
		}
		i, named := st.record()
		if !named || i >= len(batch) {
			half := len(batch) / 2
			n, err := r.deliverPart(ctx, batch[:half], false)
			acked += n
			if err != nil {
				return acked, err
			}
			batch = batch[half:]
			continue
		}
		if i > 0 {
			n, err := r.deliverPart(ctx, batch[:i], false)
			acked += n
			if err != nil {
				return acked, err
			}
		}
		n, err := r.settle(ctx, batch[i], st)
		acked += n
		if err != nil {
			return acked, err
		}
		batch = batch[i+1:]
	}
	return acked, nil
}

// settle sends rec, which the control plane refused (why), once more alone
// with its values folded to what every control plane takes: an error class
// as handler_error, no provider and no event type. Refused again, it is
// skipped: logged by attempt id (no value of it) and counted in
// failures_total{step="refused"}. It returns 1 if the control plane took it.
func (r *Reporter) settle(ctx context.Context, rec Record, why *errStatus) (int, error) {
	folded := rec
	if folded.ErrorClass != "" {
		folded.ErrorClass = consumers.ClassHandlerError
	}
	folded.Provider, folded.EventType = "", ""
	// A refusal that names no record (not the control plane's own, which
	// names records[i]: a proxy or firewall in front of it) is taken as
	// this record's only once after the control plane took something
	// (tookSince): one that refuses everything skips at most one record,
	// then this record is sent again and again, as any failure, until it
	// is taken or refused by name.
	unnamedSkip := r.tookSince
	err := r.retry(ctx, "send", func() error {
		err := r.send(ctx, []Record{folded})
		var st *errStatus
		if errors.As(err, &st) && st.refusal() {
			if _, named := st.record(); !named && !unnamedSkip {
				return fmt.Errorf("record of attempt %d refused without being named, with nothing taken since the last such refusal "+
					"(a proxy in front of the control plane?): not skipped, sent again: %s", rec.AttemptID, st.Error())
			}
		}
		return err
	})
	if err == nil {
		r.tookSince = true
		r.cfg.Logger.Warn("reporter: the control plane refused a record; sent again with its error class as "+string(consumers.ClassHandlerError)+
			" and without provider and event type, and acknowledged",
			slog.Int64("attempt_id", rec.AttemptID), slog.Int("status", why.status), slog.String("reason", why.reason))
		return 1, nil
	}
	var st *errStatus
	if !errors.As(err, &st) || !st.refusal() {
		return 0, err // ctx ended
	}
	if _, named := st.record(); !named {
		r.tookSince = false
	}
	r.failures.WithLabelValues("refused").Inc()
	r.cfg.Logger.Warn("reporter: the control plane refused a record, also with its values folded; skipped, not reported",
		slog.Int64("attempt_id", rec.AttemptID), slog.Int("status", st.status), slog.String("reason", st.reason))
	return 0, nil
}

// errStatus is a control plane answer other than 2xx.
type errStatus struct {
	status int
	reason string
}

// refusal reports whether the control plane refused what it was sent: 400,
// 413 or 422, which the same request meets again. Every other answer (5xx,
// 429, 401 while a token is rotated, ...) is worth sending the same again.
func (e *errStatus) refusal() bool {
	switch e.status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// record is the index of the record the reason names ("records[3]: ..."
// from the control plane's Batch.Validate), if it names one.
func (e *errStatus) record() (int, bool) {
	rest, ok := strings.CutPrefix(e.reason, "records[")
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "]")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(digits)
	if err != nil || i < 0 {
		return 0, false
	}
	return i, true
}

func (e *errStatus) Error() string {
	if e.reason == "" {
		return fmt.Sprintf("control plane answered %d", e.status)
	}
	return fmt.Sprintf("control plane answered %d: %s", e.status, e.reason)
}

// fetchCursor asks the control plane for its cursor (and, from one that
// answers it, its highest arrival number held).
func (r *Reporter) fetchCursor(ctx context.Context) (Cursor, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/api/v1/cursor", nil)
	if err != nil {
		return Cursor{}, err
	}
	body, err := r.do(req)
	if err != nil {
		return Cursor{}, fmt.Errorf("get cursor: %w", err)
	}
	var c Cursor
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&c); err != nil {
		return Cursor{}, fmt.Errorf("get cursor: decode answer: %w", err)
	}
	if c.AttemptID < 0 {
		return Cursor{}, fmt.Errorf("get cursor: negative attempt id %d", c.AttemptID)
	}
	if c.Arrival != nil && *c.Arrival < 0 {
		c.Arrival = nil // not a number the control plane gives: as if not answered
	}
	return c, nil
}

// checkCursor fetches the control plane's cursor and compares it with the
// highest id it acknowledged (behind), and its highest arrival number with
// the highest one it acknowledged (arrived).
func (r *Reporter) checkCursor(ctx context.Context) error {
	c, err := r.fetchCursor(ctx)
	if err != nil {
		return err
	}
	const answer = "GET /api/v1/cursor"
	r.behind(c.AttemptID, answer)
	if c.Arrival != nil {
		r.arrived(*c.Arrival, c.AttemptID, answer)
	}
	return nil
}

// behind compares cursor, the control plane's (answered to the request
// named by answer), with acked. Below it, the control plane lost the
// records of the ids between (its database restored from a backup: what it
// stored after the backup is gone, and once a newer record is stored its
// cursor is above the hole for good). That is logged at warn with both ids,
// and the next round goes back to the cursor (rewind): the control plane
// stores records once per (tenant, attempt id), so sending again is safe.
func (r *Reporter) behind(cursor int64, answer string) {
	r.checkedAt, r.cursorDue = time.Now(), false
	if cursor >= r.acked {
		return
	}
	r.cfg.Logger.Warn("reporter: the control plane's cursor is below the highest attempt id it acknowledged: it lost records "+
		"(its database restored from a backup?); the records after its cursor are sent again",
		slog.Int64("cursor", cursor), slog.Int64("acknowledged", r.acked), slog.String("answer", answer))
	if r.lostTo == 0 || cursor < r.lostFrom {
		r.lostFrom = cursor
	}
	r.lostTo = max(r.lostTo, r.acked)
	r.goBack(cursor)
	r.acked = cursor
}

// arrived compares held, the control plane's highest arrival number held
// (answered to the request named by answer, with its cursor), with the
// highest it acknowledged. Below it, the control plane lost the records
// it numbered above held, whatever their attempt ids: also those stored
// under ids below its cursor (attempts that committed late), which behind
// does not see. That is logged at warn, and the next round goes back to
// just below the lowest attempt id of the batches they were given to (the
// arrival log), and sends everything after it again. Numbers given before
// the log begins (to a reporter before this one, or to another replica's
// before this one took the lead) are not mapped to ids:
// the reporter then goes back to the control plane's cursor, or lower if
// the log says so, and looks for the restartLookback ids below it again,
// and says so.
func (r *Reporter) arrived(held, cursor int64, answer string) {
	l := &r.arrivals
	if !l.known {
		l.begin(held) // the first answer of a control plane upgraded under the reporter
		return
	}
	if held >= l.acked {
		return
	}
	acked := l.acked
	minID, ok, covered := l.lose(held)
	to := cursor
	switch {
	case covered && ok:
		to = minID - 1
	case ok:
		to = min(to, minID-1)
	}
	r.cfg.Logger.Warn("reporter: the control plane's highest arrival number is below the one it acknowledged: it lost records "+
		"(its database restored from a backup?); the records sent since are sent again",
		slog.Int64("arrival", held), slog.Int64("acknowledged_arrival", acked), slog.Int64("from_attempt_id", to+1), slog.String("answer", answer))
	if !covered {
		r.cfg.Logger.Warn("reporter: some of the records the control plane lost were acknowledged before this reporter started or took the lead "+
			"(or before the control plane answered arrival numbers); "+
			"the records after its cursor are sent again and the ids below it looked for again, but one stored under a lower id may stay lost",
			slog.Int64("arrival", held), slog.Int64("from_attempt_id", to+1), slog.Int("looked_for_below", restartLookback))
	}
	r.goBack(to)
}

// goBack makes the next round go back to the cursor to (rewind), or lower
// if another loss seen since asks so.
func (r *Reporter) goBack(to int64) {
	if !r.rewinding || to < r.rewindTo {
		r.rewindTo = to
	}
	r.rewinding = true
}

// rewind goes back to r.rewindTo and returns the cursor to read after: the
// records after it are read again, oldest first, and sent before newer
// ones. Gaps above it are dropped (the cursor reads those ids again), and
// the restartLookback ids below it are looked for again as gaps, as at a
// start. Of the ids the control plane certainly lost (lostFrom..lostTo:
// above a cursor it answered behind what it acknowledged), those below the
// data plane's oldest attempt cannot be sent again (retention dropped
// them): they are logged at error and counted in
// failures_total{step="lost"} now, and the cursor goes back only to just
// below that oldest attempt. Those above it are looked for as the next
// rounds read them again (sweep).
func (r *Reporter) rewind(ctx context.Context, cursor int64) (int64, error) {
	to := r.rewindTo
	if r.lostTo > r.lostFrom {
		rows, err := queries.New(r.cfg.Pool).ReporterAttemptsAfter(ctx, queries.ReporterAttemptsAfterParams{AfterID: 0, BatchSize: 1})
		if err != nil {
			return cursor, fmt.Errorf("read the oldest attempt, going back to attempt id %d: %w", to, err)
		}
		gone, oldest := r.lostTo, int64(0) // the data plane holds none of the lost ids up to gone
		if len(rows) > 0 {
			oldest = rows[0].ID
			gone = min(gone, oldest-1)
		}
		if gone > r.lostFrom {
			r.failures.WithLabelValues("lost").Inc()
			r.cfg.Logger.Error("reporter: the control plane lost records of attempts the data plane no longer holds "+
				"(below its oldest attempt, or none left: retention dropped them); they cannot be sent again",
				slog.Int64("from_attempt_id", r.lostFrom+1), slog.Int64("to_attempt_id", gone), slog.Int64("oldest_attempt_id", oldest))
			to = max(to, gone)
		}
		from := max(r.lostFrom, gone)
		if from < r.ackedIDs.floor {
			r.cfg.Logger.Warn("reporter: some of the attempt ids the control plane lost were acknowledged before this reporter started or took the lead, or too long ago to be remembered; "+
				"those of them the data plane no longer holds are not told apart from ids no attempt committed under, nor logged or counted as lost",
				slog.Int64("from_attempt_id", from+1), slog.Int64("to_attempt_id", min(r.ackedIDs.floor, r.lostTo)))
		}
		if r.sweepTo > 0 {
			from = min(from, r.sweepFrom)
		}
		r.sweepFrom, r.sweepTo = from, max(r.sweepTo, r.lostTo)
	}
	to = min(to, cursor)
	var dropped int
	r.gaps, dropped = lookBack(r.gaps, to, r.clock())
	r.logDropped(dropped)
	r.cfg.Logger.Info("reporter: went back to send again what the control plane lost; sending the records after the cursor again",
		slog.Int64("from_cursor", cursor), slog.Int64("cursor", to))
	r.rewinding, r.rewindTo, r.lostFrom, r.lostTo = false, 0, 0, 0
	return to, nil
}

// sweep looks, after a rewind, for the acknowledged ids the control plane
// certainly lost (sweepFrom..sweepTo) among the records a round read after
// cursor up to next (up to sweepTo when that read reached the newest
// attempt): an id acknowledged, so committed, that the data plane no longer
// returns was dropped (retention drops whole event periods, not the lowest
// ids first, so these can lie above its oldest attempt). Their count and
// the lowest and highest of them are logged at error and counted in
// failures_total{step="lost"}: they cannot be sent again.
func (r *Reporter) sweep(cursor, next int64, batch []Record) {
	if cursor >= r.sweepTo {
		r.sweepFrom, r.sweepTo = 0, 0 // looked at in full
		return
	}
	lo, hi := max(cursor, r.sweepFrom), r.sweepTo
	if !r.readEnd {
		hi = min(hi, next)
	}
	if hi <= lo {
		return
	}
	present := make([]int64, 0, len(batch)+len(r.skipped))
	for _, rec := range batch {
		present = append(present, rec.AttemptID)
	}
	present = append(present, r.skipped...)
	slices.Sort(present)
	if n, first, last := r.ackedIDs.missing(lo, hi, present); n > 0 {
		r.failures.WithLabelValues("lost").Inc()
		r.cfg.Logger.Error("reporter: the control plane lost records of attempts the data plane no longer holds "+
			"(retention dropped them); they cannot be sent again",
			slog.Int64("from_attempt_id", first), slog.Int64("to_attempt_id", last), slog.Int64("attempts", n))
	}
	r.sweepFrom = hi
	if hi >= r.sweepTo {
		r.sweepFrom, r.sweepTo = 0, 0
	}
}

// send posts records. An answer that carries the control plane's cursor
// before it stored them (cursor_before) is compared with what it
// acknowledged before (behind), and so are its highest arrival numbers
// held before and after them (arrived); a control plane that does not
// answer them is asked for its cursor after a send it did not answer (it
// may have been restored meanwhile), before this batch raises its cursor
// above the records it lost, and every cursorCheck.
func (r *Reporter) send(ctx context.Context, records []Record) error {
	if r.cursorDue {
		if err := r.checkCursor(ctx); err != nil {
			return fmt.Errorf("before posting %d records: %w", len(records), err)
		}
	}
	body, err := json.Marshal(Batch{Records: records})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+"/api/v1/reports", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	answer, err := r.do(req)
	if err != nil {
		if st := (*errStatus)(nil); !errors.As(err, &st) || !st.refusal() {
			r.cursorDue = true
		}
		return fmt.Errorf("post %d records: %w", len(records), err)
	}
	// The records are acknowledged whatever the body says: one that is not
	// an Answer (a proxy's, a control plane's of another release) only
	// carries no cursor.
	const what = "POST /api/v1/reports"
	var a Answer
	if json.Unmarshal(answer, &a) != nil {
		a = Answer{}
	}
	cursor := r.acked
	if a.CursorBefore != nil && *a.CursorBefore >= 0 {
		r.behind(*a.CursorBefore, what)
		cursor = *a.CursorBefore
	}
	if a.ArrivalBefore != nil && a.Arrival != nil && *a.ArrivalBefore >= 0 && *a.Arrival >= *a.ArrivalBefore {
		r.arrived(*a.ArrivalBefore, cursor, what)
		if len(records) > 0 {
			lowest := records[0].AttemptID
			for _, rec := range records {
				lowest = min(lowest, rec.AttemptID)
			}
			r.arrivals.add(*a.Arrival, lowest)
		}
	}
	for _, rec := range records {
		r.acked = max(r.acked, rec.AttemptID)
		r.ackedIDs.add(rec.AttemptID)
	}
	return nil
}

// do sends req with the token and returns a 2xx answer's body (up to 64
// KiB; a body cut short is for the caller's decoding to refuse).
func (r *Reporter) do(req *http.Request) ([]byte, error) {
	req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	resp, err := r.cfg.HTTPClient.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL is configuration; the log needs only why
		}
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e struct {
			Error string `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = json.Unmarshal(b, &e)
		if len(e.Error) > 200 {
			e.Error = e.Error[:200]
		}
		return nil, &errStatus{status: resp.StatusCode, reason: e.Error}
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return body, nil
}
