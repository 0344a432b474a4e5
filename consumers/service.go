package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Service runs a set of handlers: it registers their subscriptions, takes
// job references off their topics and records each attempt's outcome.
type Service struct {
	cfg     Config
	logger  *slog.Logger
	runners []*runner
	tracer  trace.Tracer

	mu    sync.Mutex
	state int // stateNew, stateStarted, stateStopped
	// stopped is closed when the first Stop has finished, stopErr its
	// result: a later Stop waits for it (review helper-130: it returned nil
	// while the first was still draining, and its caller closed the pool).
	stopped chan struct{}
	stopErr error
	// phase is where Start and Stop are (phaseNew, …), for Healthy: state
	// is under mu, which Start holds while it registers and subscribes, so
	// a readiness probe cannot wait for it.
	phase atomic.Int32

	subCancel  context.CancelFunc      // ends the subscriptions
	workCtx    context.Context         // parent of every attempt
	workCancel context.CancelCauseFunc // forced shutdown of attempts
	readers    sync.WaitGroup          // one per handler topic
	attempts   sync.WaitGroup          // one per in-flight attempt
	inFlight   atomic.Int64            // attempts holding a slot
	lost       atomic.Pointer[string]  // handler whose subscription the transport closed
	// completions batches successful outcomes; nil when CompleteBatch < 0.
	completions *completions
	// takes batches reading attempts; nil when TakeBatch < 0.
	takes *takes
	// reads, readStatements, completed and completeStatements count the
	// attempts read and completed and the statements that did it (Stats).
	reads, readStatements, completed, completeStatements atomic.Int64
	// aliveCancel ends the liveness loop, which closes aliveDone.
	aliveCancel context.CancelFunc
	aliveDone   chan struct{}
	// draining is set once Stop has ended the subscriptions (sayDraining);
	// aliveMu orders it with the liveness writes: a channel of one, so a
	// take waits for it no longer than its context (lockAlive).
	aliveMu  chan struct{}
	draining bool
	// aliveMark is what the last successful liveness write covers: leases
	// that began up to its seen_at (the database's time), of the handlers
	// it did not leave out (the bus not delivering to them). A handler runs
	// on a lease it does not cover only after one more write, or with the
	// lease extended (sayAliveSince). Written under aliveMu, read without it.
	aliveMark atomic.Pointer[aliveMark]
	// aliveFailedAt is when (this process's clock, unix ns) the last
	// liveness write failed, 0 after a success: takes meanwhile do not
	// each wait for a write of their own (sayAliveSince).
	aliveFailedAt atomic.Int64
	// busGap is what the bus was not delivering when the last liveness
	// write was made or skipped (busReach: nothing, the connection down, or
	// some handlers' subscriptions not consuming; nil before the first).
	// While it leaves something out the alive loop asks the bus every
	// busRecheck and writes as soon as that changed. Written under aliveMu
	// (noteBus), which signals busGapSet (one slot) when it comes to leave
	// something out, so the loop also learns it from a take's write.
	busGap    atomic.Pointer[busReach]
	busGapSet chan struct{}
	// topicHandler is the handler of each topic the service subscribed to
	// (set by Start before anything reads it), to tell which handlers a
	// subscription not consuming leaves out (busReach).
	topicHandler map[string]string
	// refused are the handlers, comma-joined, the last liveness write left
	// out because the role is no longer given them (logged when it changes);
	// under aliveMu.
	refused string
	// scoped: the service runs as a scoped consumer role (ConsumerDBRole,
	// read at Start), whose liveness writes only the handlers it is still
	// given (ConsumerAliveScoped).
	scoped bool
	// running holds the attempts (runKey) running in this process, so a
	// reference the bus delivers twice to one process runs once.
	running sync.Map
	// breakers are the handlers with a circuit breaker: their outcomes move
	// handler_limits' failure count and circuit (circuit.go).
	breakers map[string]*breaker
	// resets are the circuit resets running after successes (succeeded).
	resets sync.WaitGroup
	// txSlots caps the transactional handlers' open transactions (see
	// txReserve); nil when no handler has a TxFunc.
	txSlots chan struct{}
	// txWait bounds one attempt's wait for a txSlots place: the longest an
	// honest queue takes (see txWaitBound).
	txWait time.Duration
	// txHeld are the txSlots places each handler holds, each with when it
	// was taken, so a wait past txWait can tell whether its own handler
	// held one past what an attempt may (see runTx).
	txHeldMu sync.Mutex
	txHeld   map[string]map[*txHold]struct{}
	// txDefaultAboveRC: the pool's transactions run REPEATABLE READ or
	// SERIALIZABLE by default (read at Start when a handler has a TxFunc).
	txDefaultAboveRC bool
}

// Stats are counters since Start, for metrics, tests and benchmarks.
type Stats struct {
	Reads              int64 // attempts read (their lease current)
	ReadStatements     int64 // FetchJobs statements run
	Completed          int64 // successes recorded
	CompleteStatements int64 // CompleteJobs statements run
}

// Stats returns the counters.
func (s *Service) Stats() Stats {
	return Stats{Reads: s.reads.Load(), ReadStatements: s.readStatements.Load(),
		Completed: s.completed.Load(), CompleteStatements: s.completeStatements.Load()}
}

// runKey names one attempt: its job and lease token.
type runKey struct {
	job      int64
	attempt  int
	leasedAt int64
}

const (
	stateNew = iota
	stateStarted
	stateStopped
)

// The phases Healthy reports: the service is ready only while running.
const (
	phaseNew      int32 = iota // Start not called yet, or it failed
	phaseStarting              // Start registering and subscribing
	phaseRunning               // Start returned: every handler's topic subscribed
	phaseStopping              // Stop begun: reading nothing more, draining
	phaseStopped               // Stop done, or called before Start
)

// errShutdown is the cause of attempt contexts cancelled because Stop's
// deadline passed before they finished.
var errShutdown = errors.New("consumer service stopped before the attempt finished")

// runner is one handler with its concurrency slots.
type runner struct {
	h     Handler
	slots chan struct{}
	// hangLimit is how long past its Timeout an honest attempt of the
	// handler may hold its slot (slotHangLimit), and waitBound how long a
	// reference waits for a slot before it may be given back (the Timeout
	// and hangLimit: slotWaitBound).
	hangLimit, waitBound time.Duration
	// held are the attempts holding a slot, from start until their handler
	// returns, so that a reference waiting for one can tell slots that free
	// from slots held by handlers that ignore their context (slotsHung).
	heldMu sync.Mutex
	held   map[*slotHold]struct{}
	// pace paces the starts of a handler with a RateLimit in this process
	// (RateLimit, Burst): the streamers lease at the rate, but references
	// leased while every slot was busy would otherwise all start at once
	// when slots free (review helper-331). A token is taken only right
	// before the handler is called: after its event was read, and for a
	// transactional handler with its transaction slot held (takeToken,
	// takeTxSlot; review helper-338). nil without one.
	pace *rate.Limiter
	// paceTurn is held by the one attempt of the handler waiting for a
	// token of pace (awaitToken): its attempts wait for their tokens in
	// turn, in the order they came, each for at most a token's interval
	// (its tokens are taken by no one else, or, for a transactional
	// handler, by an attempt that already holds a transaction slot). nil
	// without pace.
	paceTurn chan struct{}
}

// slotHold is one slot held by an attempt: its handler's deadline, unix ns
// (deadlineNanos), 0 until the handler is called.
type slotHold struct{ deadline atomic.Int64 }

// hold records a slot taken by an attempt; release gives the record up
// (before the slot itself is freed).
func (r *runner) hold() (h *slotHold, release func()) {
	h = &slotHold{}
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	if r.held == nil {
		r.held = map[*slotHold]struct{}{}
	}
	r.held[h] = struct{}{}
	return h, func() {
		r.heldMu.Lock()
		defer r.heldMu.Unlock()
		delete(r.held, h)
	}
}

// slotsHung reports whether every slot of r is held by an attempt whose
// handler was called and has run more than hangLimit past its Timeout: an
// attempt the SDK has given up on (extendLease no longer extends its lease,
// and the reaper takes its job back), which frees its slot only when its
// handler returns, if ever. A slot free, being taken, or held by an attempt
// still reading its event, waiting for a transaction slot or within its
// Timeout and hangLimit, frees in its time: a slow handler that finishes is
// never taken for a hung one.
func (r *runner) slotsHung(now time.Time) bool {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	if len(r.held) < cap(r.slots) {
		return false
	}
	for h := range r.held {
		d := h.deadline.Load()
		if d == 0 || !now.After(time.Unix(0, d).Add(r.hangLimit)) {
			return false
		}
	}
	return true
}

// slotHangLimit is how long past its Timeout an honest attempt of h holds
// its slot: a LeaseExtend, the limit past which extendLease gives the lease
// of a handler still running up (it ignores its context); for a
// transactional handler its completion, commit and rollback too, as
// txHoldLimit allows.
func slotHangLimit(h Handler, leaseExtend time.Duration) time.Duration {
	if h.TxFunc != nil {
		return satAdd(recordTimeout+giveBackTimeout, leaseExtend)
	}
	return leaseExtend
}

// slotWaitBound is the least time a reference of h waits for a slot before
// it may be given back (waitForSlot): as long as an honest attempt holds
// one, its Timeout and slotHangLimit. A reference waiting when the last
// slot hung has waited about that long by then; one delivered to a process
// whose slots are all hung waits that long too, so a job given back comes
// round to it at most once per bound, never spinning between the streamer
// and a hung process.
func slotWaitBound(h Handler, leaseExtend time.Duration) time.Duration {
	return satAdd(h.Timeout, slotHangLimit(h, leaseExtend))
}

// New checks cfg (after WithDefaults) and returns a service ready to Start.
func New(cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("consumers config: %w", err)
	}
	s := &Service{
		cfg:       cfg,
		logger:    cfg.Logger.With(slog.String("component", "consumers")),
		aliveMu:   make(chan struct{}, 1),
		busGapSet: make(chan struct{}, 1),
	}
	for _, h := range cfg.Handlers {
		r := &runner{h: h, slots: make(chan struct{}, h.Concurrency),
			hangLimit: slotHangLimit(h, cfg.LeaseExtend), waitBound: slotWaitBound(h, cfg.LeaseExtend)}
		if h.RateLimit > 0 {
			r.pace = rate.NewLimiter(rate.Limit(h.RateLimit), h.Burst)
			r.paceTurn = make(chan struct{}, 1)
		}
		s.runners = append(s.runners, r)
		if h.BreakerFailures > 0 {
			if s.breakers == nil {
				s.breakers = map[string]*breaker{}
			}
			s.breakers[h.Name] = &breaker{}
		}
	}
	s.txSlots = txSlots(cfg)
	s.txWait = txWaitBound(cfg, cap(s.txSlots))
	s.tracer = cfg.TracerProvider.Tracer(tracerName)
	return s, nil
}

// txReserve is how many of the pool's connections transactional handlers
// leave to the service's own statements: the reads of events, lease
// extensions and liveness, and the outcomes. Each open handler transaction
// holds a connection until it commits; with every connection held, another
// handler's read and the running attempts' own lease extensions would wait
// for one, so one slow transactional handler delayed every other handler
// and let its own leases expire (its jobs retried, and dead-lettered, while
// still running).
const txReserve = 2

// txWaitBound is how long an attempt may wait for a place among slots
// handler transactions: every transactional attempt of the process ahead of
// it, slots at a time, each holding its place for at most its Timeout, its
// completion and commit (recordTimeout, after the Timeout: review
// helper-133), a rollback's giveBackTimeout and a LeaseExtend. A wait longer
// than that is behind a transaction that does not end: the attempt's lease
// is then given back, uncounted, its handler not run (review helper-137:
// it failed, class transaction, spending an attempt of a handler that may
// not be the one at fault), rather than holding its job, its lease
// extended, for good (review helper-132). The sums and products saturate:
// a huge Timeout, Concurrency or LeaseExtend made it wrap negative, and
// every transactional attempt then gave up at once (review helper-137).
func txWaitBound(cfg Config, slots int) time.Duration {
	want, longest := txConcurrency(cfg), time.Duration(0)
	for _, h := range cfg.Handlers {
		if h.TxFunc != nil {
			longest = max(longest, h.Timeout)
		}
	}
	if want == 0 || slots <= 0 {
		return 0
	}
	rounds := (want-1)/int64(slots) + 1
	return satMul(txHoldLimit(longest, cfg.LeaseExtend), rounds)
}

// txConcurrency is the transactional handlers' Concurrency summed (at most
// math.MaxInt64).
func txConcurrency(cfg Config) int64 {
	var want int64
	for _, h := range cfg.Handlers {
		if h.TxFunc != nil {
			c := int64(h.Concurrency)
			if want > math.MaxInt64-c {
				return math.MaxInt64
			}
			want += c
		}
	}
	return want
}

// txSlots returns the semaphore of handler transactions: the pool's size
// less txReserve, at least one.
func txSlots(cfg Config) chan struct{} {
	want := txConcurrency(cfg)
	if want == 0 {
		return nil
	}
	n := max(int(cfg.Pool.Config().MaxConns)-txReserve, 1)
	if want > int64(n) {
		cfg.Logger.Info("transactional handlers share the pool's connections: the rest of their attempts wait for one",
			slog.String("component", "consumers"), slog.Int("open_transactions_at_most", n),
			slog.Int("pool_max_conns", int(cfg.Pool.Config().MaxConns)), slog.Int64("transactional_concurrency", want))
	}
	return make(chan struct{}, n)
}

// Start registers the subscriptions (see Register), subscribes to every
// handler's topic and starts processing; it returns once subscribed. ctx
// bounds registering and subscribing only (its values reach the handlers):
// the service then runs until Stop. A service starts once. Healthy reports
// an error until Start has returned nil.
func (s *Service) Start(ctx context.Context) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case stateStarted:
		return errors.New("start consumers: the service was already started")
	case stateStopped:
		return errors.New("start consumers: the service was stopped; a service starts once (make a new one with New)")
	}
	s.phase.Store(phaseStarting)
	defer func() {
		if err != nil {
			s.phase.Store(phaseNew) // it may be started again
		}
	}()
	if err := s.Register(ctx); err != nil {
		return fmt.Errorf("start consumers: %w", err)
	}
	if s.cfg.anyTx() {
		// The role's or database's default isolation, which transactional
		// handlers without TxOptions run at (runTx).
		var level string
		if err := s.cfg.Pool.QueryRow(ctx, `SELECT current_setting('default_transaction_isolation')`).Scan(&level); err != nil {
			return fmt.Errorf("start consumers: read default_transaction_isolation: %w", err)
		}
		s.txDefaultAboveRC = level == "repeatable read" || level == "serializable"
	}

	// A service's consumers also read their handlers' topics for its role
	// ('' for an unrestricted one): a handler shared by roles of different
	// scopes has its jobs published there, each on the topic of a role that
	// may take it (ListJobRoutes). On the handler's own topic alone, either
	// role's consumers got the other's references, could not see their
	// jobs, and left the leases to expire as spent attempts (review
	// helper-163).
	role, err := queries.New(s.cfg.Pool).ConsumerDBRole(ctx)
	if err != nil {
		return fmt.Errorf("start consumers: read the database role: %w", err)
	}
	s.scoped = role != ""
	base := context.WithoutCancel(ctx)
	subCtx, subCancel := context.WithCancel(base)
	type subscription struct {
		r  *runner
		ch <-chan *message.Message
	}
	var subs []subscription
	s.topicHandler = make(map[string]string, 2*len(s.runners))
	for _, r := range s.runners {
		for _, topic := range []string{bus.Topic(r.h.Name), bus.RoleTopic(r.h.Name, role)} {
			s.topicHandler[topic] = r.h.Name
			ch, err := s.cfg.Subscriber.Subscribe(subCtx, topic)
			if err != nil {
				subCancel()
				return fmt.Errorf("start consumers: subscribe to topic %s of handler %q: %w", topic, r.h.Name, err)
			}
			subs = append(subs, subscription{r: r, ch: ch})
		}
	}
	s.subCancel = subCancel
	s.workCtx, s.workCancel = context.WithCancelCause(base)
	// Streamers lease nothing of a handler whose known consumers are all
	// quiet: say so before the first reference is awaited.
	if err := s.sayAlive(ctx); err != nil && !errors.Is(err, errBusDown) { // the bus down was logged
		s.logger.LogAttrs(ctx, slog.LevelWarn, "record consumer liveness failed", slog.String("error", err.Error()))
	}
	aliveCtx, aliveCancel := context.WithCancel(base)
	s.aliveCancel = aliveCancel
	s.aliveDone = make(chan struct{})
	go func() {
		defer close(s.aliveDone)
		s.aliveLoop(aliveCtx)
	}()
	if s.cfg.CompleteBatch > 0 {
		s.completions = s.newCompletions()
	}
	if s.cfg.TakeBatch > 0 {
		s.takes = s.newTakes()
	}
	for _, sub := range subs {
		s.readers.Go(func() { s.read(subCtx, sub.r, sub.ch) })
	}
	s.state = stateStarted
	s.logger.LogAttrs(ctx, slog.LevelInfo, "consumers started",
		slog.Int("handlers", len(s.runners)), slog.String("worker_id", s.cfg.WorkerID))
	s.phase.Store(phaseRunning)
	return nil
}

// Stop stops taking messages and waits for the attempts in flight to finish
// and record their outcomes (an outcome Postgres cannot take yet is tried
// again until its lease runs out). They keep running under their own
// Timeout until ctx is done; then their contexts are cancelled, Stop waits
// a few seconds at most (5s in all) for them to return and for the
// service's own writes in flight (liveness, a batch of completions,
// circuit breaker resets), leaves whatever has not finished by then to
// finish on its own (or fail once the pool is closed), and returns ctx's
// error. An attempt cut short that way records nothing (unless its handler
// still succeeds) and gives its lease back: its job is pending again at
// once and the attempt does not count. Should giving it back fail (or its
// handler not return in time), the lease expires and the streamer's reaper
// retries the job, counting the attempt (lease_expired, or dead_letter on
// its last attempt) since this consumer extended the lease or another
// consumer of the handler was alive.
// Stop on a service that never started (which then never starts), or that
// has stopped, returns nil;
// a Stop while another is stopping the service waits for it (or for its own
// ctx) and returns its result. Stop waits for every attempt in flight, so a
// handler must not call it and wait for it: it would wait for itself (until
// ctx ends; for ever with a ctx that never does). From a handler, start it
// in a goroutine of its own and return.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	switch s.state {
	case stateNew:
		// Never started: nothing to stop, and a Start after it starts
		// nothing (review helper-151: a SIGTERM handled before a `go
		// svc.Start()` ran left a service running that nothing stopped).
		s.state = stateStopped
		s.phase.Store(phaseStopped)
		s.stopped = make(chan struct{})
		close(s.stopped)
		s.mu.Unlock()
		return nil
	case stateStopped:
		stopped := s.stopped
		s.mu.Unlock()
		select {
		case <-stopped:
			return nil // stopped before this call
		default:
		}
		select {
		case <-stopped:
			return s.stopErr
		case <-ctx.Done():
			return fmt.Errorf("stop consumers: another Stop is still draining: %w", ctx.Err())
		}
	}
	s.state = stateStopped
	s.phase.Store(phaseStopping)
	s.stopped = make(chan struct{})
	s.mu.Unlock()
	err := s.stop(ctx)
	s.stopErr = err
	s.phase.Store(phaseStopped)
	close(s.stopped)
	return err
}

// stop is Stop's work, run by the first Stop only.
func (s *Service) stop(ctx context.Context) error {
	s.subCancel()
	// Reading nothing more: say so before draining, so that streamers stop
	// sending this service's role or handlers jobs while its attempts
	// finish, and the reaper counts none leased from now on.
	if err := s.sayDraining(ctx); err != nil {
		s.logger.LogAttrs(ctx, slog.LevelWarn, "could not record that the consumer is draining; streamers notice when its liveness runs out",
			slog.String("error", err.Error()))
	}
	// Readers return once the message they are handing out is done: its
	// references wait for slots like the attempts before them. Attempts
	// start from readers only, so they are waited for after them.
	done := make(chan struct{})
	go func() {
		s.readers.Wait()
		s.attempts.Wait()
		close(done)
	}()
	// Once ctx is done, whatever Stop still waits for gets giveBackTimeout
	// in all: the attempts cut short, then the background writes.
	grace, endGrace := graceAfter(ctx, giveBackTimeout)
	defer endGrace()
	select {
	case <-done:
		finished := s.stopBackground(grace)
		s.workCancel(nil)
		if !finished {
			return fmt.Errorf("stop consumers: writes in flight (liveness, a completion batch, circuit breaker resets) still running, left to finish on their own: %w", ctx.Err())
		}
		s.logger.LogAttrs(ctx, slog.LevelInfo, "consumers stopped")
		return nil
	case <-ctx.Done():
		n := s.inFlight.Load()
		s.workCancel(errShutdown)
		// Time for the cancelled attempts to give their leases back before
		// the program closes the pool (readers start nothing more once
		// workCtx is done); a handler that ignores its context, or an
		// outcome the database does not take, is not waited for past that.
		select {
		case <-done:
		case <-grace.Done():
		}
		// Attempts still finishing record their outcomes one by one.
		s.stopBackground(grace)
		s.logger.LogAttrs(ctx, slog.LevelWarn, "consumers stopped before attempts finished; they were cut short and give their leases back",
			slog.Int64("attempts", n))
		return fmt.Errorf("stop consumers: %d attempts still running: %w", n, ctx.Err())
	}
}

// graceAfter returns a context that ends d after ctx does (not before).
func graceAfter(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	grace, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var timer atomic.Pointer[time.Timer]
	stop := context.AfterFunc(ctx, func() { timer.Store(time.AfterFunc(d, cancel)) })
	return grace, func() {
		stop()
		if t := timer.Load(); t != nil {
			t.Stop()
		}
		cancel()
	}
}

// stopBackground ends the liveness loop and the batching committers, and
// waits for what they have in flight: the liveness write, the completion
// batch (tried again while Postgres is unavailable, as long as its
// attempts' leases last) and the circuit breaker resets it started, each
// on a deadline of its own that Stop's does not end. It waits no longer
// than grace (giveBackTimeout after Stop's ctx is done) and then leaves
// them to finish in the background, as it does attempts cut short: waited
// for to the end, a database that stopped answering held Stop past its
// deadline by a recordTimeout or more (review helper-297). It reports
// whether they finished.
func (s *Service) stopBackground(grace context.Context) bool {
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		s.aliveCancel()
		<-s.aliveDone
		if s.completions != nil {
			s.completions.Close() // its last batches may start breaker resets
		}
		s.resets.Wait()
		if s.takes != nil {
			s.takes.Close()
		}
	}()
	select {
	case <-finished:
		return true
	case <-grace.Done():
		s.logger.LogAttrs(grace, slog.LevelWarn, "consumers stopped with writes still in flight (liveness, a completion batch, circuit breaker resets): they finish on their own, or fail once the pool is closed")
		return false
	}
}

// Healthy reports an error unless the service runs: until Start has
// returned nil (it is still registering and subscribing: a probe served
// before Start, as inlet consumer's /readyz, answered ready while nothing was
// subscribed, review helper-253) and once Stop has begun. While it runs, it
// reports an error once the transport has closed a handler's subscription:
// it then takes no more of that handler's jobs, and readiness should say so
// (restart the process). It also reports the transport's own error while
// the transport has one (see healthReporter): natsbus, while not connected
// to NATS or while a subscription is not consuming (the liveness then
// leaves out only that subscription's handler, busReach). It never waits
// for Start or Stop.
func (s *Service) Healthy() error {
	switch s.phase.Load() {
	case phaseNew:
		return errors.New("not started: Start has not subscribed the handlers")
	case phaseStarting:
		return errors.New("starting: subscribing handlers")
	case phaseStopping:
		return errors.New("stopping")
	case phaseStopped:
		return errors.New("stopped")
	}
	if name := s.lost.Load(); name != nil {
		return fmt.Errorf("the bus closed the subscription of handler %q", *name)
	}
	if err := s.busHealthy(); err != nil {
		return fmt.Errorf("the bus: %w", err)
	}
	return nil
}

// healthReporter is a Subscriber that can tell when it is not delivering
// although its subscriptions are open (natsbus.NATS).
type healthReporter interface {
	Healthy() error
}

// busHealthy is the Subscriber's own health (healthReporter): nil for a
// transport without one (the in-process bus), which always delivers. The
// liveness writes ask busReach, which tells a connection down (no handler
// said alive) from some subscriptions not consuming (only their handlers
// left out), and use busHealthy for a transport that tells neither.
func (s *Service) busHealthy() error {
	if h, ok := s.cfg.Subscriber.(healthReporter); ok {
		return h.Healthy()
	}
	return nil
}

// read takes r's messages until ctx ends. A message carries one job
// reference or several (a claim's chunk, bus.NewBatchMessage). It is
// acknowledged once its first reference has a slot, and each attempt runs on
// its own goroutine: Postgres, not the bus, remembers the job, and the slots
// are the backpressure. The rest of a message's references wait here for
// slots, also while the service stops gracefully (they were acknowledged on
// the bus, so nothing else would run them before their leases expire); at
// Stop's deadline (workCtx) their leases are given back (giveBackUnstarted),
// as they are, uncounted, when every slot is held by a handler that ignores
// its context (giveBackHung, after runner.waitBound), and the message is
// then acknowledged: the streamer publishes their jobs again. A
// rate-limited handler's attempt waits for its start token once it holds
// its slot and has read its event, right before its handler is called
// (attempt: takeToken, takeTxSlot), not here.
func (s *Service) read(ctx context.Context, r *runner, ch <-chan *message.Message) {
	for {
		var msg *message.Message
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				if ctx.Err() == nil {
					s.logger.LogAttrs(ctx, slog.LevelError, "subscription closed by the transport",
						slog.String("handler", r.h.Name))
					name := r.h.Name
					s.lost.Store(&name)
				}
				return
			}
			msg = m
		}

		refs, err := bus.ParseRefs(msg)
		if err != nil {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "dropped malformed job reference",
				slog.String("handler", r.h.Name), slog.String("error", err.Error()))
			msg.Ack()
			continue
		}
		mine := refs[:0]
		for _, ref := range refs {
			if ref.Handler != r.h.Name {
				s.logger.LogAttrs(ctx, slog.LevelWarn, "dropped job reference for another handler",
					slog.String("handler", r.h.Name), slog.String("ref_handler", ref.Handler), slog.Int64("job_id", ref.JobID))
				continue
			}
			mine = append(mine, ref)
		}
		if len(mine) == 0 {
			msg.Ack()
			continue
		}
		var extended time.Time // when the waiting references' leases run out, once extended here
	refs:
		for i := 0; i < len(mine); {
			if i == 0 {
				// The first reference waits like the others, its message's
				// leases extended meanwhile (review helper-103: a message
				// waiting behind a slow handler had them run out, and the
				// reaper dead-lettered jobs that never ran).
				switch s.waitForSlot(r, mine, &extended, ctx.Done()) {
				case slotDone:
					if !extended.IsZero() {
						// Their leases were extended here (worker_id
						// this consumer's): the reaper would count an
						// attempt for each at their expiry, none of
						// them run (review helper-118). Given back, they
						// are claimed again at once.
						s.giveBackUnstarted(r.h.Name, mine)
					}
					msg.Nack() // nothing of it started: the bus gives it to another replica
					return
				case slotHung:
					// Acknowledged, not Nacked: their leases are given
					// back, so its lease tokens are stale, and the
					// streamer publishes the jobs again as it leases them.
					s.giveBackHung(r, mine)
					msg.Ack()
					break refs
				}
				msg.Ack()
			} else {
				switch s.waitForSlot(r, mine[i:], &extended, s.workCtx.Done()) {
				case slotDone:
					s.giveBackUnstarted(r.h.Name, mine[i:])
					return
				case slotHung:
					s.giveBackHung(r, mine[i:])
					break refs
				}
			}
			// The next references whose slots are free now start together
			// with this one and share its read, up to TakeBatch of them (a
			// rate-limited handler's each then waits for its token).
			j := i + 1
		slots:
			for j < len(mine) && (s.cfg.TakeBatch <= 0 || j-i < s.cfg.TakeBatch) {
				select {
				case r.slots <- struct{}{}:
					j++
				default:
					break slots
				}
			}
			rd := &messageRead{s: s, refs: mine[i:j:j]}
			for k, ref := range mine[i:j] {
				s.start(ctx, r, ref, msg, rd, k)
			}
			i = j
		}
	}
}

// slotWait is how a wait for a slot ended.
type slotWait int

const (
	slotTaken slotWait = iota // the reference has a slot
	slotDone                  // done came first
	slotHung                  // every slot is held by a hung attempt: give the references back
)

// waitForSlot takes one of r's slots for waiting[0]. It reports slotDone when
// done came first (the subscription ending, for a message's first reference,
// not yet acknowledged; Stop's deadline, workCtx, for the others), and
// slotHung once the references have waited r.waitBound and every slot of r
// is held by an attempt whose handler ignores its context (runner.slotsHung):
// the caller then gives their leases back, uncounted (giveBackHung), for
// another consumer of the handler to run, or for its circuit's probe.
// Waiting, they kept their jobs leased behind slots that may never free
// (review helper-283: a poison event hanging its handler opened the
// handler's circuit, whose probe is leased only once none of its jobs is,
// and every replica of the handler was fed nothing until the hung process
// restarted). A slow handler that returns frees its slot in its time, so
// its backlog waits on.
//
// The references waiting (not started) have their leases extended while they wait,
// before each would run out: a slow handler's backlog held here otherwise
// expired, the reaper counted attempts that never ran (a consumer of the
// handler was alive), and jobs were dead-lettered without their handler
// ever being called (review helper-85).
//
// extended is when their leases run out as this message's waits last
// extended them (zero before the first): the next reference's wait starts
// from it rather than from the leases the references carry, so one
// extension serves every wait of the message until it is due again.
//
// Every expiry here is on this process's monotonic clock: the references'
// leases are read as durations left (slotWaitExpiry), an extension's as
// LeaseExtend from when it was sent.
func (s *Service) waitForSlot(r *runner, waiting []bus.Ref, extended *time.Time, done <-chan struct{}) slotWait {
	began := time.Now()
	expires := *extended
	if expires.IsZero() {
		expires = slotWaitExpiry(began, s.cfg.LeaseExtend, waiting)
	}
	extendAt := began.Add(max(time.Until(expires)/2, 50*time.Millisecond))
	for {
		next := time.Until(extendAt)
		if left := r.waitBound - time.Since(began); left > 0 {
			next = min(next, left) // the bound is looked at when it is reached
		}
		t := time.NewTimer(max(next, 0))
		select {
		case r.slots <- struct{}{}:
			t.Stop()
			return slotTaken
		case <-done:
			t.Stop()
			return slotDone
		case <-t.C:
		}
		if time.Since(began) >= r.waitBound && r.slotsHung(time.Now()) {
			return slotHung
		}
		if time.Now().Before(extendAt) {
			continue
		}
		// Only an extension that succeeded moves the expiry: after a
		// failed one the next try comes at half the time left, not a
		// whole LeaseExtend/2 later, past the lease's end (review
		// helper-118: the reaper then counted an attempt never run).
		at := time.Now()
		if s.extendWaiting(r.h.Name, waiting) {
			expires = at.Add(s.cfg.LeaseExtend)
			*extended = expires
		}
		wait := max(time.Until(expires)/2, 50*time.Millisecond)
		if time.Until(expires) <= 0 {
			wait = time.Second // past its end unless a try landed: now and then
		}
		extendAt = time.Now().Add(wait)
	}
}

// slotWaitExpiry is when, on now's monotonic clock, the first lease of
// waiting runs out, at most extend after now (the first extension is due
// before half of it): what is left of each is its LeaseExpiresAt less this
// host's time, which is right only while the hosts' clocks agree, as
// LeaseExpiresAt is on the database's clock. No lease has more left than
// its whole length (LeaseExpiresAt less LeasedAt, both on the database's
// clock, so their difference is on none): more than that by over a
// quarter of it, this host's clock is behind the database's and what is
// left is unknown (the time the reference waited in the bus with it), so
// the first extension is tried at once; by less, the lease's length bounds
// it. Read on this host's clock alone, a clock minutes behind the
// database's put the first extension a whole LeaseExtend/2 away, and a
// lease shorter than that ran out while its reference waited: the reaper
// counted an attempt never run (review helper-270). A clock ahead of the
// database's reads less left than there is: the extension comes early,
// which costs a statement, never a lease.
func slotWaitExpiry(now time.Time, extend time.Duration, waiting []bus.Ref) time.Time {
	left := extend
	for _, ref := range waiting {
		if ref.LeaseExpiresAt.IsZero() {
			continue // a reference from before it was sent
		}
		l := ref.LeaseExpiresAt.Sub(now)
		if !ref.LeasedAt.IsZero() {
			switch length := ref.LeaseExpiresAt.Sub(ref.LeasedAt); {
			case l > length+length/4:
				l = 0
			case l > length:
				l = length
			}
		}
		left = min(left, l)
	}
	return now.Add(left)
}

// extendWaiting extends the leases of references waiting for a slot, in one
// round trip, and reports whether it did. A lease already lost is left so:
// its reference is skipped when its turn comes.
func (s *Service) extendWaiting(handler string, waiting []bus.Ref) bool {
	ctx, cancel := context.WithTimeout(s.workCtx, s.cfg.LeaseExtend/3)
	defer cancel()
	b := &pgx.Batch{}
	for _, ref := range waiting {
		if ref.LeasedAt.IsZero() {
			continue // a reference from before lease tokens: its take reads the token
		}
		b.Queue(extendLeaseSQL, ref.JobID, ref.Attempt, s.cfg.LeaseExtend, ref.LeasedAt, s.cfg.WorkerID)
	}
	if b.Len() == 0 {
		return true
	}
	err := s.cfg.Pool.SendBatch(ctx, b).Close()
	if err != nil && s.workCtx.Err() == nil { // its own timeout is logged too
		s.logger.LogAttrs(ctx, slog.LevelWarn, "extend the leases of references waiting for a slot failed; trying again before they expire",
			slog.String("handler", handler), slog.Int("references", len(waiting)), slog.String("error", err.Error()))
	}
	return err == nil
}

// start runs the attempt of ref, which holds one of r's slots, on its own
// goroutine, unless this attempt already runs in this process. ref is
// rd.refs[idx]: the references of its message that start with it share one
// read (one FetchJobs for them all, read as soon as the first of them asks,
// without waiting for company that may not come).
func (s *Service) start(ctx context.Context, r *runner, ref bus.Ref, msg *message.Message, rd *messageRead, idx int) {
	traceParent := sampledTraceParent(ref.TraceParent)
	if ref.TraceParent == "" {
		traceParent = messageTraceParent(msg)
	}
	key := runKey{job: ref.JobID, attempt: ref.Attempt, leasedAt: ref.LeasedAt.UnixMicro()}
	if _, dup := s.running.LoadOrStore(key, struct{}{}); dup {
		s.logger.LogAttrs(ctx, slog.LevelDebug, "skipped job reference: this attempt is already running here",
			slog.String("handler", r.h.Name), slog.Int64("job_id", ref.JobID), slog.Int("attempt", ref.Attempt))
		<-r.slots
		return
	}
	s.inFlight.Add(1)
	hold, release := r.hold()
	var freed sync.Once
	free := func() {
		freed.Do(func() {
			release()
			<-r.slots
		})
	}
	s.attempts.Go(func() {
		defer func() {
			s.running.Delete(key)
			s.inFlight.Add(-1)
			free()
		}()
		s.attempt(r, ref, traceParent, rd, idx, &hold.deadline, free)
	})
}

// tokenWait is how a wait for a start token ended (awaitToken, takeToken).
type tokenWait int

const (
	tokenTaken tokenWait = iota // a token is there (awaitToken), or was taken (takeToken): the handler may be called
	tokenDone                   // Stop's deadline came first
	tokenLate                   // the next token comes later than the lease allows: give the job back
)

// takeToken takes a token of r's bucket (runner.pace) for an attempt of a
// handler that is not transactional, right before the handler is called:
// its slot held, its event read (take, with the liveness write and the
// lease extension that may come before the call), its lease extended
// meanwhile (extendLease). Nothing but starting the handler's clock is
// left between the token and the call (Service.run), so in any time t the
// process calls the handler at most Burst + RateLimit·t times, however
// long its attempts waited before (review helper-331): a token taken
// before those waits is spent while they last, and the attempts holding
// one then start together (review helper-338, for a transactional
// handler's wait for a transaction slot: takeTxSlot). A handler without a
// RateLimit has no bucket and is not held. The handler's attempts wait in
// turn (runner.paceTurn), each until a token is there (awaitToken, whose
// answer it returns: tokenTaken with the token taken).
func (s *Service) takeToken(ctx context.Context, r *runner) tokenWait {
	if r.pace == nil {
		return tokenTaken
	}
	select {
	case r.paceTurn <- struct{}{}:
	case <-ctx.Done():
		return tokenDone
	}
	defer func() { <-r.paceTurn }()
	for {
		if w := s.awaitToken(ctx, r); w != tokenTaken {
			return w
		}
		if r.pace.Allow() { // no one else takes this handler's tokens: only a rounding waits again
			return tokenTaken
		}
	}
}

// awaitToken waits, for an attempt that holds r's turn (runner.paceTurn),
// until r's bucket has a token, and leaves it there: the caller takes it
// (Allow) when nothing else is left to wait for. Tokens are taken only as
// they come, never reserved ahead, so the next is at most a token's
// interval away. The attempt's lease is extended meanwhile (extendLease):
// a token due within LeaseExtend/2 is waited for; one due later (a rate
// slower than about 2/LeaseExtend) reports tokenLate at once, and the
// caller gives the job back uncounted (giveBackPaced), for the streamers
// to lease it again at the rate. It waits until ctx ends (Stop's deadline)
// at most, and reports tokenDone then.
func (s *Service) awaitToken(ctx context.Context, r *runner) tokenWait {
	for {
		d := untilToken(r.pace, time.Now())
		if d == 0 {
			return tokenTaken
		}
		if d > s.cfg.LeaseExtend/2 {
			return tokenLate
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return tokenDone
		}
	}
}

// untilToken is how long after now lim has a whole token: 0 when it has one.
func untilToken(lim *rate.Limiter, now time.Time) time.Duration {
	missing := 1 - lim.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	// Capped as x/time/rate caps its own: at a rate below ~1e-10/s the
	// product overflows int64 and converted to a negative wait, which would
	// spin instead of giving the job back (noted by review helper-341).
	d := math.Ceil(missing / float64(lim.Limit()) * float64(time.Second))
	if d >= math.MaxInt64 || math.IsNaN(d) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d)
}
