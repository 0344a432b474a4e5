package consumers

import (
	"context"
	"log/slog"
	"time"

	"github.com/inlet-dev/inlet/schema"
)

var (
	consumerAliveSQL    = schema.Query("ConsumerAlive")
	consumerDrainingSQL = schema.Query("ConsumerDraining")
	consumerGoneSQL     = schema.Query("ConsumerGone")
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
// AliveIntervals. Taking an attempt writes nothing, so this is how
// streamers and the reaper know a consumer is there (see ReapExpiredLeases).
// Once Stop has ended the subscriptions it writes nothing (sayDraining
// did).
func (s *Service) sayAlive(ctx context.Context) error {
	s.aliveMu.Lock()
	defer s.aliveMu.Unlock()
	if s.draining {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AliveInterval)
	defer cancel()
	_, err := s.cfg.Pool.Exec(ctx, consumerAliveSQL, s.cfg.WorkerID, s.handlerNames(), 3*s.cfg.AliveInterval)
	return err
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
	s.aliveMu.Lock()
	defer s.aliveMu.Unlock()
	s.draining = true
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AliveInterval)
	defer cancel()
	_, err := s.cfg.Pool.Exec(ctx, consumerDrainingSQL, s.cfg.WorkerID, s.handlerNames())
	return err
}

// aliveLoop says the service is alive every AliveInterval until ctx ends,
// and then that it is gone, so streamers stop leasing at once for handlers
// that have no other consumer.
func (s *Service) aliveLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.AliveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.AliveInterval)
			defer cancel()
			if _, err := s.cfg.Pool.Exec(gctx, consumerGoneSQL, s.cfg.WorkerID, s.handlerNames()); err != nil {
				s.logger.LogAttrs(gctx, slog.LevelWarn, "could not record that the consumer stopped; streamers notice when its liveness runs out",
					slog.String("error", err.Error()))
			}
			return
		case <-t.C:
		}
		if err := s.sayAlive(ctx); err != nil && ctx.Err() == nil {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "record consumer liveness failed",
				slog.String("error", err.Error()))
		}
	}
}
