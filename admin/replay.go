package admin

import (
	"cmp"
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
//   - JobID: that one job (with ExpectStatus and ExpectReplays, only while
//     it still has that status and that replay count);
//   - Handler with DeadLetters: every dead letter of the handler;
//   - Handler with at least one of Provider, EventType, Since, Until: every
//     event matching the filter, to that handler: its existing jobs are
//     re-queued (except leased ones), and the events its enabled
//     subscriptions match but that have no job of it yet get one.
type ReplayRequest struct {
	JobID int64
	// ExpectStatus, with JobID, is the status the job was seen in when the
	// replay was asked for (the dashboard's Replay button sends the one it
	// was rendered for): a job that has moved since is refused
	// (ErrConflict), so a stale page's button for a dead letter never
	// re-runs a job someone else replayed and its handler completed
	// meanwhile. Checked on the job's row locked for the replay, in its
	// transaction. "" checks nothing.
	ExpectStatus string
	// ExpectReplays, with JobID, is how many times the job had been
	// replayed when the replay was asked for (Job.Replays,
	// DeadLetter.Replays: its replay markers), the job's version beside
	// its status: a job replayed since is refused (ErrConflict) even when
	// it is back in the status it was seen in (a completed job replayed and
	// completed again, a dead letter replayed and dead-lettered again), so
	// a stale page's button never runs its handler once more. The
	// dashboard's Replay buttons send it. Checked on the locked row, as
	// ExpectStatus. nil checks nothing.
	ExpectReplays *int
	Handler       string
	DeadLetters   bool
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
	// narrow it; nothing is re-queued. Replay folds the arrivals not yet
	// folded into event_types first (as the streamer does every
	// silence.types_every), so every event committed before it counts.
	Unrouted bool
	// MaxTypesPerSource is the cap an Unrouted replay folds event types
	// with: the configuration's silence.max_types_per_source, as the
	// streamer folds. Defaults to 100 (that setting's default).
	MaxTypesPerSource int
	// DryRun counts what the replay would do and changes nothing (an
	// Unrouted one still folds event types first, so that it counts what
	// the run would: bookkeeping the streamer does anyway, no job touched).
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
	case r.MaxTypesPerSource < 0:
		return invalid("max types per source %d: must not be negative", r.MaxTypesPerSource)
	case r.ExpectStatus != "" && !jobStatuses[r.ExpectStatus]:
		return invalid("expected status %q: want pending, leased, completed, failed or dead_letter", r.ExpectStatus)
	case r.ExpectStatus != "" && r.JobID == 0:
		return invalid("an expected status is that of one job: give it with a job id")
	case r.ExpectReplays != nil && *r.ExpectReplays < 0:
		return invalid("expected replays %d: a replay count is not negative", *r.ExpectReplays)
	case r.ExpectReplays != nil && r.JobID == 0:
		return invalid("an expected replay count is that of one job: give it with a job id")
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
	if req.Unrouted {
		// Which events are unrouted is read from event_types, which the
		// streamer folds only every silence.types_every (and never while
		// none runs): fold first, or the events that arrived since its last
		// fold are missed. In a transaction of its own, before the
		// replay's, so the fold's lock (pg_advisory_xact_lock, which a
		// concurrent fold of the streamer or of inlet events types waits
		// on) is not held for the whole replay; an event committed after
		// it is a later arrival, as after the CLI's fold.
		if err := FoldEventTypes(ctx, db, cmp.Or(req.MaxTypesPerSource, defaultMaxTypesPerSource)); err != nil {
			return ReplayResult{}, fmt.Errorf("replay %s: %w", req.describe(), err)
		}
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

// defaultMaxTypesPerSource is silence.max_types_per_source's default
// (monitor.DefaultMaxTypesPerSource, a package admin does not import).
const defaultMaxTypesPerSource = 100

// jobStatuses are the values of jobs.status.
var jobStatuses = map[string]bool{"pending": true, "leased": true, "completed": true, "failed": true, "dead_letter": true}

// statusPhrase is a job status as a message says it ("no longer a dead
// letter", "it is completed now").
func statusPhrase(status string) string {
	if status == "dead_letter" {
		return "a dead letter"
	}
	return status
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
		job, err := q.AdminLockJob(ctx, req.JobID)
		if errors.Is(err, pgx.ErrNoRows) {
			return plan, notFound("no such job")
		}
		if err != nil {
			return plan, err
		}
		status := job.Status
		// The row is locked (FOR UPDATE, which in READ COMMITTED reads its
		// latest committed version) until the replay commits, so the status
		// checked here is the one runReplay re-queues from, in the same
		// transaction, dry run or not. Checked before leased, so a dead
		// letter replayed and claimed meanwhile says it moved.
		if req.ExpectStatus != "" && status != req.ExpectStatus {
			return plan, conflict("no longer %s: it is %s now", statusPhrase(req.ExpectStatus), statusPhrase(status))
		}
		// The status alone misses a job that went back to it (completed,
		// replayed, completed again): its replay count tells.
		if req.ExpectReplays != nil {
			n, err := q.AdminJobReplays(ctx, queries.AdminJobReplaysParams{JobID: req.JobID, EventReceivedAt: job.EventReceivedAt})
			if err != nil {
				return plan, fmt.Errorf("count its replays: %w", err)
			}
			if want := *req.ExpectReplays; int(n) != want {
				if int(n) > want {
					return plan, conflict("replayed meanwhile (replay count %d now, %d when asked): it is %s now", n, want, statusPhrase(status))
				}
				return plan, conflict("its replay count is %d, not %d as asked", n, want)
			}
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
