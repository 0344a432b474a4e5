package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/inletyaml"
)

var subscriptionVerbs = map[string]subcommand{
	"list":    {"list subscriptions: handler, patterns, max attempts, enabled, open jobs, limits, circuit breaker and content filter", runSubscriptionsList},
	"disable": {"switch a handler's subscriptions off: new events get no jobs for it", runSubscriptionsSet(false)},
	"enable":  {"switch a handler's subscriptions on again", runSubscriptionsSet(true)},
}

func runSubscriptions(ctx context.Context, env *environment, args []string) error {
	return runVerbs(ctx, env, "subscriptions", `
Which handler receives which events. Consumers register their handlers'
subscriptions when they start; a handler that no consumer runs any more keeps
its subscriptions, and so keeps getting jobs, until it is disabled here.`+operatorHelp, subscriptionVerbs, args)
}

func runSubscriptionsList(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "subscriptions list", "", `
List subscriptions with the number of open (pending, leased, failed) jobs of
each handler.`+operatorHelp)
	cfgPath := configFlag(fs)
	handler := fs.String("handler", "", "only this handler's")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: inlet subscriptions list takes no arguments, got %q", errUsage, fs.Args())
	}
	return withOperator(ctx, env, *cfgPath, func(pool *pgxpool.Pool, cfg inletyaml.Config, from string) error {
		subs, err := admin.ListSubscriptions(ctx, pool, *handler)
		if err != nil {
			return err
		}
		if len(subs) == 0 {
			// A misspelt --handler lists nothing: name it (checkHandler).
			if err := checkHandler(ctx, pool, cfg, from, *handler); err != nil {
				return err
			}
		}
		if *asJSON {
			return printList(env.stdout, subs, 0)
		}
		if len(subs) == 0 {
			fmt.Fprintln(env.stdout, "no subscriptions")
			return nil
		}
		tw := newTable(env.stdout)
		fmt.Fprintln(tw, "HANDLER\tPROVIDER\tEVENT TYPE\tMAX ATTEMPTS\tENABLED\tOPEN JOBS\tLIMITS\tCIRCUIT\tFILTER")
		for _, s := range subs {
			limits, circuit := limitsText(s.Limits)
			filter := "-"
			if s.Filter != "" {
				filter = safe(s.Filter)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", safe(s.Handler), safe(s.ProviderPattern), safe(s.EventTypePattern),
				s.MaxAttempts, strconv.FormatBool(s.Enabled), s.OpenJobs, limits, circuit, filter)
		}
		return tw.Flush()
	})
}

func runSubscriptionsSet(enabled bool) func(ctx context.Context, env *environment, args []string) error {
	verb := map[bool]string{true: "enable", false: "disable"}[enabled]
	return func(ctx context.Context, env *environment, args []string) error {
		fs := newFlagSet(env, "subscriptions "+verb, " HANDLER", fmt.Sprintf(`
Switch %s all of HANDLER's subscriptions, or one of them (--provider and
--type both given). Jobs already created are left alone: replay or let them
finish. HANDLER may be given as --handler instead.

  inlet subscriptions %s old-billing
  inlet subscriptions %s billing --provider stripe --type 'invoice.*'`,
			map[bool]string{true: "on", false: "off"}[enabled], verb, verb)+operatorHelp)
		cfgPath := configFlag(fs)
		handler := fs.String("handler", "", "the handler (or give it as the argument)")
		provider := fs.String("provider", "", "the subscription's provider pattern")
		eventType := fs.String("type", "", "the subscription's event type pattern")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		switch {
		case fs.NArg() > 1:
			return fmt.Errorf("%w: inlet subscriptions %s takes one HANDLER, got %d arguments", errUsage, verb, fs.NArg())
		case fs.NArg() == 1 && *handler != "" && *handler != fs.Arg(0):
			return fmt.Errorf("%w: inlet subscriptions %s: handler %q and --handler %q differ", errUsage, verb, fs.Arg(0), *handler)
		case fs.NArg() == 1:
			*handler = fs.Arg(0)
		case *handler == "":
			return fmt.Errorf("%w: inlet subscriptions %s needs a HANDLER", errUsage, verb)
		}
		return withOperator(ctx, env, *cfgPath, func(pool *pgxpool.Pool, _ inletyaml.Config, _ string) error {
			n, err := admin.SetSubscriptionsEnabled(ctx, pool, *handler, *provider, *eventType, enabled)
			if err != nil {
				return err
			}
			fmt.Fprintf(env.stdout, "%sd %d subscription(s) of %s\n", verb, n, *handler)
			return nil
		})
	}
}

// limitsText is a handler's limits and circuit for the table: "-" for none.
func limitsText(l *admin.Limits) (limits, circuit string) {
	if l == nil {
		return "-", "-"
	}
	var parts []string
	if l.RateLimit > 0 {
		parts = append(parts, fmt.Sprintf("%g/s burst %d", l.RateLimit, l.Burst))
	}
	if l.MaxInFlight > 0 {
		parts = append(parts, fmt.Sprintf("%d in flight", l.MaxInFlight))
	}
	limits, circuit = "-", "-"
	if len(parts) > 0 {
		limits = strings.Join(parts, ", ")
	}
	if l.BreakerFailures > 0 {
		circuit = fmt.Sprintf("%s (%d/%d failures)", l.Circuit, l.ConsecutiveFailures, l.BreakerFailures)
		if l.Circuit != "closed" && l.NextProbeAt != nil {
			circuit += ", next probe " + l.NextProbeAt.UTC().Format(time.RFC3339)
		}
	}
	return limits, circuit
}
