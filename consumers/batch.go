package consumers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/inlet-dev/inlet/internal/bus"
	"github.com/inlet-dev/inlet/internal/groupcommit"
	"github.com/inlet-dev/inlet/schema"
)

// completion is one successful attempt waiting to be recorded.
type completion struct {
	ref bus.Ref
	l   lease
}

// completions records successful attempts in batches: one CompleteJobs
// statement (and so one commit) for every attempt that finished while the
// last batch was being written. A lone attempt is written at once.
type completions = groupcommit.Group[completion, bool]

// One committer for each kind: while one statement runs the next batch
// fills, so batches grow with load (go run ./bench -only jobs: ~70 jobs per
// statement instead of ~40 with two, and 4 replicas over NATS 7.6k → 10.3k
// jobs/s; Postgres, not the commit count, bounds one replica).
func (s *Service) newCompletions() *completions {
	return groupcommit.New(groupcommit.Config{MaxBatch: s.cfg.CompleteBatch, Committers: 1}, nil, s.completeBatch)
}

var completeJobsSQL = schema.Query("CompleteJobs")

// completeBatch answers each attempt with whether its job was completed
// (false: its lease was lost), or every attempt with the statement's error;
// nothing of a failed statement was written.
func (s *Service) completeBatch(batch []*groupcommit.Request[completion, bool]) {
	live := batch[:0]
	for _, r := range batch {
		if err := r.Ctx.Err(); err != nil {
			r.Answer(false, err)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	// In id order, so batches locking overlapping rows wait in one order.
	slices.SortFunc(live, func(a, b *groupcommit.Request[completion, bool]) int {
		return cmp.Compare(a.Value.ref.JobID, b.Value.ref.JobID)
	})
	n := len(live)
	ids, attempts := make([]int64, n), make([]int32, n)
	partitions, leased, started := make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
	for i, r := range live {
		c := r.Value
		ids[i], attempts[i] = c.ref.JobID, int32(c.ref.Attempt)
		partitions[i], leased[i], started[i] = c.l.partition, c.l.leasedAt, c.l.started
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.workCtx), recordTimeout)
	defer cancel()
	done := make(map[int64]bool, n)
	rows, err := s.cfg.Pool.Query(ctx, completeJobsSQL, ids, attempts, partitions, leased, started, s.cfg.WorkerID)
	if err == nil {
		for rows.Next() {
			var id int64
			if err = rows.Scan(&id); err != nil {
				break
			}
			done[id] = true
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		err = fmt.Errorf("complete %d jobs (ids %d..%d): %w", n, ids[0], ids[n-1], err)
	}
	for _, r := range live {
		r.Answer(err == nil && done[r.Value.ref.JobID], err)
	}
}

// takes takes attempts in batches: one TakeJobs statement for every attempt
// that started while the last batch was being taken. A batch holds only
// attempts that have a concurrency slot, so it holds no more bodies than
// taking them one by one would.
type takes = groupcommit.Group[bus.Ref, taken]

func (s *Service) newTakes() *takes {
	return groupcommit.New(groupcommit.Config{MaxBatch: s.cfg.TakeBatch, Committers: 1}, nil, s.takeBatch)
}

var takeJobsSQL = schema.Query("TakeJobs")

// takeBatch answers each attempt with what was taken (a zero taken: not this
// consumer's to take), or every attempt with the statement's error; nothing
// of a failed statement was taken.
func (s *Service) takeBatch(batch []*groupcommit.Request[bus.Ref, taken]) {
	live := batch[:0]
	for _, r := range batch {
		if err := r.Ctx.Err(); err != nil {
			r.Answer(taken{}, err)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	slices.SortFunc(live, func(a, b *groupcommit.Request[bus.Ref, taken]) int {
		return cmp.Compare(a.Value.JobID, b.Value.JobID)
	})
	n := len(live)
	ids, attempts, handlers, events, partitions := make([]int64, n), make([]int32, n), make([]string, n), make([]int64, n), make([]time.Time, n)
	for i, r := range live {
		ids[i], attempts[i], handlers[i], events[i] = r.Value.JobID, int32(r.Value.Attempt), r.Value.Handler, r.Value.EventID
		partitions[i] = r.Value.EventReceivedAt
	}
	// The takers' contexts all end with the service's work context.
	got := make(map[int64]taken, n)
	rows, err := s.cfg.Pool.Query(s.workCtx, takeJobsSQL, ids, attempts, handlers, events, s.cfg.WorkerID, s.cfg.LeaseExtend, partitions)
	if err == nil {
		for rows.Next() {
			var id int64
			t, serr := scanTaken(bus.Ref{}, rows, &id)
			if serr != nil {
				err = serr
				break
			}
			got[id] = t
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		err = fmt.Errorf("take %d attempts (job ids %d..%d): %w", n, ids[0], ids[n-1], err)
	}
	for _, r := range live {
		t := got[r.Value.JobID]
		if t.ev != nil {
			t.ev.JobID, t.ev.Handler = r.Value.JobID, r.Value.Handler
		}
		r.Answer(t, err)
	}
}
