package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/retention"
)

func runRetention(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "retention", "", `
Keep the event log to its configured age, as the owner of webhook_ingress (the
role of inlet migrate): create the period partitions of events, jobs and
job_attempts ahead of time, then drop every whole period that ended more than
--max-age ago, unless one of its jobs is still pending, leased or failed, or
one of its events is not yet sealed by inlet audit seal. A dropped period is
recorded in webhook_ingress.retention_log, with the ids it held, so inlet audit
verify still passes. Nothing is ever deleted row by row; events that arrived
when no period partition covered them sit in the default partition and are
kept. Run it daily (deployments/ has a CronJob and a systemd timer).

`+databaseHelp+` Flags override the config file's retention section. Exit
status 0 when a period is kept for open jobs, unsealed events or locks not
granted: the report says why. Exit status 1 when one is kept because a
partition of it belongs to another role (created by another member of the
owner role before migration 060 gave partitions to the owner): the other
periods are still dropped, and the report names the partitions and the
ALTER TABLE ... OWNER TO to run as that role or a superuser.`)
	cfgPath := configFlag(fs)
	dbURL := fs.String("database-url", "", "PostgreSQL URL of the schema owner (overrides the config file)")
	maxAge := fs.String("max-age", "", "drop periods that ended longer ago than this: 90d, 13w, 2160h (default: retention.max_age; unset keeps everything)")
	interval := fs.String("interval", "", "length of new partitions: day, week or month (default: retention.partition_interval, else week)")
	var ahead *int
	fs.Func("ahead", "`count` of periods past the current one to partition, 0 or more (default: retention.ahead, else 4)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a count of periods (0 or more)", v)
		}
		ahead = &n
		return nil
	})
	var lockTimeout *time.Duration
	fs.Func("lock-timeout", "longest wait for a partition's locks, a positive `duration` (default: retention.lock_timeout, else 5s)", func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q is not a positive duration", v)
		}
		lockTimeout = &d
		return nil
	})
	dryRun := fs.Bool("dry-run", false, "report what would be created and dropped; change nothing")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := flagsOnly(fs); err != nil {
		return err
	}
	cfg, _, err := loadConfig(*cfgPath, func() (inletyaml.Config, error) { return inletyaml.Config{}.WithDefaults(), nil })
	if err != nil {
		return err
	}
	opts, err := cfg.Retention.Options()
	if err != nil {
		return err
	}
	if *maxAge != "" {
		if opts.MaxAge, err = retention.ParseAge(*maxAge); err != nil {
			return fmt.Errorf("%w: --max-age: %w", errUsage, err)
		}
	}
	if *interval != "" {
		opts.Interval = *interval
	}
	if ahead != nil {
		opts.Ahead = *ahead
	}
	if lockTimeout != nil {
		opts.LockTimeout = *lockTimeout
	}
	opts.DryRun = *dryRun
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	url, err := databaseURL(*dbURL, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	if url == "" {
		return errNoDatabase(*cfgPath, true)
	}
	pool, err := database.Open(ctx, url, database.Options{AppName: "inlet-retention", MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	rep, err := retention.Run(ctx, pool, opts)
	if err != nil && rep.Now.IsZero() {
		return err
	}
	// A report with an error: the drops happened, deleting their dedupe
	// keys failed (the next run does it). Both are shown.
	if *asJSON {
		if perr := printJSON(env.stdout, rep); perr != nil {
			return perr
		}
		return err
	}
	printRetention(env, rep)
	return err
}

func printRetention(env *environment, rep retention.Report) {
	w := env.stdout
	verb := "created"
	if rep.DryRun {
		verb = "would create"
	}
	day := func(t time.Time) string { return t.UTC().Format("2006-01-02") }
	switch {
	case len(rep.Created) > 0:
		fmt.Fprintf(w, "%s %s: %s to %s\n", verb, plural(len(rep.Created), "period partition"), day(rep.Created[0].Start), day(rep.Created[len(rep.Created)-1].End))
	case rep.Through != nil:
		fmt.Fprintf(w, "partitioned through %s; nothing to create\n", day(*rep.Through))
	}
	if rep.Default.Events > 0 {
		fmt.Fprintf(w, "default partition: %s (%s to %s) arrived when no period partition covered them; they are kept, never dropped\n",
			plural(int(rep.Default.Events), "event"), stamp(*rep.Default.Oldest), stamp(*rep.Default.Newest))
	}
	if rep.Cutoff == nil {
		fmt.Fprintln(w, "no maximum age (retention.max_age or --max-age): nothing dropped")
		printDedupeKeys(w, rep)
		return
	}
	if len(rep.Partitions) == 0 {
		fmt.Fprintf(w, "no period ended before %s (max age): nothing to drop\n", stamp(*rep.Cutoff))
		printDedupeKeys(w, rep)
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "PARTITION\tFROM\tTO\tEVENTS\tJOBS\tDEAD\tATTEMPTS\tVERDICT\tREASON")
	for _, p := range rep.Partitions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", p.Name, day(p.Start), day(p.End), p.Events, p.Jobs, p.DeadLetters, p.Attempts,
			p.Verdict, cell(p.Reason))
	}
	tw.Flush()
	done := "dropped"
	if rep.DryRun {
		done = "would drop"
	}
	fmt.Fprintf(w, "%s %s, kept %d (periods that ended before %s)\n", done, plural(rep.Dropped(), "partition"), rep.Kept(), stamp(*rep.Cutoff))
	printDedupeKeys(w, rep)
}

// printDedupeKeys says what was deleted from event_keys, when anything was
// due: the dropped periods' keys (an interrupted run's among them).
func printDedupeKeys(w io.Writer, rep retention.Report) {
	if rep.DedupeKeys.Periods > 0 {
		fmt.Fprintf(w, "deleted %s of %s dropped\n", plural(int(rep.DedupeKeys.Deleted), "dedupe key"), plural(int(rep.DedupeKeys.Periods), "period"))
	}
}

// ensurePartitions creates period partitions ahead as the config says (inlet
// migrate and inlet dev), logging what it created.
func ensurePartitions(ctx context.Context, db retention.DB, r retention.Section, log *slog.Logger) error {
	o, err := r.Options()
	if err != nil {
		return err
	}
	created, err := retention.EnsurePartitions(ctx, db, o.Interval, o.Ahead, o.LockTimeout)
	if err != nil {
		return err
	}
	if len(created) > 0 {
		log.Info("created period partitions", slog.Int("count", len(created)), slog.String("interval", o.Interval),
			slog.Time("from", created[0].Start), slog.Time("to", created[len(created)-1].End))
	}
	return nil
}
