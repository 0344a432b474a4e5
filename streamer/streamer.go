package streamer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/internal/loop"
	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/internal/tracing"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Config configures a Streamer.
type Config struct {
	// Pool runs the claims and the reaper, as role webhook_streamer. Required.
	Pool *pgxpool.Pool
	// Publisher carries references to consumers. Required.
	Publisher message.Publisher
	// ListenConnect opens the dedicated LISTEN connection. Nil: no LISTEN,
	// the poll tick alone wakes the streamer.
	ListenConnect func(ctx context.Context) (*pgx.Conn, error)
	// ReplicationConnect opens the logical replication connection
	// (replication=database, a role with REPLICATION; see
	// ConnectReplication) the replication wake source streams on. Nil: off.
	// Not together with ListenConnect.
	ReplicationConnect func(ctx context.Context) (*pgconn.PgConn, error)
	// SlotName is the replication slot this streamer reads. A slot has one
	// reader and keeps its position across restarts, so every replica needs
	// its own stable name. Without ReplicationConnect, Start drops the slot
	// of this name an earlier replication wake source left behind (a
	// permanent pgoutput slot of this database that nothing reads): it would
	// retain WAL for good, and keep PostgreSQL from starting once wal_level
	// is lowered. Defaults to "inlet_streamer".
	SlotName string
	// ID names this streamer as lease holder (jobs.lease_holder_id).
	// Defaults to "streamer-<hostname>-<pid>-<random>".
	ID string
	// BatchSize is the most jobs one claim statement leases. Defaults to 100.
	BatchSize int
	// RefsPerMessage is the most job references one bus message carries: a
	// claim's jobs of one handler go out in messages of up to this many
	// (split evenly), so the bus costs a publish, a delivery and an
	// acknowledgement per message, not per job, and one consumer replica
	// reads and completes a message's jobs together. 1 sends one reference
	// per message in the form earlier consumers read (before several per
	// message, see CHANGELOG): use it while such consumers still run (a
	// rolling upgrade), as they drop a message of several as malformed
	// (nothing is lost: the leases expire and the jobs are claimed again).
	// Defaults to 32.
	RefsPerMessage int
	// MaxLeasedPerHandler stops claiming for a handler that already has this
	// many jobs leased (by all streamers together): leases taken far ahead of
	// what its consumers take would expire in the bus and churn. Set it above
	// the handler's throughput × LeaseDuration's worth of queueing you accept.
	// Defaults to 5000. The count is kept in memory (see LeasedRecount), not
	// re-counted by every claim.
	MaxLeasedPerHandler int
	// MinLeasedPerHandler is how many leases of a handler nobody has
	// extended yet (references waiting in the bus) the streamer takes
	// whatever the handler's pace. Beyond it, it takes what the handler's
	// consumers start within half a LeaseDuration at the pace its leases
	// ended lately: a reference waiting in the bus longer than its lease is
	// counted as an attempt by the reaper (its consumer alive), so a slow
	// handler's backlog leased at once burned attempts unrun. Extended
	// leases (attempts running) do not count. Defaults to 4: a reference past
	// the message a consumer has at hand waits for the jobs before it, and
	// a handler of a job every few seconds starts 4 well within a lease.
	MinLeasedPerHandler int
	// LeasedRecount is how often the in-memory count of leased jobs per
	// handler is read again from Postgres (ten times as often while a
	// handler is at MaxLeasedPerHandler): between recounts it adds this
	// streamer's own leases and does not see completions. Defaults to 100ms.
	LeasedRecount time.Duration
	// LeaseDuration is how long a consumer has to report (or extend) before
	// the reaper takes the job back. Defaults to 60s.
	LeaseDuration time.Duration
	// PollInterval is the fallback wake-up; also how soon a retry whose
	// backoff ended is noticed. Defaults to 1s.
	PollInterval time.Duration
	// ReapInterval is how often expired leases are looked for. Defaults to 5s.
	ReapInterval time.Duration
	// FollowUp: after a claim round that leased jobs, claim again this much
	// later, and keep doing so until FollowUpFor has passed since the last
	// round that leased any, so a steady stream is picked up between
	// wake-ups (a writer's NOTIFYs are debounced to one per 2ms; a hand-written
	// INSERT sends none). Defaults to 10ms;
	// negative turns it off.
	FollowUp time.Duration
	// FollowUpFor is how long follow-ups go on finding nothing before they
	// stop. Defaults to 100ms.
	FollowUpFor time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics registers the streamer metrics (inlet_streamer_*). Nil: not
	// exported.
	Metrics prometheus.Registerer
}

// WithDefaults returns a copy with every unset field at its default.
func (c Config) WithDefaults() Config {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("streamer-%s-%d-%04x", host, os.Getpid(), rand.N(1<<16)) //nolint:gosec // G404: a suffix that tells replicas apart in logs, not a secret
	}
	c.BatchSize = cmp.Or(c.BatchSize, 100)
	c.RefsPerMessage = cmp.Or(c.RefsPerMessage, 32)
	c.MaxLeasedPerHandler = cmp.Or(c.MaxLeasedPerHandler, 5000)
	c.MinLeasedPerHandler = cmp.Or(c.MinLeasedPerHandler, 4)
	c.LeasedRecount = cmp.Or(c.LeasedRecount, 100*time.Millisecond)
	c.LeaseDuration = cmp.Or(c.LeaseDuration, 60*time.Second)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	c.ReapInterval = cmp.Or(c.ReapInterval, 5*time.Second)
	c.FollowUp = cmp.Or(c.FollowUp, 10*time.Millisecond)
	c.FollowUpFor = cmp.Or(c.FollowUpFor, 100*time.Millisecond)
	c.SlotName = cmp.Or(c.SlotName, DefaultSlotName)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("streamer: Pool is required")
	case c.Publisher == nil:
		return errors.New("streamer: Publisher is required")
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return fmt.Errorf("streamer: BatchSize %d must be between 1 and 10000", c.BatchSize)
	case c.RefsPerMessage < 1 || c.RefsPerMessage > 1000:
		return fmt.Errorf("streamer: RefsPerMessage %d must be between 1 and 1000", c.RefsPerMessage)
	case c.LeaseDuration < time.Second:
		return fmt.Errorf("streamer: LeaseDuration %s must be at least 1s", c.LeaseDuration)
	case c.MinLeasedPerHandler < 1:
		return fmt.Errorf("streamer: MinLeasedPerHandler %d must be at least 1", c.MinLeasedPerHandler)
	case c.MaxLeasedPerHandler < 1:
		return fmt.Errorf("streamer: MaxLeasedPerHandler %d must be at least 1", c.MaxLeasedPerHandler)
	case c.LeasedRecount < time.Millisecond:
		return fmt.Errorf("streamer: LeasedRecount %s must be at least 1ms", c.LeasedRecount)
	case c.PollInterval < 0 || c.ReapInterval < 0:
		return errors.New("streamer: PollInterval and ReapInterval must not be negative")
	case c.ListenConnect != nil && c.ReplicationConnect != nil:
		return errors.New("streamer: ListenConnect and ReplicationConnect are exclusive: wake on LISTEN or on replication, not both")
	case !slotNameRE.MatchString(c.SlotName):
		return fmt.Errorf("streamer: SlotName %q must be 1 to 63 of a-z, 0-9 and _", c.SlotName)
	}
	return nil
}

// Stats are counters since Start, for metrics and tests.
type Stats struct {
	Claims        int64 // claim statements run
	FullClaims    int64 // of them, claims over every partition (the others claim within RecentWindow)
	Claimed       int64 // jobs leased
	Published     int64 // references published
	PublishFailed int64 // references not published (leases given back)
	// Deferred are leases of handlers shared by consumer roles given back
	// unpublished, due again later: beyond what their role starts within
	// half a lease (paceRoutes).
	Deferred      int64
	Reaped        int64 // expired leases returned to pending
	DeadLettered  int64 // expired leases on their last attempt
	NotifyWakeups int64
	PollWakeups   int64
	// ReplicationWakeups counts committed transactions on the replication
	// stream that woke the claim loop.
	ReplicationWakeups int64
}

// Streamer claims due jobs and publishes references to them.
type Streamer struct {
	cfg         Config
	listener    *notify.Listener
	replication *Replication
	wake        chan struct{}
	// apart are the loops that claim limited and ordered handlers apart
	// from the others (apart.go).
	apart      [2]*apartGroup
	batchSizes prometheus.Histogram
	inFlight   *inFlight
	// holds keeps handlers whose references the bus refused out of the
	// claims for a while (hold.go).
	holds *publishHolds
	// refused is set when a publish fails and cleared by the next one that
	// succeeds (for any handler): Healthy's answer.
	refused atomic.Pointer[publishRefusal]
	// lastRefused is when the bus last refused a publish (unix ns).
	lastRefused atomic.Int64

	claims, claimed, published, publishFailed, deferred atomic.Int64
	fullClaims                                          atomic.Int64
	lastFullClaim                                       atomic.Int64 // unix ns of the last claim over every partition
	fullClaimDue                                        atomic.Bool  // the poll tick asks for a claim over every partition
	reaped, deadLettered                                atomic.Int64
	notifyWakeups, pollWakeups                          atomic.Int64
	replicationWakeups                                  atomic.Int64

	mu      sync.Mutex
	loops   loop.Group
	started bool
	// phase is where Start and Stop are (phaseIdle, …), for Healthy: Start
	// holds mu while it opens the replication stream (up to 15s), so a
	// readiness probe cannot wait for it.
	phase atomic.Int32

	// stopped ends when Stop begins: no claim loop starts another round
	// (claimLoop). claimsCut and giveBacksCut end claimRoundTimeout and
	// claimRoundTimeout+giveBackTimeout after it: whatever the claim loops
	// still wait for in the database then (a claim, a recount, a publish;
	// a give-back) is cut off, so Stop is bounded (StopTimeout) however the
	// database answers.
	stopped, claimsCut, giveBacksCut context.Context
	halt, cutClaims, cutGiveBacks    context.CancelFunc

	// leasedAt is, per handler, the newest lease time this process got back
	// from any of its claims, recorded before their references are
	// published: the mark a give-back stays after (see giveBackUnseen).
	leasedMu sync.Mutex
	leasedAt map[string]time.Time
}

// New validates cfg and returns a Streamer; Start runs it.
func New(cfg Config) (*Streamer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Streamer{cfg: cfg, wake: make(chan struct{}, 1), apart: newApartGroups(), inFlight: newInFlight(cfg.MaxLeasedPerHandler, cfg.LeasedRecount, cfg.LeaseDuration, cfg.MinLeasedPerHandler, cfg.BatchSize),
		holds: newPublishHolds(), leasedAt: map[string]time.Time{}}
	s.stopped, s.halt = context.WithCancel(context.Background())
	s.claimsCut, s.cutClaims = context.WithCancel(context.Background())
	s.giveBacksCut, s.cutGiveBacks = context.WithCancel(context.Background())
	if cfg.ListenConnect != nil {
		s.listener = notify.NewListener(notify.ListenerConfig{
			Connect: cfg.ListenConnect,
			OnNotify: func() {
				s.notifyWakeups.Add(1)
				s.Wake()
			},
			Logger: cfg.Logger,
		})
	}
	if cfg.ReplicationConnect != nil {
		s.replication = newReplication(cfg, func() {
			s.replicationWakeups.Add(1)
			s.Wake()
		}, s.Wake)
	}
	if err := s.registerMetrics(metrics.OrDiscard(cfg.Metrics)); err != nil {
		return nil, fmt.Errorf("streamer metrics: %w", err)
	}
	return s, nil
}

// ID is this streamer's lease holder id.
func (s *Streamer) ID() string { return s.cfg.ID }

// Listener is the LISTEN connection holder, nil when LISTEN is off.
func (s *Streamer) Listener() *notify.Listener { return s.listener }

// Replication is the replication wake source, nil when it is off.
func (s *Streamer) Replication() *Replication { return s.replication }

// Stats returns the counters.
func (s *Streamer) Stats() Stats {
	return Stats{
		Claims: s.claims.Load(), FullClaims: s.fullClaims.Load(), Claimed: s.claimed.Load(), Published: s.published.Load(),
		PublishFailed: s.publishFailed.Load(), Deferred: s.deferred.Load(), Reaped: s.reaped.Load(), DeadLettered: s.deadLettered.Load(),
		NotifyWakeups: s.notifyWakeups.Load(), PollWakeups: s.pollWakeups.Load(),
		ReplicationWakeups: s.replicationWakeups.Load(),
	}
}

// publishRefusal is the bus's first refusal since the last publish it took.
type publishRefusal struct {
	since time.Time
	topic string
	err   error
}

// refusalFresh is how long a refused publish speaks for the bus: past it with
// nothing refused since (nothing to publish, or its handlers held back), the
// bus itself is asked (Ping) where it can be.
const refusalFresh = 2 * holdMost

// pinger is a publisher that can say whether the bus answers now
// (natsbus.NATS).
type pinger interface {
	Ping(ctx context.Context) error
}

// The phases of Start and Stop that Healthy reports.
const (
	phaseIdle     int32 = iota // never started (or Start failed): driven by ClaimOnce, if at all
	phaseStarting              // Start under way (opening the replication stream)
	phaseRunning               // Start returned: the loops run
	phaseStopping              // Stop begun: the loops end, claiming nothing more
)

// Healthy reports an error while Start is under way and once Stop has
// begun: the streamer claims nothing then (a probe served before Start, as
// inlet streamer's /readyz, answered ready while Start was still opening the
// replication stream, review helper-253). A streamer never started, driven
// by ClaimOnce alone, is judged by the bus alone; a program that serves
// Healthy before it calls Start gates it on Start's return itself. While it
// runs, it reports an error while the bus refuses every reference this
// streamer publishes: a publish failed (its leases were given back) and none
// has succeeded since. One handler's full topic beside others being published
// is not a fault of the streamer: it is held back (hold.go), others go on.
// When nothing was refused for refusalFresh (nothing was published since),
// a publisher that can be pinged is asked instead, so an idle streamer's
// health follows the bus's recovery.
func (s *Streamer) Healthy(ctx context.Context) error {
	switch s.phase.Load() {
	case phaseStarting:
		return errors.New("streamer: starting: opening its wake sources")
	case phaseStopping:
		return errors.New("streamer: stopping")
	}
	r := s.refused.Load()
	if r == nil {
		return nil
	}
	err := fmt.Errorf("streamer: the bus has refused every publish since %s (topic %s): %w",
		r.since.UTC().Format(time.RFC3339), r.topic, r.err)
	if time.Since(time.Unix(0, s.lastRefused.Load())) < refusalFresh {
		return err
	}
	if p, ok := s.cfg.Publisher.(pinger); ok && p.Ping(ctx) == nil {
		return nil
	}
	return err
}

// Wake asks every claim loop for a round now. It never blocks.
func (s *Streamer) Wake() {
	s.wakeMain()
	for _, g := range s.apart {
		g.wakeUp()
	}
}

// Start runs the wake sources, the claim loop and the reaper in the
// background until Stop. With ReplicationConnect it first opens the
// replication stream (up to 15s), and fails with ErrReplicationSetup when it
// cannot work as configured; when Postgres is merely unreachable it starts
// anyway and polls until the stream opens. Without ReplicationConnect it
// drops, in the background, the slot of SlotName a replication wake source
// left behind, once nothing reads it (retireSlot; a role that may not is
// warned about, never a failed Start). Healthy reports an error while Start
// is under way.
func (s *Streamer) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("streamer: already started")
	}
	s.phase.Store(phaseStarting)
	if s.replication != nil {
		if err := s.replication.prepare(ctx); err != nil {
			s.phase.CompareAndSwap(phaseStarting, phaseIdle) // a Stop meanwhile keeps phaseStopping
			return err
		}
	}
	s.started = true
	// The loops run until Stop, not until ctx ends. Stop ends them last
	// started first: the claim loop before the wake sources that feed it.
	ctx = context.WithoutCancel(ctx)
	if s.replication == nil {
		s.loops.Go(ctx, func(ctx context.Context) {
			retireSlot(ctx, s.cfg.Pool, s.cfg.SlotName, retireSlotRecheck, s.cfg.Logger)
		})
	}
	if s.listener != nil {
		s.loops.Go(ctx, s.listener.Run)
	}
	if s.replication != nil {
		s.loops.Go(ctx, s.replication.run)
	}
	s.loops.Go(ctx, s.pollLoop)
	s.loops.Go(ctx, func(ctx context.Context) { s.claimLoop(ctx, s.wake, s.wakeMain, s.mainRound, nil) })
	for _, g := range s.apart {
		s.loops.Go(ctx, func(ctx context.Context) { s.apartLoop(ctx, g) })
	}
	s.loops.Go(ctx, s.reapLoop)
	s.cfg.Logger.Info("streamer started", slog.String("id", s.cfg.ID), slog.Bool("listen", s.listener != nil),
		slog.Bool("replication", s.replication != nil),
		slog.Int("batch_size", s.cfg.BatchSize), slog.Duration("poll_interval", s.cfg.PollInterval))
	s.Wake()
	s.phase.CompareAndSwap(phaseStarting, phaseRunning) // a Stop meanwhile keeps phaseStopping
	return nil
}

// StopTimeout bounds Stop, however the database answers (a lock, a
// failover, a stalled network): claimRoundTimeout (10 s) for the claims
// under way when it comes, each loop's one round (claims, recounts and the
// publishing of what they leased are cut off then), giveBackTimeout (5 s)
// for giving back what they may have leased and could not publish, and
// stopSlack for a cut-off statement to end (database.DefaultCancelWait,
// 1 s) and, after the claim loops, for the wake sources to close their
// connections (the replication stream confirms its position, 2 s, and
// closes, 1 s; the LISTEN connection closes within 1 s). A program that
// stops the streamer on SIGTERM (inlet streamer) needs a grace period
// before SIGKILL longer than this plus its own stop.
const StopTimeout = claimRoundTimeout + giveBackTimeout + stopSlack

// stopSlack is the part of StopTimeout past the claims and give-backs.
const stopSlack = 5 * time.Second

// Stop ends the loops and waits for the claim round each claim loop has
// under way to finish and publish what it leased. No claim loop starts
// another round from its start, and what a round still waits for in the database
// is cut off claimRoundTimeout after it (a claim started before it ends by
// its own deadline, claimRoundTimeout, anyway), and its give-backs of what
// it leased but could not publish giveBackTimeout after that, so Stop
// returns within StopTimeout (20 s) even when the database does not answer
// at all (review helper-311: a claim apart waited without a deadline, and
// Stop with it). Jobs it leased stay leased until consumers report or the
// lease expires; nothing is lost (a lease a cut-off claim may have
// committed is given back, or else returned by the reaper). From its start
// Healthy reports an error: the streamer claims nothing more. A stopped
// streamer is not started again.
func (s *Streamer) Stop() {
	s.phase.Store(phaseStopping)
	s.halt()
	claims := time.AfterFunc(claimRoundTimeout, func() { s.cutClaims() })
	giveBacks := time.AfterFunc(claimRoundTimeout+giveBackTimeout, func() { s.cutGiveBacks() })
	s.loops.Stop()
	claims.Stop()
	giveBacks.Stop()
}

// cutBy returns ctx, ended too when cut ends (claimsCut, giveBacksCut):
// work that runs to its own deadline rather than Stop's is still cut off
// at Stop's.
func cutBy(ctx, cut context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(cut, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

func (s *Streamer) pollLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.pollWakeups.Add(1)
			s.fullClaimDue.Store(true)
			s.Wake()
		}
	}
}

// claimLoop runs round on every wake-up from wake, until round reports
// that nothing more is due (a backlog drains at full speed), backing off
// after an error. While jobs are arriving it calls wakeUp FollowUp later,
// instead of waiting for the next NOTIFY (debounced to one per 2ms) or
// poll, until FollowUpFor has passed without a round leasing any. after
// (when not nil) runs after each wake-up's rounds. The claim loop and the
// loops that claim handlers apart (apart.go) are each one.
func (s *Streamer) claimLoop(ctx context.Context, wake <-chan struct{}, wakeUp func(),
	round func(context.Context) (leased int, more bool, err error), after func()) {
	// Every claim loop ends its round when Stop begins, not when Stop gets
	// to it (it stops the loops one at a time): one still running a round
	// then started another while Stop waited for the others, and Stop took
	// the rounds' sum (review helper-311).
	ctx, cancel := cutBy(ctx, s.stopped)
	defer cancel()
	backoff := 100 * time.Millisecond
	var lastLeased time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
		leased := 0
		for ctx.Err() == nil {
			n, more, err := round(ctx)
			leased += n
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.cfg.Logger.Warn("claim failed; retrying", slog.String("error", err.Error()), slog.Duration("retry_in", backoff))
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, 5*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
			if !more {
				break
			}
		}
		if leased > 0 {
			lastLeased = time.Now()
		}
		if s.cfg.FollowUp > 0 && !lastLeased.IsZero() && (leased > 0 || time.Since(lastLeased) < s.cfg.FollowUpFor) {
			time.AfterFunc(s.cfg.FollowUp, wakeUp)
		}
		if after != nil {
			after()
		}
	}
}

// mainRound is the claim loop's round: one claimRound, and more is due
// when it came back full.
func (s *Streamer) mainRound(ctx context.Context) (int, bool, error) {
	n, err := s.claimRound(ctx)
	return n, n >= s.cfg.BatchSize, err
}

// wakeMain asks the claim loop alone for a round now. It never blocks.
func (s *Streamer) wakeMain() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// claimRoundTimeout bounds one claim round that Stop waits for (the main
// claim's; each claim apart's statement, each recount and each round's
// publish).
const claimRoundTimeout = 10 * time.Second

// claimRound runs one claimMain to its end even if Stop comes meanwhile
// (within claimRoundTimeout, and no later than claimRoundTimeout after
// Stop: claimsCut). Cancelling the claim would not undo it: the
// server may run a statement it has received after its client gave up and
// commit the leases, which nobody would then publish; they would wait a
// whole lease for the reaper (seen in TestReplicationResumesFromConfirmedPosition
// under load: a stopped streamer's claim leased jobs inserted after Stop
// returned). A claim that fails all the same (its deadline, a lost
// connection) gives back what it may have leased (giveBackUnseen).
func (s *Streamer) claimRound(ctx context.Context) (int, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimRoundTimeout)
	defer cancel()
	rctx, uncut := cutBy(rctx, s.claimsCut)
	defer uncut()
	return s.claimMain(rctx)
}

var tracer = tracing.Tracer("streamer")

// ClaimOnce leases one batch of due jobs and publishes them; it returns how
// many it leased. The lease commits before anything is published, so a crash
// in between leaves leased jobs that the reaper returns. It runs what each
// of the claim loops runs, once: the claim of every handler not claimed
// apart, then the limited handlers', then the ordered handlers' (apart.go).
func (s *Streamer) ClaimOnce(ctx context.Context) (int, error) {
	n, err := s.claimMain(ctx)
	if err != nil {
		return n, err
	}
	for _, g := range s.apart {
		m, _, err := s.claimApart(ctx, nil, g, nil)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// claimMain leases one batch of due jobs of the handlers not claimed apart
// (nor at their in-flight limit, nor without a live consumer) and publishes
// them.
func (s *Streamer) claimMain(ctx context.Context) (int, error) {
	full, _, err := s.inFlight.atLimit(ctx, s.cfg.Pool)
	if err != nil {
		return 0, fmt.Errorf("claim jobs: %w", err)
	}
	full = append(full, s.holds.held(time.Now())...)
	s.claims.Add(1)
	started := time.Now()
	window := s.claimWindow(started)
	var rows []queries.ClaimJobsRow
	var cb pgx.Batch
	cb.Queue(asyncCommit)
	// ClaimJobs's parameters in the order sqlc numbered them
	// (queries.Queries.ClaimJobs).
	queueRows(&cb, &rows, queries.ClaimJobs, full, int64(s.cfg.BatchSize), s.cfg.ID, s.cfg.LeaseDuration, window)
	cb.Queue(syncIfKeyed)
	err = s.cfg.Pool.SendBatch(ctx, &cb).Close()
	if err != nil {
		if window == nil {
			s.fullClaimDue.Store(true) // the next claim tries again
		}
		// The loops apart lease the handlers this claim passed over.
		s.giveBackUnseen(ctx, func(h string) bool { return !slices.Contains(full, h) })
		return 0, fmt.Errorf("claim jobs: %w", err)
	}
	if window == nil {
		s.fullClaims.Add(1)
		s.lastFullClaim.Store(started.UnixNano())
		if len(rows) >= s.cfg.BatchSize {
			// A backlog of older jobs (a replay, a catch-up) drains at full
			// speed: the claims go on over every partition until one comes
			// back short.
			s.fullClaimDue.Store(true)
		}
	}
	s.seen(rows)
	rows = s.beyondFloor(ctx, rows)
	var b leaseBatch
	for _, j := range rows {
		b.add(s, j)
	}
	return s.publishBatch(ctx, &b)
}

// beyondFloor gives back, unpublished, the leases ClaimJobs took of a
// handler whose pace is not read yet (its first claim since this streamer
// started, or its first at all) beyond the room its floor leaves: ClaimJobs
// leases up to a batch of any handler, and a slow handler's batch would wait
// in the bus past its lease. Given back, they are pending again at once and
// their attempts do not count. It returns the rows kept.
func (s *Streamer) beyondFloor(ctx context.Context, rows []queries.ClaimJobsRow) []queries.ClaimJobsRow {
	room := map[string]int{}
	kept := rows[:0:0]
	var back queries.ReleaseJobsParams
	for _, j := range rows {
		r, ok := room[j.Handler]
		if !ok {
			if r, ok = s.inFlight.floorRoom(j.Handler); !ok {
				r = len(rows) // paced already: no bound here
			}
		}
		if r > 0 {
			room[j.Handler] = r - 1
			kept = append(kept, j)
			continue
		}
		room[j.Handler] = 0
		back.JobIds = append(back.JobIds, j.ID)
		back.Attempts = append(back.Attempts, j.AttemptCount)
		back.LeasedAt = append(back.LeasedAt, j.AttemptedAt)
	}
	if len(back.JobIds) == 0 {
		return rows
	}
	if err := s.releaseLeases(ctx, back); err != nil {
		s.cfg.Logger.Warn("give back leases beyond a new handler's floor failed; publishing them", slog.Int("jobs", len(back.JobIds)),
			slog.String("error", err.Error()))
		return rows
	}
	return kept
}

// asyncCommit goes first in the main claim's pipeline: PostgreSQL runs the
// statements of a pipeline up to its Sync in one implicit transaction, and
// this setting (local to it) lets the claim commit without waiting for its
// WAL to reach the disk, which took most of a claim's round trip (about
// 0.7 of 1.5 ms at 1,000 webhooks/s on the bench machine).
//
// A lease of the main claim is the one thing Inlet writes that may be lost:
// if PostgreSQL crashes (or fails over) within the moments before the WAL
// writer flushes it (at most 3 × wal_writer_delay, 600 ms by default), the
// claim is undone and its jobs are due again with their attempt not
// counted, as if the streamer had crashed before claiming. Every outcome,
// extension and transactional handler's commit is synchronous and flushes
// the WAL up to itself, which holds the claim it was fenced on; a consumer
// still running the lost attempt holds a token (attempt number and claim
// time) that the next claim of the job does not give again, so its outcome
// is fenced out and the job runs again, once more (at-least-once, as after
// any lost lease). TestCrashLosesOnlyAsyncLeases proves it with a crash.
//
// What a running attempt holds beyond its own job must not be undone under
// it: the claims of ordered handlers (a key: the next job of the key would
// run beside it, review helper-99) and of limited handlers (a slot of the
// limits) commit synchronously, in their loops apart (apart.go), and so
// does a main claim that leased a keyed job (syncIfKeyed).
const asyncCommit = `SELECT pg_catalog.set_config('synchronous_commit', 'off', true)`

// syncIfKeyed ends the main claim's pipeline: when the claim leased a keyed
// job (its lane row in order_lanes written by this transaction, as
// pg_stat_xact_user_tables counts), the commit is synchronous after all. The
// main claim passes over the ordered handlers the streamer knows of, but a
// handler ordered since its last look (LeasedRecount) is claimed here.
const syncIfKeyed = `SELECT pg_catalog.set_config('synchronous_commit', 'on', true)
FROM pg_catalog.pg_stat_xact_user_tables
WHERE relid = 'webhook_ingress.order_lanes'::regclass AND n_tup_ins + n_tup_upd > 0`

// queueRows queues the query sql on b and collects its rows into rows by
// position (T's fields in the order of the query's columns, as sqlc makes
// them).
func queueRows[T any](b *pgx.Batch, rows *[]T, sql string, args ...any) {
	b.Queue(sql, args...).Query(func(r pgx.Rows) error {
		var err error
		*rows, err = pgx.CollectRows(r, pgx.RowToStructByPos[T])
		return err
	})
}

// leaseBatch gathers the references of one round's leases.
type leaseBatch struct {
	refs   []bus.Ref
	traces []string // each job's trace_parent
}

func (b *leaseBatch) add(s *Streamer, j queries.ClaimJobsRow) {
	b.refs = append(b.refs, bus.Ref{JobID: j.ID, EventID: j.EventID, Handler: j.Handler, Provider: j.Provider, EventType: j.EventType,
		Attempt: int(j.AttemptCount), LeaseExpiresAt: j.LeaseExpiresAt, EventReceivedAt: j.EventReceivedAt, LeasedAt: j.AttemptedAt})
	b.traces = append(b.traces, j.TraceParent)
	s.inFlight.leased(j.Handler, 1)
}

// publishBatch publishes b and returns how many jobs it leased; ErrPublish
// when none of its references could be published (their leases given
// back). The handlers whose topics refused are held out of the next claims
// (publishHolds), so a round that published the other handlers' references
// is no failure: the loop does not back off for them.
func (s *Streamer) publishBatch(ctx context.Context, b *leaseBatch) (int, error) {
	s.batchSizes.Observe(float64(len(b.refs)))
	if len(b.refs) == 0 {
		return 0, nil
	}
	s.claimed.Add(int64(len(b.refs)))
	leased := len(b.refs)
	s.paceRoutes(ctx, b)
	if len(b.refs) == 0 {
		return leased, nil // every lease deferred: the claims walk on past them
	}
	if failed := s.publish(ctx, b.refs, b.traces); failed == len(b.refs) {
		// The bus is away: say so, so the loop backs off too.
		return leased, fmt.Errorf("publish %d of %d references: %w", failed, len(b.refs), ErrPublish)
	}
	return leased, nil
}

// paceRoutes holds each topic of a handler shared by consumer roles to what
// that role's consumers start within half a lease (inFlight.topicRoom): the
// claims lease a handler at its pace, which is its roles' together, and a
// slow role's references beyond that waited in the bus past their leases,
// which the reaper counted as attempts, dead-lettering jobs its handler
// never saw (review helper-173). The references beyond a topic's room are
// given back unpublished (their attempts do not count), each due again when
// its role is expected to have room for it: one role's job time after the
// topic's last deferred one (at most a lease from now:
// inFlight.deferLimit), so the claims reach the other roles' jobs behind a
// slow role's backlog. Each goes to DeferJobs as a delay, which it adds to
// the database's now(): the due time is on the clock the claims compare it
// with, whatever this host's clock says (review helper-270). If the
// give-back fails, everything is published as before.
func (s *Streamer) paceRoutes(ctx context.Context, b *leaseBatch) {
	rt := s.inFlight.routeTable()
	if len(rt) == 0 {
		return
	}
	type topicState struct {
		room int
		per  time.Duration
	}
	topics := map[string]*topicState{}
	topicOf := make([]string, len(b.refs)) // "" for a handler not routed
	deferred := make([]bool, len(b.refs))
	var back queries.DeferJobsParams
	now := time.Now() // for the deferral chains, on the monotonic clock: DeferJobs gets delays
	for i, r := range b.refs {
		if len(rt[r.Handler]) == 0 {
			continue
		}
		t := rt.topicOf(r.Handler, r.Provider, r.EventType)
		topicOf[i] = t
		st := topics[t]
		if st == nil {
			st = &topicState{}
			st.room, st.per = s.inFlight.topicRoom(t)
			topics[t] = st
		}
		if st.room > 0 {
			st.room--
			continue
		}
		deferred[i] = true
		back.JobIds = append(back.JobIds, r.JobID)
		back.Attempts = append(back.Attempts, int32(r.Attempt)) //nolint:gosec // G115: Ref.Attempt is jobs.attempt_count, an int4 the claim read
		back.LeasedAt = append(back.LeasedAt, r.LeasedAt)
		back.Delays = append(back.Delays, s.inFlight.topicDefer(t, st.per, now))
	}
	if len(back.JobIds) > 0 {
		rctx, cancel := s.giveBackContext(ctx)
		back.LeaseHolder = s.cfg.ID
		err := queries.New(s.cfg.Pool).DeferJobs(rctx, back)
		cancel()
		if err != nil {
			s.cfg.Logger.Warn("defer leases beyond a shared handler's role's pace failed; publishing them",
				slog.Int("jobs", len(back.JobIds)), slog.String("error", err.Error()))
			clear(deferred)
		} else {
			s.deferred.Add(int64(len(back.JobIds)))
		}
	}
	kept := 0
	for i, r := range b.refs {
		switch {
		case deferred[i]:
			s.inFlight.released(r.Handler, 1)
			s.inFlight.topicDeferred(topicOf[i], r.LeasedAt)
			continue
		case topicOf[i] != "":
			s.inFlight.topicPublished(topicOf[i], r.LeasedAt)
		}
		b.refs[kept], b.traces[kept] = r, b.traces[i]
		kept++
	}
	b.refs, b.traces = b.refs[:kept], b.traces[:kept]
}

// claimLimited leases up to batch jobs of the limited handler h: LockHandlerLimits,
// then ClaimLimitedJobs on a snapshot taken once the lock is held, so it
// counts the leases the previous holder of the lock committed (see
// ClaimLimitedJobs). The two go in one batch: one round trip, and one
// transaction (PostgreSQL runs the statements of a pipeline up to its Sync
// in one implicit transaction, committed at the Sync; under READ COMMITTED
// each statement takes its own snapshot). The lock is held from the first
// statement to that commit, with no round trip in between.
//
// The wait for the lock is bounded (limitsLockTimeout): a row held longer
// (another streamer's claim of the same handler, or a consumer cut off in
// the middle of recording a failure, whose transaction holds it until the
// server notices) means nothing is claimed of h this round, without an
// error, so the loop goes on to the other limited handlers (each waited up
// to the claim's 10 s deadline behind h: review helper-87).
//
// wake is how soon a claim of h could lease more of its due jobs that its
// limits held back (LimitedWakeIn), negative when none is held back.
func (s *Streamer) claimLimited(ctx context.Context, conn *pgxpool.Conn, h string, batch int) (rows []queries.ClaimLimitedJobsRow, wake time.Duration, err error) {
	// Synchronous, unlike the main claim (asyncCommit): a running attempt
	// of a limited handler holds a slot of its limits (and a key, when the
	// handler is ordered too).
	var b pgx.Batch
	b.Queue(`SELECT pg_catalog.set_config('lock_timeout', $1, true)`, limitsLockTimeout)
	b.Queue(queries.LockHandlerLimits, h)
	// ClaimLimitedJobs's parameters in the order sqlc numbered them
	// (queries.Queries.ClaimLimitedJobs).
	queueRows(&b, &rows, queries.ClaimLimitedJobs, h, int64(batch), s.cfg.ID, s.cfg.LeaseDuration)
	var wakeIn *float64
	b.Queue(queries.LimitedWakeIn, h).QueryRow(func(r pgx.Row) error {
		err := r.Scan(&wakeIn)
		if errors.Is(err, pgx.ErrNoRows) { // no limits row: see ClaimLimitedJobs
			return nil
		}
		return err
	})
	if err := conn.SendBatch(ctx, &b).Close(); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: nothing ran
			// Another streamer holds h's row: it claims h meanwhile.
			return nil, -1, nil
		}
		return nil, -1, fmt.Errorf("claim jobs of limited handler %q: %w", h, err)
	}
	if wakeIn == nil {
		return rows, -1, nil
	}
	return rows, time.Duration(min(*wakeIn, maxLimitedWake.Seconds()) * float64(time.Second)), nil
}

// maxLimitedWake bounds how far ahead a limited handler's own wake-up is set
// (a slow rate's next token; a probe an hour away): the poll looks sooner.
const maxLimitedWake = time.Minute

// limitsLockTimeout bounds a limited claim's wait for its handler's
// handler_limits row (claimLimited).
const limitsLockTimeout = "200ms"

// seen records, per handler, the newest lease in rows, which this streamer
// publishes (or gives back when publishing fails).
func (s *Streamer) seen(rows []queries.ClaimJobsRow) {
	s.leasedMu.Lock()
	defer s.leasedMu.Unlock()
	for _, j := range rows {
		if j.AttemptedAt.After(s.leasedAt[j.Handler]) {
			s.leasedAt[j.Handler] = j.AttemptedAt
		}
	}
}

// giveBackTimeout bounds the give-back of a failed claim's leases (see
// giveBackUnseen), which Stop may wait for after the claim's own deadline,
// and each other give-back of leases not published (releaseLeases,
// DeferJobs).
const giveBackTimeout = 5 * time.Second

// giveBackContext is the context of a give-back in a round with ctx:
// giveBackTimeout, even after ctx has ended (its leases would otherwise
// wait for the reaper), and no later than claimRoundTimeout +
// giveBackTimeout after Stop (giveBacksCut): a round's several give-backs
// one after the other (beyondFloor, paceRoutes, publish) end with Stop's
// bound.
func (s *Streamer) giveBackContext(ctx context.Context) (context.Context, context.CancelFunc) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
	rctx, uncut := cutBy(rctx, s.giveBacksCut)
	return rctx, func() {
		uncut()
		cancel()
	}
}

// giveBackUnseen gives back what a failed claim may have leased, of the
// handlers covered says it claims. An error does not say the claim was
// rolled back: it commits before the streamer reads its answer, so after a
// deadline or a lost connection (or a row the client could not decode) its
// leases may be committed, and nobody would publish them. Left to the reaper
// they would wait a whole lease, and it counts an attempt when a consumer of
// the handler was alive, so a job on its last attempt would be dead-lettered
// though no handler saw it.
//
// The job ids are lost with the answer, so the leases are found by what the
// claim wrote (ReleaseUnseenJobs): this streamer's leases of each handler
// taken after the newest lease of it this process has seen from any of its
// claims (leasedAt, recorded before a reference is published; leases are
// timed by the server's clock, later for each claim), that no consumer has
// extended. Every lease this process published is at or before that mark,
// so none is given back while its handler runs; a handler without a mark (no
// lease of it seen yet in this process: just started, perhaps under the ID
// of one that published leases of it) gets nothing given back, and the
// reaper returns what the claim leased. A claim of a handler by another loop
// of this streamer still in flight (the handler lists changing between two
// loops' claims) may lose its leases to the give-back: its references then
// find their leases gone and run nothing, and the jobs are leased again. The
// claim is not run in a transaction committed after the rows are read
// instead: that would cost three round trips more on every claim, to cover
// an error that is rare. If giving back fails too (Postgres unreachable), the
// reaper returns the leases.
func (s *Streamer) giveBackUnseen(ctx context.Context, covered func(handler string) bool) {
	var handlers []string
	var after []time.Time
	s.leasedMu.Lock()
	for h, t := range s.leasedAt {
		if covered(h) {
			handlers, after = append(handlers, h), append(after, t)
		}
	}
	s.leasedMu.Unlock()
	if len(handlers) == 0 {
		return
	}
	rctx, cancel := s.giveBackContext(ctx)
	defer cancel()
	n, err := queries.New(s.cfg.Pool).ReleaseUnseenJobs(rctx, queries.ReleaseUnseenJobsParams{
		LeaseHolder: s.cfg.ID, Handlers: handlers, LeasedAfter: after})
	if err != nil {
		s.cfg.Logger.Warn("give back leases of a failed claim failed; the reaper will", slog.Any("handlers", handlers),
			slog.String("error", err.Error()))
		return
	}
	if n > 0 {
		s.cfg.Logger.Warn("gave back leases of a failed claim", slog.Any("handlers", handlers), slog.Int64("jobs", n))
	}
}

// RecentWindow is how far back a claim looks: it leases jobs of events
// received within RecentWindow of now, from the partitions that cover that
// time only (023_protocol_window), so its cost does not grow with the
// history kept. At least once per PollInterval a claim covers every
// partition instead, for jobs of older events (retries, replays, catch-up):
// those wait at most a poll interval longer, and while such claims come back
// full the next one covers every partition too, so a backlog of them drains
// at full speed.
const RecentWindow = time.Hour

// claimWindow is the window of a claim starting at now: nil (every
// partition) for the first claim after a poll tick, after a claim over every
// partition that came back full, or when the last claim over every partition
// is a PollInterval or more ago (claims outside the loop); else RecentWindow.
func (s *Streamer) claimWindow(now time.Time) *time.Duration {
	if s.fullClaimDue.Swap(false) || now.Sub(time.Unix(0, s.lastFullClaim.Load())) >= s.cfg.PollInterval {
		return nil
	}
	w := RecentWindow
	return &w
}

// limitedWake is how soon the streamer claims again after leasing jobs of a
// limited handler: the granularity of a rate limit's pacing.
const limitedWake = 50 * time.Millisecond

// ErrPublish means references could not be published; their leases were given back.
var ErrPublish = errors.New("bus refused the references; leases given back")

// contextPublisher is a Publisher that can give up when a context ends
// (natsbus).
type contextPublisher interface {
	PublishContext(ctx context.Context, topic string, msgs ...*message.Message) error
}

// publish sends refs grouped by topic, in messages of up to RefsPerMessage
// references; leases of refs that could not be published are given back at
// once (the attempt does not count). It returns how many were not published.
// A job whose event was traced gets a span in that trace, carried to the
// consumer in its reference (or, one reference per message, in the
// message's metadata).
func (s *Streamer) publish(ctx context.Context, refs []bus.Ref, traces []string) int {
	var topics []string
	byTopic := map[string][]bus.Ref{}
	bySpans := map[string][]trace.Span{}
	rt := s.inFlight.routeTable()
	for i, r := range refs {
		t := rt.topicOf(r.Handler, r.Provider, r.EventType)
		if _, ok := byTopic[t]; !ok {
			topics = append(topics, t)
		}
		if traces[i] != "" {
			sctx, span := tracer.Start(tracing.WithTraceParent(ctx, traces[i]), "inlet.streamer.publish",
				trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
					attribute.Int64("inlet.job_id", r.JobID), attribute.Int64("inlet.event_id", r.EventID),
					attribute.String("inlet.handler", r.Handler), attribute.Int("inlet.attempt", r.Attempt),
					attribute.String("messaging.destination.name", t)))
			r.TraceParent = tracing.TraceParent(sctx)
			bySpans[t] = append(bySpans[t], span)
		}
		byTopic[t] = append(byTopic[t], r)
	}
	var failed queries.ReleaseJobsParams
	// The topics' publishes share one deadline (within the main round's):
	// a bus that takes messages and acknowledges none would otherwise hold
	// the round, and Stop, for its own timeout once per topic.
	pctx, cancel := context.WithTimeout(ctx, claimRoundTimeout)
	defer cancel()
	for _, topic := range topics {
		trefs := byTopic[topic]
		msgs, err := s.messages(trefs)
		if err == nil {
			err = pctx.Err() // past the deadline: not tried, given back
		}
		if err == nil {
			if cp, ok := s.cfg.Publisher.(contextPublisher); ok {
				err = cp.PublishContext(pctx, topic, msgs...)
			} else {
				err = s.cfg.Publisher.Publish(topic, msgs...)
			}
		}
		for _, span := range bySpans[topic] {
			if err != nil {
				span.SetStatus(codes.Error, "bus refused the reference; lease given back")
			}
			span.End()
		}
		if err != nil {
			s.lastRefused.Store(time.Now().UnixNano())
			if s.refused.Load() == nil {
				s.refused.CompareAndSwap(nil, &publishRefusal{since: time.Now(), topic: topic, err: err})
			}
			s.holds.refused(trefs[0].Handler, time.Now())
			s.cfg.Logger.Warn("publish failed; giving the leases back", slog.String("topic", topic),
				slog.Int("jobs", len(trefs)), slog.String("error", err.Error()))
			for _, r := range trefs {
				failed.JobIds = append(failed.JobIds, r.JobID)
				failed.Attempts = append(failed.Attempts, int32(r.Attempt)) //nolint:gosec // G115: Ref.Attempt is jobs.attempt_count, an int4 the claim read
				failed.LeasedAt = append(failed.LeasedAt, r.LeasedAt)
			}
			continue
		}
		if s.refused.Load() != nil {
			s.refused.Store(nil)
		}
		s.holds.published(trefs[0].Handler)
		s.published.Add(int64(len(trefs)))
	}
	n := len(failed.JobIds)
	if n == 0 {
		return 0
	}
	s.publishFailed.Add(int64(n))
	if err := s.releaseLeases(ctx, failed); err != nil {
		s.cfg.Logger.Warn("give back leases failed; the reaper will", slog.Int("jobs", n), slog.String("error", err.Error()))
	}
	return n
}

// releaseLeases gives back this streamer's leases named in p, unpublished
// (ReleaseJobs: pending again at once, the attempt not counted), within
// giveBackTimeout even after ctx has ended (giveBackContext).
func (s *Streamer) releaseLeases(ctx context.Context, p queries.ReleaseJobsParams) error {
	rctx, cancel := s.giveBackContext(ctx)
	defer cancel()
	p.LeaseHolder = s.cfg.ID
	return queries.New(s.cfg.Pool).ReleaseJobs(rctx, p)
}

// messages encodes one topic's refs in claim order: one message per
// reference when RefsPerMessage is 1, else messages of at most
// RefsPerMessage references, as even in size as can be (100 at 32 per
// message: 25, 25, 25, 25), so replicas sharing the topic get like shares.
func (s *Streamer) messages(refs []bus.Ref) ([]*message.Message, error) {
	per := s.cfg.RefsPerMessage
	if per == 1 {
		msgs := make([]*message.Message, 0, len(refs))
		for _, r := range refs {
			tp := r.TraceParent
			r.TraceParent = ""
			msg, err := bus.NewMessage(r)
			if err != nil {
				return nil, err
			}
			tracing.SetTraceParent(msg, tp)
			msgs = append(msgs, msg)
		}
		return msgs, nil
	}
	n := (len(refs) + per - 1) / per
	msgs := make([]*message.Message, 0, n)
	for i := range n {
		msg, err := bus.NewBatchMessage(refs[i*len(refs)/n : (i+1)*len(refs)/n])
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, msg)
	}
	return msgs, nil
}

func (s *Streamer) reapLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for ctx.Err() == nil {
			n, err := s.reapBounded(ctx)
			if err != nil {
				if ctx.Err() == nil {
					s.cfg.Logger.Warn("reap expired leases failed", slog.String("error", err.Error()))
				}
				break
			}
			if n < reapBatch {
				break
			}
		}
	}
}

const reapBatch = 1000

// reapBounded is the reaper's ReapOnce, within claimRoundTimeout: a
// statement the database does not answer (a lock on jobs, a stalled
// connection) fails and is tried again at the next tick, instead of
// holding the reaper until the connection breaks. Stop ends it at once
// (the loop's context).
func (s *Streamer) reapBounded(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, claimRoundTimeout)
	defer cancel()
	return s.ReapOnce(ctx)
}

// ReapOnce returns up to 1000 expired leases to pending (or dead_letter after
// the last attempt) and reports how many it handled. Those whose attempt ran
// count against their handlers' circuit breakers.
func (s *Streamer) ReapOnce(ctx context.Context) (int, error) {
	rows, err := queries.New(s.cfg.Pool).ReapExpiredLeases(ctx, reapBatch)
	if err != nil {
		return 0, fmt.Errorf("reap expired leases: %w", err)
	}
	var n, dead int
	byHandler := map[string]int{}
	opened := map[string]bool{}
	rt := s.inFlight.routeTable()
	for _, r := range rows {
		n++
		byHandler[r.Handler]++
		if r.CircuitOpened && !opened[r.Handler] {
			// The attempts that ran and expired count against the
			// handler's breaker (073): logged once, as a consumer logs
			// the circuit its failure opened.
			opened[r.Handler] = true
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "circuit opened: the handler's jobs wait, one probe per interval",
				slog.String("handler", r.Handler), slog.String("cause", "lease_expired"))
		}
		if len(rt[r.Handler]) > 0 {
			s.inFlight.topicExpired(rt.topicOf(r.Handler, r.Provider, r.EventType))
		}
		if r.Status == "dead_letter" {
			dead++
		}
	}
	for h, m := range byHandler {
		s.inFlight.expired(h, m)
	}
	if n > 0 {
		s.reaped.Add(int64(n - dead))
		s.deadLettered.Add(int64(dead))
		s.cfg.Logger.Info("expired leases reaped", slog.Int("pending_again", n-dead), slog.Int("dead_letter", dead))
		if n > dead {
			s.Wake()
		}
	}
	return n, nil
}
