package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/monitor"
)

func runEventsTypes(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "events types", "", `
List every event type seen, per source, unrouted first: when it was first and
last seen, how many events it brought since event_types was added, how many
of them created no job (no enabled subscription matched: UNROUTED), and
which handlers match it now. A source's types past
silence.max_types_per_source are counted together as _other (some type
headers are not signed). ROUTED is "no" when the latest event of the type
created no job, "?" for a type seen only before the upgrade that added this.

A handler subscribed after unrouted events arrived gets them with
  inlet replay --handler NAME --unrouted --dry-run   (then without --dry-run)`+operatorHelp)
	cfgPath := configFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: inlet events types takes no arguments, got %q", errUsage, fs.Args())
	}
	return withOperator(ctx, env, *cfgPath, func(pool *pgxpool.Pool, cfg inletyaml.Config, _ string) error {
		types, err := admin.EventTypes(ctx, pool, maxTypesPerSource(cfg))
		if err != nil {
			return err
		}
		if *asJSON {
			return printList(env.stdout, types, 0)
		}
		if len(types) == 0 {
			fmt.Fprintln(env.stdout, "no event seen yet")
			return nil
		}
		tw := newTable(env.stdout)
		fmt.Fprintln(tw, "SOURCE\tTYPE\tROUTED\tEVENTS\tUNROUTED\tFIRST SEEN\tLAST SEEN\tHANDLERS NOW")
		catchUp := map[string]bool{}
		for _, t := range types {
			routed := "?"
			if t.Routed != nil {
				routed = map[bool]string{true: "yes", false: "no"}[*t.Routed]
			}
			typ := t.Type
			if typ == "" {
				typ = "(none)"
			}
			handlers := strings.Join(t.Handlers, ",")
			if handlers == "" {
				handlers = "-"
			}
			// A type may come from an unsigned header or a body field: a
			// tab, a newline or an escape sequence in it must not shift the
			// columns, forge a row or reach the terminal.
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", safe(t.Source), safe(typ), routed, t.Events, t.UnroutedEvents,
				t.FirstSeen.UTC().Format(time.RFC3339), t.LastSeen.UTC().Format(time.RFC3339), safe(handlers))
			if t.UnroutedEvents > 0 {
				for _, h := range t.Handlers {
					catchUp[h] = true
				}
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, h := range sortedKeys(catchUp) {
			fmt.Fprintf(env.stdout, "handler %s now matches earlier unrouted events: inlet replay --handler %s --unrouted --dry-run\n", safe(h), safe(h))
		}
		return nil
	})
}

// maxTypesPerSource is the cap the streamer folds event types with.
func maxTypesPerSource(cfg inletyaml.Config) int {
	return cmp.Or(cfg.Silence.MaxTypesPerSource, monitor.DefaultMaxTypesPerSource)
}

func sortedKeys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }
