package consumers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers/bus"
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
// (false: its lease was lost), or with the statement's error; nothing of a
// failed statement was written. While Postgres is unavailable the
// statement is tried again (retryWhileUnavailable's waits, each try within
// recordTimeout) for the attempts whose callers still wait and whose
// leases have not run out; the others are answered with the error as
// their turn ends. Answered at the first failure, every success finishing
// during a database restart was lost, and the reaper counted it
// lease_expired (review helper-297).
func (s *Service) completeBatch(batch []*groupcommit.Request[completion, bool]) {
	live := waiting(batch, time.Time{}, nil)
	wait := outcomeRetryFirst
	for len(live) > 0 {
		cs := make([]completion, len(live))
		for i, r := range live {
			cs[i] = r.Value
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.workCtx), recordTimeout)
		done, err := s.completeJobs(ctx, cs)
		cancel()
		if err != nil && outcomeRetryable(err) {
			// Those whose lease has run out are answered now; the others
			// wait, at most until the last of their leases runs out.
			now := time.Now()
			if live = waiting(live, now, err); len(live) == 0 {
				return
			}
			var until time.Time
			for _, r := range live {
				if end := r.Value.l.end.until(); end.After(until) {
					until = end
				}
			}
			time.Sleep(min(wait, until.Sub(now)))
			wait = min(2*wait, outcomeRetryMax)
			if live = waiting(live, time.Time{}, err); len(live) == 0 {
				return
			}
			continue
		}
		for _, r := range live {
			// The bus may have delivered one attempt twice and both runs ended
			// in this batch: the row was completed once, and the second outcome
			// is fenced out as it would be in a later statement.
			id := r.Value.ref.JobID
			r.Answer(err == nil && done[id], err)
			delete(done, id)
		}
		return
	}
}

// waiting returns the requests of batch still to be written, and answers
// the others: with their caller's context's error when it gave up, and,
// when now is not zero, with err when their lease has run out by now.
func waiting(batch []*groupcommit.Request[completion, bool], now time.Time, err error) []*groupcommit.Request[completion, bool] {
	live := batch[:0]
	for _, r := range batch {
		switch {
		case r.Ctx.Err() != nil:
			r.Answer(false, r.Ctx.Err())
		case !now.IsZero() && !now.Before(r.Value.l.end.until()):
			r.Answer(false, err)
		default:
			live = append(live, r)
		}
	}
	return live
}

// completeJobs records successes in one CompleteJobs statement and returns
// the ids completed; an id missing lost its lease.
func (s *Service) completeJobs(ctx context.Context, cs []completion) (map[int64]bool, error) {
	at := time.Now() // before the statement's transaction begins: its completed_at
	done, err := s.completeJobsOn(ctx, s.cfg.Pool, cs)
	if err == nil {
		s.completed.Add(int64(len(done)))
	}
	if err == nil && len(s.breakers) > 0 {
		// Committed: the handlers' circuits close. (A handler's own
		// transaction closes its circuit once it has committed.)
		var ok []completion
		for _, c := range cs {
			if done[c.ref.JobID] {
				ok = append(ok, c)
			}
		}
		s.succeeded(ok, at)
	}
	return done, err
}

// querier runs CompleteJobs: the pool, or a handler's transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// completeJobsOn is completeJobs on q. It counts the statement, not the
// completions: in a handler's transaction they count once it commits.
func (s *Service) completeJobsOn(ctx context.Context, q querier, cs []completion) (map[int64]bool, error) {
	// In id order, so batches locking overlapping rows wait in one order.
	slices.SortFunc(cs, func(a, b completion) int { return cmp.Compare(a.ref.JobID, b.ref.JobID) })
	n := len(cs)
	ids, attempts := make([]int64, n), make([]int32, n)
	partitions, leased := make([]time.Time, n), make([]time.Time, n)
	for i, c := range cs {
		ids[i], attempts[i] = c.ref.JobID, int32(c.ref.Attempt) //nolint:gosec // G115: Ref.Attempt is jobs.attempt, an int4 the streamer read
		partitions[i], leased[i] = c.l.partition, c.l.leasedAt
	}
	done := make(map[int64]bool, n)
	s.completeStatements.Add(1)
	rows, err := q.Query(ctx, completeJobsSQL, ids, attempts, partitions, leased, s.cfg.WorkerID)
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
		return nil, fmt.Errorf("complete %d jobs (ids %d..%d): %w", n, ids[0], ids[n-1], err)
	}
	return done, nil
}

// takes reads attempts in batches. A request is the references of one bus
// message that start together (each holding a concurrency slot, so a batch
// holds no more bodies than reading them one by one would), and one
// FetchJobs statement reads every request queued while the last read ran.
// Nothing waits for company: a message's references arrive as one request,
// so a lone message is read at once.
type takes = groupcommit.Group[[]bus.Ref, readAnswer]

// readAnswer is one request's share of a batched read: got[i] and errs[i]
// answer its i-th reference.
type readAnswer struct {
	got  []taken
	errs []error
}

func (s *Service) newTakes() *takes {
	return groupcommit.New(groupcommit.Config{MaxBatch: s.cfg.TakeBatch, MaxBytes: int64(s.cfg.TakeBatch), MaxWait: -1, Committers: 2},
		func(refs []bus.Ref) int64 { return int64(len(refs)) }, s.takeBatch)
}

// takeBatch answers each request with what was read for its references
// (not found: the lease is not current), or with the statement's error.
func (s *Service) takeBatch(batch []*groupcommit.Request[[]bus.Ref, readAnswer]) {
	live := batch[:0]
	var refs []bus.Ref
	for _, r := range batch {
		if err := r.Ctx.Err(); err != nil {
			r.Answer(readAnswer{}, err)
			continue
		}
		live = append(live, r)
		refs = append(refs, r.Value...)
	}
	if len(live) == 0 {
		return
	}
	// The readers' contexts all end with the service's work context.
	got, errs := s.readRefs(s.workCtx, refs)
	for _, r := range live {
		n := len(r.Value)
		r.Answer(readAnswer{got: got[:n:n], errs: errs[:n:n]}, nil)
		got, errs = got[n:], errs[n:]
	}
}

// messageRead is the read the attempts of one message's references that
// start together share: the first of them to need it reads them all (one
// request to takes), the others wait for its answer.
type messageRead struct {
	s    *Service
	refs []bus.Ref
	once sync.Once
	ans  readAnswer
	err  error
}

// get returns the read of m.refs[i], once: m lets go of it, so an event
// is not kept in memory by the attempts of its group still running.
func (m *messageRead) get(ctx context.Context, i int) (taken, error) {
	m.once.Do(func() { m.ans, m.err = m.s.takes.Do(ctx, m.refs) })
	if m.err != nil {
		return taken{}, m.err
	}
	t, err := m.ans.got[i], m.ans.errs[i]
	m.ans.got[i] = taken{}
	return t, err
}

// readRefs reads refs' attempts: got[i] is refs[i]'s, or errs[i] why it
// could not be read. FetchJobs answers by job id, so one statement reads
// each job once: a batch can hold two references to one job (a bus
// redelivery, or a stale reference beside the current one), and answered
// by id both would be found, sharing one Event. Repeats go to a statement
// of their own, where only the reference whose lease is current is found.
func (s *Service) readRefs(ctx context.Context, refs []bus.Ref) (got []taken, errs []error) {
	got, errs = make([]taken, len(refs)), make([]error, len(refs))
	pending := make([]int, len(refs))
	for i := range refs {
		pending[i] = i
	}
	for len(pending) > 0 {
		var round, repeats []int
		seen := make(map[int64]bool, len(pending))
		for _, i := range pending {
			if seen[refs[i].JobID] {
				repeats = append(repeats, i)
				continue
			}
			seen[refs[i].JobID] = true
			round = append(round, i)
		}
		batch := make([]bus.Ref, len(round))
		for k, i := range round {
			batch[k] = refs[i]
		}
		read, err := s.fetch(ctx, batch)
		if err != nil {
			err = fmt.Errorf("read %d attempts (job ids %d..%d): %w", len(batch), batch[0].JobID, batch[len(batch)-1].JobID, err)
		}
		for _, i := range round {
			got[i], errs[i] = read[refs[i].JobID], err
		}
		pending = repeats
	}
	return got, errs
}
