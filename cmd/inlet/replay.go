package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/inletyaml"
)

func runReplay(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "replay", "", `
Put jobs back in the queue, in one transaction. Three forms:

  inlet replay --job 123                          one job
  inlet replay --handler billing --dead-letters   every dead letter of a handler
  inlet replay --handler billing --source stripe --type 'invoice.*' --since 7d
                                                  every matching event, to one handler
  inlet replay --handler billing --unrouted       the events that created no job
                                                  (inlet events types), to one handler

The third re-queues the handler's existing jobs of the matching events and
creates the jobs it is missing: a handler subscribed after the events arrived
gets them from the log (only events its subscriptions match, as at fan-out).
It needs at least one of --source, --type, --since, --until (--type '*' for
the whole history). --unrouted is the catch-up of a handler subscribed after
events nobody routed arrived: it creates the handler's jobs for the events
that created no job when they arrived and that its subscriptions match (the
filters narrow it; several handlers subscribed later each catch them up, in
any order), and re-queues nothing. --dry-run prints how many jobs would be re-queued and
created, and changes nothing; over --max-jobs it is refused as the run would be.

A replayed job is pending and due now, its lease and last error cleared, and
its attempt count back at 0 so the handler gets all its attempts again; its
attempt history stays, with a 'replayed' row naming your login role. Jobs in
flight (leased) are left alone. Events are never changed. Streamers are woken
at once (NOTIFY).`+operatorHelp)
	cfgPath := configFlag(fs)
	job := fs.Int64("job", 0, "replay this one job")
	handler := fs.String("handler", "", "replay to this handler")
	dead := fs.Bool("dead-letters", false, "with --handler: all of its dead letters")
	source := fs.String("source", "", "with --handler: only events of this source")
	typ := fs.String("type", "", "with --handler: only events whose type matches this glob (invoice.*)")
	since := fs.String("since", "", "with --handler: only events received at or after (RFC 3339, a date, now, or 24h, 7d)")
	until := fs.String("until", "", "with --handler: only events received before")
	unrouted := fs.Bool("unrouted", false, "with --handler: create its jobs for the events that created no job (see inlet events types)")
	dryRun := fs.Bool("dry-run", false, "print how many jobs would be re-queued and created; change nothing")
	maxJobs := fs.Int("max-jobs", admin.DefaultMaxJobs, "refuse a replay touching more jobs than this")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: inlet replay takes flags only, got %q", errUsage, fs.Args())
	}
	req := admin.ReplayRequest{JobID: *job, Handler: *handler, DeadLetters: *dead, Unrouted: *unrouted, Provider: *source, EventType: *typ,
		DryRun: *dryRun, MaxJobs: *maxJobs}
	var err error
	if req.Since, err = timeFlag("since", *since); err != nil {
		return err
	}
	if req.Until, err = timeFlag("until", *until); err != nil {
		return err
	}
	if *maxJobs < 1 {
		return fmt.Errorf("%w: --max-jobs must be at least 1", errUsage)
	}
	if err := req.Validate(); err != nil {
		return cliError(err)
	}
	return withOperator(ctx, env, *cfgPath, func(pool *pgxpool.Pool, cfg inletyaml.Config, _ string) error {
		// An unrouted replay folds the events committed since the
		// streamer's last fold first, with the configuration's cap (one
		// fold: a fold of the CLI's own before it left the events committed
		// in between to admin.Replay's at the default cap).
		req.MaxTypesPerSource = maxTypesPerSource(cfg)
		res, err := admin.Replay(ctx, pool, req)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env.stdout, res)
		}
		skipped := ""
		if res.SkippedLeased > 0 {
			skipped = fmt.Sprintf("; %d in flight left alone", res.SkippedLeased)
		}
		if res.DryRun {
			fmt.Fprintf(env.stdout, "dry run: would touch %s: re-queue %d, create %d%s; nothing changed\n",
				plural(res.Touched(), "job"), res.Requeued, res.Created, skipped)
			return nil
		}
		fmt.Fprintf(env.stdout, "replayed %s: re-queued %d, created %d%s\n", plural(res.Touched(), "job"), res.Requeued, res.Created, skipped)
		return nil
	})
}
