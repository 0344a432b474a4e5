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

func (s *Service) newCompletions() *completions {
	return groupcommit.New(groupcommit.Config{MaxBatch: s.cfg.CompleteBatch, Committers: 2}, nil, s.completeBatch)
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
