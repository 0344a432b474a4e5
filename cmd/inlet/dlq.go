package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/inletyaml"
)

var dlqVerbs = map[string]subcommand{
	"list": {"list dead-lettered jobs by handler, source, time and error class", runDLQList},
	"show": {"show one job: its attempts with their error text, and its event", runDLQShow},
}

func runDLQ(ctx context.Context, env *environment, args []string) error {
	return runVerbs(ctx, env, "dlq", `
Inspect dead letters: jobs whose attempts are spent or whose handler failed
permanently. They stay until replayed (inlet replay). Read-only.`+operatorHelp, dlqVerbs, args)
}

func runDLQList(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "dlq list", "", `
List dead-lettered jobs, newest first: job, event, handler, source, type,
attempts, error class and when the job was dead-lettered. The error text is in
inlet dlq show. When more match, the --before for the next page is printed on
stderr (with --json, it is the list's "next").

  inlet dlq list --handler billing --since 24h
  inlet dlq list --error-class timeout --json

A --handler that is neither in consumer.handlers nor ever subscribed, or a
--source neither configured nor seen in the database, is a usage error
(exit 2) that lists the known names: a typo, not an empty list.`+operatorHelp)
	cfgPath := configFlag(fs)
	handler := fs.String("handler", "", "only this handler's (one of consumer.handlers, or one that ever subscribed)")
	source := fs.String("source", "", "only jobs of events of this source (a configured source, or one whose events are stored)")
	class := fs.String("error-class", "", "only this last error class (e.g. permanent, timeout, lease_expired)")
	since := fs.String("since", "", "only jobs dead-lettered at or after: RFC 3339, a date, now, or a duration back (24h, 7d)")
	until := fs.String("until", "", "only jobs dead-lettered before (same forms as --since)")
	limit := fs.Int("limit", admin.DefaultLimit, fmt.Sprintf("most jobs to print (at most %d)", admin.MaxLimit))
	before := fs.Int64("before", 0, "only jobs with a smaller id (the next page)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: inlet dlq list takes no arguments, got %q", errUsage, fs.Args())
	}
	if err := limitFlag(*limit); err != nil {
		return err
	}
	f := admin.DeadLetterFilter{Handler: *handler, Provider: *source, ErrorClass: *class, Limit: *limit, Before: *before}
	var err error
	if f.Since, err = timeFlag("since", *since); err != nil {
		return err
	}
	if f.Until, err = timeFlag("until", *until); err != nil {
		return err
	}
	return withOperator(ctx, env, *cfgPath, func(pool *pgxpool.Pool, cfg inletyaml.Config, from string) error {
		if err := checkHandler(ctx, pool, cfg, from, f.Handler); err != nil {
			return err
		}
		if err := checkSource(ctx, pool, cfg, from, f.Provider); err != nil {
			return err
		}
		page, err := admin.ListDeadLetters(ctx, pool, f)
		if err != nil {
			return err
		}
		if *asJSON {
			return printList(env.stdout, page.DeadLetters, page.NextBefore)
		}
		if len(page.DeadLetters) == 0 {
			fmt.Fprintln(env.stdout, "no dead letters match")
			return nil
		}
		tw := newTable(env.stdout)
		fmt.Fprintln(tw, "JOB\tEVENT\tHANDLER\tSOURCE\tTYPE\tEXTERNAL ID\tATTEMPTS\tERROR CLASS\tDEAD SINCE\tHOLDS BACK")
		for _, d := range page.DeadLetters {
			holds := "-"
			if d.Holding > 0 && d.OrderKey != nil {
				holds = fmt.Sprintf("%d of key %s", d.Holding, cell(*d.OrderKey))
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", d.JobID, d.EventID, cell(d.Handler), cell(d.Provider),
				cell(d.EventType), cell(d.ExternalEventID), d.AttemptCount, d.MaxAttempts, cell(d.LastErrorClass), stamp(d.DeadSince), holds)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if page.NextBefore != 0 {
			fmt.Fprintf(env.stderr, "more dead letters match: add --before %d for the next page\n", page.NextBefore)
		}
		return nil
	})
}

func runDLQShow(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "dlq show", " JOB_ID", `
Show dead letter JOB_ID: its state, last error text, every attempt with its
outcome, error class and error, and its event's metadata (inlet events show
EVENT_ID has the body). A job that is not a dead letter (any more) is an
error naming its status and its event: inlet events show EVENT_ID shows every
job of an event, whatever its status.`+operatorHelp)
	cfgPath := configFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	id, err := idArg(fs, "JOB_ID")
	if err != nil {
		return err
	}
	return withOperator(ctx, env, *cfgPath, func(pool *pgxpool.Pool, _ inletyaml.Config, _ string) error {
		j, err := admin.GetJob(ctx, pool, id)
		if err != nil {
			return err
		}
		if j.Status != "dead_letter" {
			return fmt.Errorf("job %d is not a dead letter: it is %s (inlet events show %d shows it)", id, j.Status, j.EventID)
		}
		if *asJSON {
			return printJSON(env.stdout, j)
		}
		printJob(env.stdout, j.Job)
		tw := newTable(env.stdout)
		fmt.Fprintf(tw, "\nEvent %d\n", j.Event.ID)
		printMeta(tw, j.Event)
		return tw.Flush()
	})
}
