package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// did), nor while the bus is not delivering to it (errBusDown).
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
// While the bus is not delivering it writes nothing and returns errBusDown
// (sayAliveLocked): the take extends its lease instead.
func (s *Service) sayAliveSince(ctx context.Context, leasedAt time.Time) error {
	if leasedAt.UnixNano() <= s.seenUntil.Load() {
		return nil
	}
	if s.aliveRecentlyFailed() {
		return errAliveRecentlyFailed
	}
	if err := s.lockAlive(ctx); err != nil {
		return err
	}
	defer s.unlockAlive()
	switch {
	case leasedAt.UnixNano() <= s.seenUntil.Load():
		return nil // written while this take waited
	case s.aliveRecentlyFailed():
		return errAliveRecentlyFailed // failed while this take waited
	}
	return s.sayAliveLocked(ctx)
}

// errAliveRecentlyFailed: the take's liveness write was not tried, the last
// one having failed within an AliveInterval.
var errAliveRecentlyFailed = errors.New("the last liveness write failed within an AliveInterval; not tried again for this attempt")

// errBusDown: the liveness write was skipped, the Subscriber saying it is
// not delivering (sayAliveLocked). A take that gets it extends its lease
// before the handler runs instead (take).
var errBusDown = errors.New("the bus is not delivering to this consumer; its liveness is not recorded until it is")

// busRecheck is how often, while the bus is not delivering, the alive loop
// asks it whether it is again, so the first liveness write after its return
// does not wait for the next AliveInterval.
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
// While the Subscriber says it is not delivering (busHealthy: natsbus not
// connected to NATS, or a durable not consuming) it writes nothing and
// returns errBusDown: this consumer can receive no reference, and alive it
// had streamers lease its handlers' jobs and the reaper count every expiry
// as an attempt, so jobs were dead-lettered unrun for as long as its path
// to NATS was cut (review helper-243). Its last write then runs out as a
// stopped consumer's does: within three AliveIntervals streamers hold a
// handler none of whose consumers is alive (quiet), and the expiry of a
// lease that began after that write's seen_at is an outage, not counted. A
// blip between two writes changes nothing; the alive loop writes as soon
// as the bus is back (busRecheck).
func (s *Service) sayAliveLocked(ctx context.Context) error {
	if s.draining {
		return nil
	}
	if err := s.busHealthy(); err != nil {
		if !s.busDown.Swap(true) {
			select {
			case s.busDownSet <- struct{}{}:
			default:
			}
			s.logger.LogAttrs(ctx, slog.LevelWarn, "the bus is not delivering to this consumer: its liveness is not recorded until it is, so streamers hold its handlers' jobs and their expired leases do not count",
				slog.String("worker_id", s.cfg.WorkerID), slog.String("error", err.Error()))
		}
		return fmt.Errorf("%w: %w", errBusDown, err)
	}
	if s.busDown.Swap(false) {
		s.logger.LogAttrs(ctx, slog.LevelInfo, "the bus is delivering to this consumer again: recording its liveness",
			slog.String("worker_id", s.cfg.WorkerID))
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AliveInterval)
	defer cancel()
	names := s.handlerNames()
	sql := consumerAliveSQL
	if s.scoped {
		sql = consumerAliveScopedSQL
	}
	err := s.writeAlive(ctx, sql, names)
	if err != nil {
		s.aliveFailedAt.Store(time.Now().UnixNano())
		return err
	}
	s.aliveFailedAt.Store(0)
	return nil
}

// writeAlive runs sql, a ConsumerAlive statement, for names, and records
// what it wrote (sayAliveLocked). Under aliveMu.
func (s *Service) writeAlive(ctx context.Context, sql string, names []string) error {
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
	if len(written) > 0 && seen.UnixNano() > s.seenUntil.Load() {
		s.seenUntil.Store(seen.UnixNano())
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
// that have no other consumer. While the bus is not delivering (busDown) it
// also asks it every busRecheck, and says alive as soon as it is back.
func (s *Service) aliveLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.AliveInterval)
	defer t.Stop()
	for {
		var back <-chan time.Time
		if s.busDown.Load() {
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
		case <-s.busDownSet:
			continue // a take found the bus down: check for its return
		case <-t.C:
		case <-back:
			if s.busHealthy() != nil {
				continue
			}
		}
		if err := s.sayAlive(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, errBusDown) {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "record consumer liveness failed",
				slog.String("error", err.Error()))
		}
	}
}
