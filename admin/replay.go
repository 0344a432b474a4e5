package admin

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/filter"
	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/schema/queries"
)

// DefaultMaxJobs is the most jobs one replay touches unless
// ReplayRequest.MaxJobs says otherwise.
const DefaultMaxJobs = 10000

// ReplayRequest says what to replay. Exactly one of three shapes:
//
//   - JobID: that one job;
//   - Handler with DeadLetters: every dead letter of the handler;
//   - Handler with at least one of Provider, EventType, Since, Until: every
//     event matching the filter, to that handler: its existing jobs are
//     re-queued (except leased ones), and the events its enabled
//     subscriptions match but that have no job of it yet get one.
type ReplayRequest struct {
	JobID       int64
	Handler     string
	DeadLetters bool
	// Provider (exact source name), EventType (glob), Since (inclusive) and
	// Until (exclusive, on received_at) filter the events of a handler
	// replay.
	Provider     string
	EventType    string
	Since, Until time.Time
	// Unrouted, with Handler, creates the handler's jobs for the events that
	// created no job when they arrived (event_types counts them as
	// unrouted; jobs another handler's catch-up created do not count) and
	// that its enabled subscriptions match: the catch-up for a handler
	// subscribed after they arrived, in any order with other such handlers. Provider, EventType, Since and Until
	// narrow it; nothing is re-queued.
	Unrouted bool
	// DryRun counts what the replay would do and changes nothing.
	DryRun bool
	// MaxJobs refuses (ErrConflict) a replay that would touch more jobs, so
	// a mistyped filter cannot re-run a whole history. Defaults to
	// DefaultMaxJobs.
	MaxJobs int
}

// ReplayResult says what a replay did, or with DryRun would do.
type ReplayResult struct {
	DryRun bool `json:"dry_run"`
	// Requeued existing jobs, put back to pending.
	Requeued int `json:"requeued"`
	// Created jobs, for events the handler had none for.
	Created int `json:"created"`
	// SkippedLeased jobs matched but are in flight, and were left alone.
	SkippedLeased int `json:"skipped_leased"`
}

// Touched is how many jobs the replay re-queued or created.
func (r ReplayResult) Touched() int { return r.Requeued + r.Created }

// Validate reports whether r is one of the three shapes (ErrInvalid if not),
// without a database. Replay calls it first.
func (r ReplayRequest) Validate() error {
	if err := checkText("handler", r.Handler, "source", r.Provider, "event_type", r.EventType); err != nil {
		return err
	}
	filter := r.Provider != "" || r.EventType != "" || !r.Since.IsZero() || !r.Until.IsZero()
	switch {
	case r.JobID < 0:
		return invalid("job id %d: must be positive", r.JobID)
	case r.MaxJobs < 0:
		return invalid("max jobs %d: must not be negative", r.MaxJobs)
	case r.JobID > 0 && (r.Handler != "" || r.DeadLetters || r.Unrouted || filter):
		return invalid("a job id replays that job alone: give no handler, dead letters or filter with it")
	case r.JobID > 0:
		return nil
	case r.Handler == "":
		return invalid("give a job id, or a handler (with dead letters, or with a filter)")
	case r.DeadLetters && filter:
		return invalid("dead letters replays all of the handler's: give no filter with it")
	case r.Unrouted && r.DeadLetters:
		return invalid("unrouted events have no jobs, so no dead letters: give one of the two")
	case !r.DeadLetters && !filter && !r.Unrouted:
		return invalid("replaying events to handler %q needs a filter (source, event type, since or until): "+
			"to replay its whole history, say so with a type of \"*\"", r.Handler)
	}
	return checkRange(r.Since, r.Until)
}

// Replay re-queues jobs, and creates a handler's missing ones, as req says,
// in one transaction (see the package documentation for what a replayed job
// looks like). It never changes an event.
func Replay(ctx context.Context, db DB, req ReplayRequest) (ReplayResult, error) {
	if err := req.Validate(); err != nil {
		return ReplayResult{}, err
	}
	maxJobs := req.MaxJobs
	if maxJobs == 0 {
		maxJobs = DefaultMaxJobs
	}
	res := ReplayResult{DryRun: req.DryRun}
	err := writeTx(ctx, db, func(tx pgx.Tx) error {
		plan, err := planReplay(ctx, tx, req)
		if err != nil {
			return err
		}
		// A dry run answers as the run would: refused over the limit.
		if plan.Touched() > maxJobs {
			return conflict("it would touch %d jobs (%d re-queued, %d created), more than the limit of %d: "+
				"narrow the filter or raise the limit (--max-jobs, max_jobs)", plan.Touched(), plan.Requeued, plan.Created, maxJobs)
		}
		if req.DryRun {
			res = plan
			res.DryRun = true
			return nil
		}
		if res, err = runReplay(ctx, tx, req); err != nil {
			return err
		}
		// Events that arrived while it ran can push it over: refuse it whole
		// then too (the transaction rolls back).
		if res.Touched() > maxJobs {
			return conflict("it touched %d jobs, more than the limit of %d, as events kept arriving: "+
				"narrow the filter (--until) or raise the limit (--max-jobs, max_jobs)", res.Touched(), maxJobs)
		}
		if res.Touched() > 0 {
			if err := queries.New(tx).AdminNotifyJobs(ctx, notify.Channel); err != nil {
				return fmt.Errorf("notify streamers: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return ReplayResult{}, fmt.Errorf("replay %s: %w", req.describe(), err)
	}
	return res, nil
}

func (r ReplayRequest) describe() string {
	switch {
	case r.JobID > 0:
		return fmt.Sprintf("job %d", r.JobID)
	case r.DeadLetters:
		return fmt.Sprintf("dead letters of handler %q", r.Handler)
	case r.Unrouted:
		return fmt.Sprintf("unrouted events to handler %q", r.Handler)
	}
	return fmt.Sprintf("events to handler %q", r.Handler)
}

// planReplay counts what req would touch, without changing anything.
func planReplay(ctx context.Context, tx pgx.Tx, req ReplayRequest) (ReplayResult, error) {
	var plan ReplayResult
	q := queries.New(tx)
	if req.JobID > 0 {
		status, err := q.AdminLockJob(ctx, req.JobID)
		if errors.Is(err, pgx.ErrNoRows) {
			return plan, notFound("no such job")
		}
		if err != nil {
			return plan, err
		}
		if status == "leased" {
			return plan, conflict("it is leased (in flight): wait until it finishes or its lease expires")
		}
		plan.Requeued = 1
		return plan, nil
	}
	known, err := q.AdminHandlerKnown(ctx, req.Handler)
	if err != nil {
		return plan, err
	}
	subscribed := known.Subscribed
	if !subscribed && !known.HasJobs {
		return plan, notFound("no such handler (no enabled subscription, no jobs): start its consumer first")
	}
	if req.Provider != "" {
		// A misspelt --source would match nothing and replay 0 jobs
		// without a word: name it instead.
		ok, err := q.AdminSourceKnown(ctx, req.Provider)
		if err != nil {
			return plan, err
		}
		if !ok {
			return plan, notFound("no event of source %q is stored (sources are named as in the config's sources: section)", req.Provider)
		}
	}
	if req.DeadLetters {
		n, err := q.AdminCountDeadLetters(ctx, req.Handler)
		plan.Requeued = int(n)
		return plan, err
	}
	like := globLike(req.EventType)
	since, until := nullTime(req.Since), nullTime(req.Until)
	if req.Unrouted {
		if !subscribed {
			return plan, notFound("handler %q has no enabled subscription to match unrouted events with", req.Handler)
		}
		n, err := q.AdminCountUnroutedJobs(ctx, queries.AdminCountUnroutedJobsParams{
			Handler: req.Handler, Provider: req.Provider, EventTypeLike: like, Since: since, Until: until})
		if err != nil {
			return plan, err
		}
		plan.Created = int(n)
		filtered, err := plannedFiltered(ctx, tx, req)
		plan.Created += filtered
		return plan, err
	}
	counts, err := q.AdminCountFilterJobs(ctx, queries.AdminCountFilterJobsParams{
		Handler: req.Handler, Provider: req.Provider, EventTypeLike: like, Since: since, Until: until})
	if err != nil {
		return plan, err
	}
	plan.Requeued, plan.SkippedLeased = int(counts.Requeue), int(counts.Leased)
	if subscribed {
		n, err := q.AdminCountMissingJobs(ctx, queries.AdminCountMissingJobsParams{
			Handler: req.Handler, Provider: req.Provider, EventTypeLike: like, Since: since, Until: until})
		if err != nil {
			return plan, err
		}
		plan.Created = int(n)
		filtered, err := plannedFiltered(ctx, tx, req)
		if err != nil {
			return plan, err
		}
		plan.Created += filtered
	}
	return plan, nil
}

// plannedFiltered counts the jobs the handler's filtered subscriptions would
// create. The run creates the unfiltered subscriptions' jobs first, so an
// event one of those matches is left out here: the plan has counted it
// already, and the run creates its job once.
func plannedFiltered(ctx context.Context, tx pgx.Tx, req ReplayRequest) (int, error) {
	q := queries.New(tx)
	subs, err := q.AdminSubscriptions(ctx, req.Handler)
	if err != nil {
		return 0, err
	}
	filtered, err := q.AdminHandlerFilters(ctx, req.Handler)
	if err != nil {
		return 0, err
	}
	// A subscription is one per (handler, patterns): the enabled ones that
	// are not filtered are the unfiltered ones.
	type patterns struct{ provider, eventType string }
	hasFilter := map[patterns]bool{}
	for _, f := range filtered {
		hasFilter[patterns{f.ProviderPattern, f.EventTypePattern}] = true
	}
	var unfiltered []struct{ provider, eventType *regexp.Regexp }
	for _, s := range subs {
		if s.Enabled && !hasFilter[patterns{s.ProviderPattern, s.EventTypePattern}] {
			unfiltered = append(unfiltered, struct{ provider, eventType *regexp.Regexp }{
				filter.Pattern(s.ProviderPattern), filter.Pattern(s.EventTypePattern)})
		}
	}
	counted := func(provider, eventType string) bool {
		for _, u := range unfiltered {
			if u.provider.MatchString(provider) && u.eventType.MatchString(eventType) {
				return true
			}
		}
		return false
	}
	return missingFiltered(ctx, tx, req, false, counted)
}

// runReplay does it, batch by batch.
func runReplay(ctx context.Context, tx pgx.Tx, req ReplayRequest) (ReplayResult, error) {
	var res ReplayResult
	q := queries.New(tx)
	requeue := func(ids []int64) error {
		done, err := q.AdminRequeueJobs(ctx, queries.AdminRequeueJobsParams{JobIds: ids, DeadLettersOnly: req.DeadLetters})
		if err != nil {
			return err
		}
		res.Requeued += len(done)
		res.SkippedLeased += len(ids) - len(done) // leased (in flight), or no longer a dead letter
		return nil
	}
	if req.JobID > 0 {
		return res, requeue([]int64{req.JobID})
	}
	if req.Unrouted {
		return res, createAllMissing(ctx, tx, req, true, &res)
	}

	// Existing jobs, keyset over their ids.
	like := globLike(req.EventType)
	since, until := nullTime(req.Since), nullTime(req.Until)
	batch := func(after int64) ([]int64, error) {
		if req.DeadLetters {
			return q.AdminDeadLetterBatch(ctx, queries.AdminDeadLetterBatchParams{Handler: req.Handler, AfterID: after, BatchSize: batchSize})
		}
		return q.AdminFilterJobBatch(ctx, queries.AdminFilterJobBatchParams{Handler: req.Handler, Provider: req.Provider,
			EventTypeLike: like, Since: since, Until: until, AfterID: after, BatchSize: batchSize})
	}
	for after := int64(0); ; {
		ids, err := batch(after)
		if err != nil {
			return res, err
		}
		if len(ids) == 0 {
			break
		}
		if err := requeue(ids); err != nil {
			return res, err
		}
		if len(ids) < batchSize {
			break
		}
		after = ids[len(ids)-1]
	}
	if req.DeadLetters {
		return res, nil
	}

	// Missing jobs. Jobs just re-queued are not missing, so nothing is
	// touched twice.
	return res, createAllMissing(ctx, tx, req, false, &res)
}

// createAllMissing creates the missing jobs: first those of events a
// filtered subscription of the handler routes (its filter decides, as at
// arrival; the job takes the unfiltered subscriptions' settings too), then
// those of events only unfiltered ones route. The other order made the
// unfiltered subscriptions' job first, and the filtered ones' max_attempts
// and keys were lost on an event both route (review helper-140).
func createAllMissing(ctx context.Context, tx pgx.Tx, req ReplayRequest, unrouted bool, res *ReplayResult) error {
	filtered, err := missingFiltered(ctx, tx, req, true, nil)
	res.Created += filtered
	if err != nil {
		return err
	}
	return createMissing(ctx, tx, req, unrouted, res)
}

// createMissing runs AdminCreateMissingJobs (AdminCreateUnroutedJobs with
// unrouted) batch by batch, keyset over event ids.
func createMissing(ctx context.Context, tx pgx.Tx, req ReplayRequest, unrouted bool, res *ReplayResult) error {
	q := queries.New(tx)
	arg := queries.AdminCreateMissingJobsParams{Handler: req.Handler, Provider: req.Provider, EventTypeLike: globLike(req.EventType),
		Since: nullTime(req.Since), Until: nullTime(req.Until), BatchSize: batchSize}
	for {
		var r queries.AdminCreateMissingJobsRow
		var err error
		if unrouted {
			var u queries.AdminCreateUnroutedJobsRow
			u, err = q.AdminCreateUnroutedJobs(ctx, queries.AdminCreateUnroutedJobsParams{Handler: arg.Handler, Provider: arg.Provider,
				EventTypeLike: arg.EventTypeLike, Since: arg.Since, Until: arg.Until, AfterID: arg.AfterID, BatchSize: arg.BatchSize})
			r = queries.AdminCreateMissingJobsRow(u)
		} else {
			r, err = q.AdminCreateMissingJobs(ctx, arg)
		}
		if err != nil {
			return err
		}
		res.Created += int(r.Created)
		if r.LastEventID == 0 {
			return nil
		}
		arg.AfterID = r.LastEventID
	}
}
