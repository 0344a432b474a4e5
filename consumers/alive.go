package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/schema"
)

var (
	consumerAliveSQL       = schema.Query("ConsumerAlive")
	consumerAliveScopedSQL = schema.Query("ConsumerAliveScoped")
	consumerDrainingSQL    = schema.Query("ConsumerDraining")
	consumerGoneSQL        = schema.Query("ConsumerGone")
)

// handlerNames are the names of the service's handlers.
func (s *Service) handlerNames() []string {
	names := make([]string, len(s.runners))
	for i, r := range s.runners {
		names[i] = r.h.Name
	}
	return names
}

// sayAlive records that this service is alive for its handlers for three
// AliveIntervals. Taking an attempt writes nothing but, at most, this
// (sayAliveSince), so this is how streamers and the reaper know a consumer
// is there (see ReapExpiredLeases).
// Once Stop has ended the subscriptions it writes nothing (sayDraining
// did), nor while the bus is not delivering to it (errBusDown), nor for a
// handler whose subscription is not consuming (busReach).
func (s *Service) sayAlive(ctx context.Context) error {
	if err := s.lockAlive(ctx); err != nil {
		return err
	}
	defer s.unlockAlive()
	return s.sayAliveLocked(ctx)
}

// lockAlive takes aliveMu, waiting no longer than ctx.
func (s *Service) lockAlive(ctx context.Context) error {
	select {
	case s.aliveMu <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for the consumer's liveness write in progress: %w", ctx.Err())
	}
}

func (s *Service) unlockAlive() { <-s.aliveMu }

// sayAliveSince makes sure this service's liveness was written at or after
// leasedAt, a lease's start on the database's clock (jobs.attempted_at),
// before a handler runs on that lease. The reaper counts an expired lease
// whose consumer did not extend it only when a consumer was seen after the
// lease began; the periodic write always precedes a lease taken and run
// within one AliveInterval, so a handler that killed its process (a poison
// job: fatal error, OOM kill, segfault) was given back uncounted at every
// restart slower than the lease, and never dead-lettered (review
// helper-211). It writes only when no known write covers the lease: a
// write's seen_at is 250 ms ahead of it (ConsumerAlive), and the takes
// waiting on aliveMu share the one write (rechecked under it), so a steady
// flow costs at most about four writes a second, not one per attempt.
//
// ctx bounds the wait, the lock's and the write's (take gives it a part of
// what is left of the lease, and extends the lease after it when needed). A
// write that failed within the last AliveInterval is not tried again by
// every take behind it: they go on without (errAliveRecentlyFailed), or a
// row locked for long (an operator's transaction, another service with the
// same WorkerID, a failover) let one take at a time through per timeout
// (review helper-215).
//
// A write covers the handlers it wrote: a lease of handler is covered only
// by a write that did not leave it out (aliveMark). While the bus is not
// delivering to handler (busReach: the connection down, or one of its
// topics not consuming) it returns errBusDown: the take extends its lease
// instead. It writes then only when the bus's state changed since the last
// write (or skip) acted on it (busGap), so the other handlers' liveness is
// written at once, while a left-out handler's references that still come
// (on its topic that consumes) each cost no write.
func (s *Service) sayAliveSince(ctx context.Context, handler string, leasedAt time.Time) error {
	if s.covered(handler, leasedAt) {
		return nil
	}
	if err := s.leftOutAsBefore(handler); err != nil {
		return err
	}
	if s.aliveRecentlyFailed() {
		return s.notTried(handler)
	}
	if err := s.lockAlive(ctx); err != nil {
		return err
	}
	defer s.unlockAlive()
	switch {
	case s.covered(handler, leasedAt):
		return nil // written while this take waited
	case s.aliveRecentlyFailed():
		return s.notTried(handler) // failed while this take waited
	}
	if err := s.leftOutAsBefore(handler); err != nil {
		return err // left out by a write while this take waited
	}
	if err := s.sayAliveLocked(ctx); err != nil {
		return err
	}
	if m := s.aliveMark.Load(); m != nil && slices.Contains(m.leftOut, handler) {
		return fmt.Errorf("%w: a subscription of handler %q is not consuming", errBusDown, handler)
	}
	return nil
}

// aliveMark is what the last successful liveness write covers: leases of
// the handlers it wrote that began up to seen (its seen_at, the database's
// time in unix ns), but none of the handlers it left out as the bus was
// not delivering to them.
type aliveMark struct {
	seen    int64
	leftOut []string
}

// covered reports whether the last liveness write covers a lease of
// handler begun at leasedAt.
func (s *Service) covered(handler string, leasedAt time.Time) bool {
	m := s.aliveMark.Load()
	return m != nil && leasedAt.UnixNano() <= m.seen && !slices.Contains(m.leftOut, handler)
}

// leftOutAsBefore returns errBusDown when the bus is not delivering to
// handler and the last liveness write (or skip) already acted on the same
// state of the bus (busGap), so a write now would change nothing that
// matters: nil when handler is delivered to, or the bus's state changed.
func (s *Service) leftOutAsBefore(handler string) error {
	r := s.busReach()
	if !r.leavesOut(handler) || !r.same(s.busGap.Load()) {
		return nil
	}
	if r.down != nil {
		return fmt.Errorf("%w: %w", errBusDown, r.down)
	}
	return fmt.Errorf("%w: a subscription of handler %q is not consuming", errBusDown, handler)
}

// notTried is why a take's liveness write is not tried, the last one having
// failed within an AliveInterval: errBusDown when the bus is not delivering
// to handler (its lease is then extended all the same), else
// errAliveRecentlyFailed.
func (s *Service) notTried(handler string) error {
	if r := s.busReach(); r.leavesOut(handler) {
		return fmt.Errorf("%w (and the last liveness write failed)", errBusDown)
	}
	return errAliveRecentlyFailed
}

// errAliveRecentlyFailed: the take's liveness write was not tried, the last
// one having failed within an AliveInterval.
var errAliveRecentlyFailed = errors.New("the last liveness write failed within an AliveInterval; not tried again for this attempt")

// errBusDown: the liveness write was skipped, or left a take's handler out,
// the Subscriber saying it is not delivering to this consumer or to that
// handler (sayAliveLocked). A take that gets it extends its lease before
// the handler runs instead (take).
var errBusDown = errors.New("the bus is not delivering to this consumer or handler; its liveness is not recorded until it is")

// busRecheck is how often, while the bus is not delivering to this
// consumer or to some of its handlers, the alive loop asks it whether it
// is again, so the first liveness write after its return does not wait for
// the next AliveInterval.
const busRecheck = 100 * time.Millisecond

// aliveRecentlyFailed reports whether a liveness write failed within the
// last AliveInterval.
func (s *Service) aliveRecentlyFailed() bool {
	at := s.aliveFailedAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < s.cfg.AliveInterval
}

// sayAliveLocked is sayAlive under aliveMu. It remembers the database time
// up to which the write covers leases (seenUntil: the seen_at written), and
// says once, when the set changes, which handlers the service's scoped role
// is no longer given: ConsumerAliveScoped writes only those it still is
// (one taken away made every write fail, and the liveness of the others
// ran out: review helper-211).
//
// While the Subscriber says it is not delivering to this consumer
// (busReach: natsbus not connected to NATS) it writes nothing and returns
// errBusDown: this consumer can receive no reference, and alive it had
// streamers lease its handlers' jobs and the reaper count every expiry as
// an attempt, so jobs were dead-lettered unrun for as long as its path to
// NATS was cut (review helper-243). Its last write then runs out as a
// stopped consumer's does: within three AliveIntervals streamers hold a
// handler none of whose consumers is alive (quiet), and the expiry of a
// lease that began after that write's seen_at is an outage, not counted.
// While only some subscriptions are not consuming (natsbus: a durable lost
// and not made again, or not consumed again), it leaves out only the
// handlers they belong to, as a scoped role's refused ones: their liveness
// runs out so, while the other handlers', whose subscriptions deliver, is
// written on (one handler's durable stalled stopped every handler of the
// consumer: review helper-251). With every handler left out it writes
// nothing and returns errBusDown. A blip between two writes changes
// nothing; the alive loop writes as soon as the bus delivers again to a
// handler left out (busRecheck).
func (s *Service) sayAliveLocked(ctx context.Context) error {
	if s.draining {
		return nil
	}
	r := s.busReach()
	s.noteBus(ctx, r)
	if r.down != nil {
		return fmt.Errorf("%w: %w", errBusDown, r.down)
	}
	names := slices.DeleteFunc(s.handlerNames(), func(h string) bool { return slices.Contains(r.stalled, h) })
	if len(names) == 0 {
		return fmt.Errorf("%w: a subscription of every handler (%s) is not consuming", errBusDown, strings.Join(r.stalled, ", "))
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AliveInterval)
	defer cancel()
	sql := consumerAliveSQL
	if s.scoped {
		sql = consumerAliveScopedSQL
	}
	err := s.writeAlive(ctx, sql, names, r.stalled)
	if err != nil {
		s.aliveFailedAt.Store(time.Now().UnixNano())
		return err
	}
	s.aliveFailedAt.Store(0)
	return nil
}

// writeAlive runs sql, a ConsumerAlive statement, for names, and records
// what it wrote (aliveMark: leftOut are the handlers left out of names as
// the bus is not delivering to them). Under aliveMu.
func (s *Service) writeAlive(ctx context.Context, sql string, names, leftOut []string) error {
	rows, err := s.cfg.Pool.Query(ctx, sql, s.cfg.WorkerID, names, 3*s.cfg.AliveInterval)
	if err != nil {
		return fmt.Errorf("record liveness of consumer %q for handlers %v: %w", s.cfg.WorkerID, names, err)
	}
	written := make(map[string]bool, len(names))
	var seen time.Time
	for rows.Next() {
		var h string
		if err := rows.Scan(&h, &seen); err != nil {
			rows.Close()
			return fmt.Errorf("record liveness of consumer %q: read the rows written: %w", s.cfg.WorkerID, err)
		}
		written[h] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("record liveness of consumer %q for handlers %v: %w", s.cfg.WorkerID, names, err)
	}
	if len(written) > 0 {
		s.aliveMark.Store(&aliveMark{seen: seen.UnixNano(), leftOut: leftOut})
	}
	var refused []string
	for _, h := range names {
		if !written[h] {
			refused = append(refused, h)
		}
	}
	if key := strings.Join(refused, ","); key != s.refused {
		s.refused = key
		if len(refused) > 0 {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "handlers no longer given to this consumer's database role: their liveness is not recorded and their jobs are not run here; redeploy without them or give them back (inlet roles create-consumer)",
				slog.String("worker_id", s.cfg.WorkerID), slog.Any("handlers", refused))
		} else {
			s.logger.LogAttrs(ctx, slog.LevelInfo, "every handler is given to this consumer's database role again",
				slog.String("worker_id", s.cfg.WorkerID))
		}
	}
	return nil
}

// sayDraining records, once Stop has ended the subscriptions, that this
// service reads no topic any more while its attempts finish
// (ConsumerDraining): streamers neither route a shared handler's jobs to
// its role (a draining role kept its route, and jobs sent there expired as
// counted attempts: review helper-173) nor lease a handler it alone runs;
// and it is seen now and not again, so the reaper does not count leases
// taken after it stopped reading (review helper-175: the alive loop went on
// moving seen_at, and such leases were dead-lettered unrun). Under aliveMu:
// an alive tick in flight does not undo it.
func (s *Service) sayDraining(ctx context.Context) error {
	if err := s.lockAlive(ctx); err != nil {
		return err
	}
	defer s.unlockAlive()
	s.draining = true
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AliveInterval)
	defer cancel()
	_, err := s.cfg.Pool.Exec(ctx, consumerDrainingSQL, s.cfg.WorkerID, s.handlerNames())
	return err
}

// aliveLoop says the service is alive every AliveInterval until ctx ends,
// and then that it is gone, so streamers stop leasing at once for handlers
// that have no other consumer. While the bus is not delivering to it or to
// some of its handlers (busGap) it also asks the bus every busRecheck, and
// writes as soon as that changed (a handler left out delivered to again).
func (s *Service) aliveLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.AliveInterval)
	defer t.Stop()
	for {
		var back <-chan time.Time
		if g := s.busGap.Load(); g != nil && g.gap() {
			back = time.After(busRecheck)
		}
		select {
		case <-ctx.Done():
			gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.AliveInterval)
			defer cancel()
			if _, err := s.cfg.Pool.Exec(gctx, consumerGoneSQL, s.cfg.WorkerID, s.handlerNames()); err != nil {
				s.logger.LogAttrs(gctx, slog.LevelWarn, "could not record that the consumer stopped; streamers notice when its liveness runs out",
					slog.String("error", err.Error()))
			}
			return
		case <-s.busGapSet:
			continue // a take's write found the bus not delivering: check for its return
		case <-t.C:
		case <-back:
			if s.busReach().same(s.busGap.Load()) {
				continue
			}
		}
		if err := s.sayAlive(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, errBusDown) {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "record consumer liveness failed",
				slog.String("error", err.Error()))
		}
	}
}

// busReach is what the Subscriber delivers now (Service.busReach).
type busReach struct {
	// down is why nothing is delivered to this consumer (natsbus: the
	// connection to NATS is down), nil while something is.
	down error
	// stalled are the handlers (in the service's order) one of whose
	// subscriptions is not consuming, and topics those subscriptions.
	stalled, topics []string
}

// gap reports whether the bus leaves out any handler.
func (r busReach) gap() bool { return r.down != nil || len(r.stalled) > 0 }

// leavesOut reports whether the bus is not delivering to handler.
func (r busReach) leavesOut(handler string) bool {
	return r.down != nil || slices.Contains(r.stalled, handler)
}

// same reports whether r leaves out what was does (nil: nothing).
func (r busReach) same(was *busReach) bool {
	if was == nil {
		return !r.gap()
	}
	return (r.down == nil) == (was.down == nil) && slices.Equal(r.stalled, was.stalled)
}

// connectionReporter is a Subscriber that can tell when its connection is
// down, so that nothing is delivered to any subscription (natsbus.NATS).
type connectionReporter interface {
	ConnectionHealthy() error
}

// stallReporter is a Subscriber that can tell which of its subscriptions,
// by topic, are not consuming while the others deliver (natsbus.NATS).
type stallReporter interface {
	Stalled() []string
}

// busReach asks the Subscriber what it delivers: through
// connectionReporter and stallReporter when it has them; else a
// healthReporter's error stands for the whole consumer; a transport without
// any (the in-process bus) always delivers.
func (s *Service) busReach() busReach {
	conn, hasConn := s.cfg.Subscriber.(connectionReporter)
	stall, hasStall := s.cfg.Subscriber.(stallReporter)
	if !hasConn && !hasStall {
		return busReach{down: s.busHealthy()}
	}
	if hasConn {
		if err := conn.ConnectionHealthy(); err != nil {
			return busReach{down: err}
		}
	}
	var r busReach
	if hasStall {
		for _, topic := range stall.Stalled() {
			h, ok := s.topicHandler[topic]
			if !ok {
				continue // another service's subscription on the same transport
			}
			r.topics = append(r.topics, topic)
			if !slices.Contains(r.stalled, h) {
				r.stalled = append(r.stalled, h)
			}
		}
		slices.Sort(r.stalled)
	}
	return r
}

// noteBus records r as what the liveness write acts on (busGap), logs what
// changed since the last one, and wakes the alive loop to watch for the
// bus's return when r leaves something out. Under aliveMu.
func (s *Service) noteBus(ctx context.Context, r busReach) {
	was := s.busGap.Swap(&r)
	if was == nil {
		was = &busReach{}
	}
	if r.same(was) {
		return
	}
	if r.gap() {
		select {
		case s.busGapSet <- struct{}{}:
		default:
		}
	}
	switch {
	case r.down != nil && was.down == nil:
		s.logger.LogAttrs(ctx, slog.LevelWarn, "the bus is not delivering to this consumer: its liveness is not recorded until it is, so streamers hold its handlers' jobs and their expired leases do not count",
			slog.String("worker_id", s.cfg.WorkerID), slog.String("error", r.down.Error()))
		return
	case r.down == nil && was.down != nil:
		s.logger.LogAttrs(ctx, slog.LevelInfo, "the bus is delivering to this consumer again: recording its liveness",
			slog.String("worker_id", s.cfg.WorkerID))
	}
	switch {
	case len(r.stalled) > 0 && !slices.Equal(r.stalled, was.stalled):
		s.logger.LogAttrs(ctx, slog.LevelWarn, "the bus is not delivering to some of this consumer's handlers (a subscription not consuming): their liveness is not recorded until it is, so streamers hold their jobs unless another consumer runs them; the other handlers run on",
			slog.String("worker_id", s.cfg.WorkerID), slog.Any("handlers", r.stalled), slog.Any("topics", r.topics))
	case len(r.stalled) == 0 && len(was.stalled) > 0:
		s.logger.LogAttrs(ctx, slog.LevelInfo, "the bus is delivering to every handler of this consumer again: recording their liveness",
			slog.String("worker_id", s.cfg.WorkerID), slog.Any("handlers", was.stalled))
	}
}
