// Package retention keeps the partitioned event log to its configured age:
// it creates the period partitions of events, jobs and job_attempts ahead of
// time and drops whole old periods, never single rows.
//
// A period is dropped only when all of it is older than the maximum age, none
// of its jobs is open (pending, leased or failed: a dead letter is finished),
// and every one of its events is sealed by an audit checkpoint. The drop
// records the period and the ids it held in webhook_ingress.retention_log, so
// inlet audit verify tells pruned events from removed ones. Everything runs as
// the owner of webhook_ingress; no application role may create or drop a
// partition. See schema/migrations/005_partitions.up.sql.
package retention

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema/queries"
)

// DB is what retention needs of a pool or connection.
type DB interface {
	queries.DBTX
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Intervals are the partition lengths there are, on UTC boundaries.
var Intervals = []string{"day", "week", "month"}

// Defaults.
const (
	DefaultInterval    = "week"
	DefaultAhead       = 4
	DefaultLockTimeout = 5 * time.Second
)

// ErrNotOwner means the connected role may not act as the owner of
// webhook_ingress, which partition maintenance needs.
var ErrNotOwner = errors.New("retention: not the owner of webhook_ingress")

// ErrPartitionOwner means an expired period's partition belongs to a role the
// connected one may not act as (a member of the owner role created it before
// migration 060): Run keeps the period, goes on with the others, and returns
// this with its report, naming the partitions and what to run.
var ErrPartitionOwner = errors.New("retention: partition not owned by the owner of webhook_ingress")

// Options says what Run does.
type Options struct {
	// MaxAge: a period whose end is more than MaxAge before the database's
	// now() is dropped (when nothing keeps it). 0 drops nothing.
	MaxAge time.Duration
	// Interval is the length of partitions created: day, week or month.
	Interval string
	// Ahead is how many periods past the current one to have partitions for
	// (DefaultAhead is what the configuration defaults to).
	Ahead int
	// DryRun reports what would be created and dropped and changes nothing.
	DryRun bool
	// LockTimeout bounds each wait for the partition locks; a period whose lock
	// is not granted in time is skipped this run.
	LockTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.Interval == "" {
		o.Interval = DefaultInterval
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	return o
}

// Validate reports the first bad option.
func (o Options) Validate() error {
	o = o.withDefaults()
	if !validInterval(o.Interval) {
		return fmt.Errorf("retention: partition interval %q: must be one of %s", o.Interval, strings.Join(Intervals, ", "))
	}
	if o.Ahead < 0 || o.Ahead > 366 {
		return fmt.Errorf("retention: partitions ahead %d: must be 0..366", o.Ahead)
	}
	if o.MaxAge < 0 {
		return fmt.Errorf("retention: max age %s: must not be negative", o.MaxAge)
	}
	return nil
}

func validInterval(s string) bool {
	for _, i := range Intervals {
		if s == i {
			return true
		}
	}
	return false
}

// Period is one partition's time range, [Start, End).
type Period struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Verdict is what Run did, or would do, with a period past the maximum age.
type Verdict string

// The verdicts: Dropped, the partition was dropped; WouldDrop, a dry run
// would drop it; Kept, it stays (Partition.Reason says why).
const (
	Dropped   Verdict = "dropped"
	WouldDrop Verdict = "would_drop"
	Kept      Verdict = "kept"
)

// Partition is a period past the maximum age and what became of it.
type Partition struct {
	Period
	Name          string  `json:"partition"`
	Events        int64   `json:"events"`
	Jobs          int64   `json:"jobs"`
	OpenJobs      int64   `json:"open_jobs"`
	DeadLetters   int64   `json:"dead_letters"`
	Attempts      int64   `json:"attempts"`
	MaxEventID    int64   `json:"max_event_id,omitempty"`
	SealedThrough int64   `json:"sealed_through"`
	Verdict       Verdict `json:"verdict"`
	// Reason says why a period was kept.
	Reason string `json:"reason,omitempty"`
}

// Report is the outcome of Run.
type Report struct {
	DryRun bool `json:"dry_run"`
	// Now is the database's clock; Cutoff is Now - MaxAge (zero when MaxAge is 0).
	Now    time.Time  `json:"now"`
	Cutoff *time.Time `json:"cutoff,omitempty"`
	// Created are the periods partitioned this run (or that would be).
	Created []Period `json:"created"`
	// Through is the end of the newest period partition.
	Through *time.Time `json:"partitioned_through,omitempty"`
	// Partitions are the periods past the cutoff, oldest first.
	Partitions []Partition `json:"partitions"`
	// Default counts the events in the default partition: they arrived when no
	// period partition covered their time. They are kept and never dropped.
	Default DefaultPartition `json:"default_partition"`
	// DedupeKeys counts the dedupe keys deleted after the drops: of this
	// run's dropped periods and of those an interrupted run left.
	DedupeKeys DedupeKeys `json:"dedupe_keys"`
}

// DedupeKeys is what a run deleted from event_keys: the keys of Periods
// dropped periods, Deleted keys in all.
type DedupeKeys struct {
	Periods int64 `json:"periods"`
	Deleted int64 `json:"deleted"`
}

// DefaultPartition describes the rows of the default partition.
type DefaultPartition struct {
	Events int64      `json:"events"`
	Oldest *time.Time `json:"oldest,omitempty"`
	Newest *time.Time `json:"newest,omitempty"`
}

// Dropped counts the partitions dropped (or that would be, on a dry run).
func (r Report) Dropped() int { return r.count(Dropped) + r.count(WouldDrop) }

// Kept counts the expired partitions something kept.
func (r Report) Kept() int { return r.count(Kept) }

func (r Report) count(v Verdict) int {
	n := 0
	for _, p := range r.Partitions {
		if p.Verdict == v {
			n++
		}
	}
	return n
}

// CheckOwner returns ErrNotOwner, naming both roles, unless the connected
// role may act as the owner of webhook_ingress.events.
func CheckOwner(ctx context.Context, db DB) error {
	r, err := queries.New(db).RetentionOwner(ctx)
	if err != nil {
		return fmt.Errorf("retention: look up the owner of webhook_ingress.events: %w", err)
	}
	if !r.MayActAsOwner {
		return fmt.Errorf("%w: connected as %s; partitions are created and dropped as %s (the role that ran inlet migrate)", ErrNotOwner, r.ConnectedAs, r.Owner)
	}
	return nil
}

// EnsurePartitions creates the period partitions from the newest one through
// ahead periods of interval past now, and returns those it created.
func EnsurePartitions(ctx context.Context, db DB, interval string, ahead int, lockTimeout time.Duration) ([]Period, error) {
	o := Options{Interval: interval, Ahead: ahead, LockTimeout: lockTimeout}.withDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	var created []Period
	err := inTx(ctx, db, o.LockTimeout, func(tx pgx.Tx) error {
		rows, err := queries.New(tx).RetentionCreatePartitions(ctx, queries.RetentionCreatePartitionsParams{Period: o.Interval, Ahead: int32(min(o.Ahead, math.MaxInt32))}) //nolint:gosec // G115: clamped to int32 just before (the section allows 0..366)
		if err != nil {
			return err
		}
		created = []Period{}
		for _, r := range rows {
			created = append(created, Period{Start: r.PeriodStart, End: r.PeriodEnd})
		}
		return nil
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return nil, fmt.Errorf("retention: create %s partitions %d ahead: locks not granted within %s (a long query on the log, or another inlet retention or inlet migrate changing partitions): try again later: %w",
				o.Interval, o.Ahead, o.LockTimeout, err)
		}
		return nil, fmt.Errorf("retention: create %s partitions %d ahead: %w", o.Interval, o.Ahead, err)
	}
	return created, nil
}

// Run creates partitions ahead and drops the periods past opts.MaxAge that
// nothing keeps, each in its own transaction. A period kept (open jobs,
// unsealed events, lock not granted) is in the report, not an error; the
// error is for failures to talk to the database. Two come with the report:
// a period whose partition another role owns is kept and the run goes on,
// then returns ErrPartitionOwner; and a failure to delete the dropped
// periods' dedupe keys.
func Run(ctx context.Context, db DB, opts Options) (Report, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return Report{}, err
	}
	if err := CheckOwner(ctx, db); err != nil {
		return Report{}, err
	}
	rep := Report{DryRun: opts.DryRun, Created: []Period{}, Partitions: []Partition{}}
	if !opts.DryRun {
		created, err := EnsurePartitions(ctx, db, opts.Interval, opts.Ahead, opts.LockTimeout)
		if err != nil {
			return Report{}, err
		}
		rep.Created = created
	}
	periods, now, err := partitions(ctx, db)
	if err != nil {
		return Report{}, err
	}
	rep.Now = now
	if len(periods) > 0 {
		end := periods[len(periods)-1].End
		rep.Through = &end
	}
	if opts.DryRun {
		rep.Created = wouldCreate(rep.Through, now, opts)
	}
	def, err := queries.New(db).RetentionDefaultPartition(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("retention: read the default partition: %w", err)
	}
	rep.Default.Events = def.Events
	if def.Events > 0 {
		rep.Default.Oldest, rep.Default.Newest = &def.Oldest, &def.Newest
	}
	if opts.MaxAge == 0 {
		return rep, deleteDueKeys(ctx, db, &rep)
	}
	cutoff := now.Add(-opts.MaxAge)
	rep.Cutoff = &cutoff
	var unowned []error
	for _, p := range periods {
		if p.End.After(cutoff) {
			break
		}
		part, err := expire(ctx, db, p, opts)
		if errors.Is(err, errGone) {
			continue // another run dropped it after this one listed it
		}
		if errors.Is(err, ErrPartitionOwner) {
			// Kept, and the run fails once it has done the rest: an owner
			// must act, and the periods after it need not wait for that.
			unowned = append(unowned, err)
			err = nil
		}
		if err != nil {
			return Report{}, err
		}
		rep.Partitions = append(rep.Partitions, part)
	}
	return rep, errors.Join(append(unowned, deleteDueKeys(ctx, db, &rep))...)
}

// deleteDueKeys deletes the dedupe keys of the periods dropped by this run
// and of any an interrupted run dropped without deleting them (054), after
// the drops and outside their locks (044): an old key arriving meanwhile
// waits on a row. Not on a dry run. On failure rep is still the run's
// report: the periods stay recorded, and the next run deletes their keys.
func deleteDueKeys(ctx context.Context, db DB, rep *Report) error {
	if rep.DryRun {
		return nil
	}
	q := queries.New(db)
	pending, err := q.RetentionKeysPending(ctx)
	if err == nil && pending {
		var d queries.RetentionDeleteDueKeysRow
		if d, err = q.RetentionDeleteDueKeys(ctx); err == nil {
			rep.DedupeKeys.Periods, rep.DedupeKeys.Deleted = d.Periods, d.Keys
		}
	}
	if err != nil {
		return fmt.Errorf("retention: delete the dedupe keys of dropped periods (they stay recorded: the next run deletes them; until then a redelivery of a dropped event is answered duplicate): %w", err)
	}
	return nil
}

type namedPeriod struct {
	Period
	name string
}

func partitions(ctx context.Context, db DB) ([]namedPeriod, time.Time, error) {
	rows, err := queries.New(db).RetentionPartitions(ctx)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("retention: list partitions: %w", err)
	}
	var out []namedPeriod
	var now time.Time
	for _, r := range rows {
		out = append(out, namedPeriod{Period: Period{Start: r.PeriodStart, End: r.PeriodEnd}, name: r.EventsPartition})
		now = r.Now
	}
	if len(out) == 0 {
		if err := db.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
			return nil, time.Time{}, fmt.Errorf("retention: read the clock: %w", err)
		}
	}
	return out, now, nil
}

// wouldCreate is what EnsurePartitions would create (ignoring rows in the
// default partition): the dry run's answer.
func wouldCreate(through *time.Time, now time.Time, o Options) []Period {
	trunc := func(t time.Time) time.Time {
		t = t.UTC()
		switch o.Interval {
		case "day":
			return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		case "week":
			d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
			return d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7)) // ISO weeks start on Monday
		default:
			return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		}
	}
	step := func(t time.Time) time.Time {
		switch o.Interval {
		case "day":
			return t.AddDate(0, 0, 1)
		case "week":
			return t.AddDate(0, 0, 7)
		default:
			return t.AddDate(0, 1, 0)
		}
	}
	stop := trunc(now)
	for i := 0; i <= o.Ahead; i++ {
		stop = step(stop)
	}
	start := trunc(now)
	if through != nil {
		start = *through
	}
	out := []Period{}
	for start.Before(stop) {
		next := step(trunc(start))
		out = append(out, Period{Start: start, End: next})
		start = next
	}
	return out
}

// errGone is expire's answer for a period whose partition no longer exists:
// another retention run dropped it after this one listed it.
var errGone = errors.New("retention: partition gone")

// expire drops one period, or says what keeps it. The read and the drop are
// one transaction under RetentionSerialize: a run on another host neither
// drops the period between them nor reads its partitions while this one
// locks them for the drop (their locks, taken in opposite orders, deadlocked).
func expire(ctx context.Context, db DB, p namedPeriod, o Options) (Partition, error) {
	part := Partition{Period: p.Period, Name: p.name}
	step := "read"
	err := inTx(ctx, db, o.LockTimeout, func(tx pgx.Tx) error {
		q := queries.New(tx)
		st, err := readStatus(ctx, tx, p)
		part.Events, part.Jobs, part.OpenJobs, part.DeadLetters, part.Attempts, part.SealedThrough =
			st.Events, st.Jobs, st.OpenJobs, st.DeadLetters, st.Attempts, st.SealedThrough
		if st.MaxEventID != nil {
			part.MaxEventID = *st.MaxEventID
		}
		if err != nil {
			return err
		}
		switch {
		case part.OpenJobs > 0:
			part.Verdict, part.Reason = Kept, fmt.Sprintf("%d jobs not finished (pending, leased or failed)", part.OpenJobs)
			return nil
		case part.MaxEventID > part.SealedThrough:
			part.Verdict, part.Reason = Kept, fmt.Sprintf("events not sealed yet (ids up to %d, sealed through %d)", part.MaxEventID, part.SealedThrough)
			return nil
		case o.DryRun:
			part.Verdict = WouldDrop
			return nil
		}
		step = "drop"
		d, err := q.RetentionDropPartition(ctx, p.Start)
		if err != nil {
			return err
		}
		part.Events, part.Jobs, part.Attempts, part.SealedThrough = d.Events, d.Jobs, d.Attempts, d.SealedThrough
		part.Verdict = Dropped
		// Its dedupe keys go after the drop, outside its locks (044):
		// drop_partition's retention_log row records the period in
		// retention_keys_due (057), so a later run deletes them if this one
		// stops first, whichever version dropped it.
		return nil
	})
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
	case isUndefinedTable(err):
		return Partition{}, errGone
	case errors.As(err, &pgErr) && pgErr.Code == "55006": // object_in_use: changed since the check
		part.Verdict, part.Reason = Kept, pgErr.Message
	case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available
		part.Verdict, part.Reason = Kept, fmt.Sprintf("busy: its locks were not granted within %s%s; try again later", o.LockTimeout, lockHolders(ctx, db, p.Start))
	case errors.As(err, &pgErr) && pgErr.Code == "40P01": // deadlock_detected: another transaction's locks crossed ours
		part.Verdict, part.Reason = Kept, "busy: a transaction holding its tables was in the way; try again later"
	case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege
		held, ok := notOwned(ctx, db, p.Start)
		if !ok {
			return Partition{}, fmt.Errorf("retention: %s partition %s: %w", step, p.name, err)
		}
		part.Verdict, part.Reason = Kept, held
		return part, fmt.Errorf("%w: %s partition %s: %w: %s", ErrPartitionOwner, step, p.name, err, held)
	default:
		return Partition{}, fmt.Errorf("retention: %s partition %s: %w", step, p.name, err)
	}
	return part, nil
}

// lockHolders names the sessions holding locks on what a drop of the period
// starting at start locks, read after the wait failed (so the one that held
// it may be gone): ", held by pid 4242 (inlet-streamer, role
// inlet_streamer, idle in transaction, in a transaction for 31s,
// AccessShareLock)". Empty when
// it cannot tell; the operator's question is who to wait for or stop.
func lockHolders(ctx context.Context, db DB, start time.Time) string {
	rows, err := queries.New(db).RetentionLockHolders(ctx, start)
	if err != nil || len(rows) == 0 {
		return ""
	}
	holders := make([]database.LockHolder, len(rows))
	for i, r := range rows {
		holders[i] = database.LockHolder{PID: int(r.Pid), Application: r.ApplicationName, Role: r.Role,
			State: r.State, XactSeconds: r.XactSeconds, Modes: r.Modes}
	}
	return database.DescribeLockHolders(holders)
}

// notOwned says which partitions of the period starting at start belong to
// a role the connected one may not act as (created by another member of the
// owner role before 060 made create_partitions give them to the owner), and
// what to run about them; false when none does.
func notOwned(ctx context.Context, db DB, start time.Time) (string, bool) {
	rows, err := queries.New(db).RetentionNotOwned(ctx, start)
	if err != nil || len(rows) == 0 {
		return "", false
	}
	var owner string
	byRole := map[string][]string{}
	var roles, fixes []string
	for _, r := range rows {
		owner = r.ParentOwner
		if byRole[r.Owner] == nil {
			roles = append(roles, r.Owner)
		}
		byRole[r.Owner] = append(byRole[r.Owner], r.Partition)
		fixes = append(fixes, fmt.Sprintf("ALTER TABLE webhook_ingress.%s OWNER TO %s;",
			pgx.Identifier{r.Partition}.Sanitize(), pgx.Identifier{owner}.Sanitize()))
	}
	var held []string
	for _, r := range roles {
		held = append(held, strings.Join(byRole[r], ", ")+" owned by "+r)
	}
	return fmt.Sprintf("%s, not by %s (the owner of webhook_ingress); as %s or a superuser run: %s",
		strings.Join(held, "; "), owner, strings.Join(roles, " or "), strings.Join(fixes, " ")), true
}

// readStatus reads what period p holds and what would keep it
// (partition_status). When one of its partitions belongs to a login the
// connected role may not act as (created before 060), partition_status may
// not read it (insufficient_privilege): the period is then counted through
// the parent tables, and that error returned with the counts, so that the
// period is kept and reported with what it holds, not as empty. The failed
// read is undone to a savepoint; the transaction goes on.
func readStatus(ctx context.Context, tx pgx.Tx, p namedPeriod) (queries.RetentionPartitionStatusRow, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return queries.RetentionPartitionStatusRow{}, err
	}
	defer sp.Rollback(context.WithoutCancel(ctx))
	st, err := queries.New(sp).RetentionPartitionStatus(ctx, p.Start)
	if err == nil {
		return st, sp.Commit(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		return queries.RetentionPartitionStatusRow{}, err
	}
	if rerr := sp.Rollback(ctx); rerr != nil {
		return queries.RetentionPartitionStatusRow{}, rerr
	}
	c, cerr := queries.New(tx).RetentionPeriodStatus(ctx, queries.RetentionPeriodStatusParams{PeriodStart: p.Start, PeriodEnd: p.End})
	if cerr != nil {
		return queries.RetentionPartitionStatusRow{}, cerr
	}
	st = queries.RetentionPartitionStatusRow{Events: c.Events, Jobs: c.Jobs, OpenJobs: c.OpenJobs, DeadLetters: c.DeadLetters,
		Attempts: c.Attempts, SealedThrough: c.SealedThrough}
	if c.Events > 0 {
		st.MaxEventID = &c.MaxEventID
	}
	return st, err
}

// isUndefinedTable reports PostgreSQL's undefined_table, which
// partition_status and drop_partition raise for a period without partition.
func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

func inTx(ctx context.Context, db DB, lockTimeout time.Duration, f func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	ms := strconv.FormatInt(max(lockTimeout.Milliseconds(), 1), 10) + "ms"
	q := queries.New(tx)
	if err := q.RetentionLockTimeout(ctx, ms); err != nil {
		return err
	}
	if err := q.RetentionSerialize(ctx); err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
