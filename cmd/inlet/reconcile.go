package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/notify"
)

func runReconcile(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "reconcile", " stripe|github", `
Compare the provider's own list of events for a window with the event log,
and store each event the log lacks: a webhook the provider never delivered
(or gave up on) is otherwise invisible to every receiver.

  inlet reconcile stripe [--since 24h] [--until now] [--account us] [--dry-run] [--json]
  inlet reconcile github --repo owner/name --hook-id 123 [--since 24h]

Stripe: GET /v1/events created in the window (Stripe keeps 30 days), with
the secret or a restricted events:read key from --api-key or
$STRIPE_API_KEY. Stripe lists every event of the account: pass --types to
compare only the types the webhook endpoint is subscribed to. GitHub: the
webhook's deliveries sent in the window (GitHub keeps about 3 days), with a
token from --token or $GITHUB_TOKEN; only the missing deliveries' payloads
are fetched.

--account LABEL names the account the key lists, as the account: of the
reconcile.sources entry it catches up for (us, eu, test): the run lists and
is recorded for that entry's scope, and the scheduled reconcile counts its
window as compared for that entry only. Without --types a Stripe run lists
the entry's types: (of several entries of the label, the one without
types:; else --types must name one entry's). With --types it lists those:
the same as the entry's (in any order), it counts for the entry; others are
recorded as a scope of their own, which counts as compared for no entry
(said on stderr), and the entry's scheduled reconcile lists that window
again. A Stripe run with neither --account nor --types is recorded for the
whole source, every entry of it; where reconcile.sources labels the
accounts of the source, it is refused without --account (a dry run records
no coverage and is not).

A missing event is stored as inlet backfill stores one (signature_verified =
false, the API's bytes, header Inlet-Backfill naming the API) with the header
Inlet-Reconcile: <run id>; each run is recorded in
webhook_ingress.reconcile_runs (the dashboard shows the last). Running it
again stores nothing twice. --dry-run counts and stores nothing.

Prints, per event type and in total: listed (distinct events in the
window), already stored, missing, stored now, and duplicates (extra listings
of one event, such as GitHub redeliveries). --json prints
{"items": [per type], "total": {...}, "run_id": …}. A missing GitHub
delivery made more than 2 days ago and gone when its payload is fetched
(404 or 410: aged out meanwhile) is counted missing and not stored, logged
with its delivery id, and said below the table (--json: "gone"); any other
failed fetch stops the run, a 404 for a more recent delivery too.

Nothing before the end of the newest period inlet retention dropped is
compared: the log keeps none of those events nor their dedupe keys, and
each would be stored again and handled a second time. A --since before it
starts the run there (stderr says so; --json's "skipped"); a window wholly
before it is refused (exit 2).

Rate limits (429 with Retry-After; GitHub's 403 with X-RateLimit-Remaining:
0 or with Retry-After) are waited out; 5xx and network errors are retried with backoff. Writes
run as ingress.db_role (default webhook_ingress_writer), as inlet backfill.`)
	cfgPath := configFlag(fs)
	since := fs.String("since", "24h", "start of the window (RFC 3339, a date, now, or 24h, 7d ago)")
	until := fs.String("until", "", "end of the window (same forms as --since; default now; a later time is clamped to now)")
	dryRun := fs.Bool("dry-run", false, "count what is missing; store nothing")
	asJSON := fs.Bool("json", false, "print the counts as JSON")
	api := providerAPIFlags(fs)
	api.account = fs.String("account", "", "the account: label of the reconcile.sources entry whose account the key lists (us, eu); recorded in the run's scope")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || (fs.Arg(0) != "stripe" && fs.Arg(0) != "github") {
		return fmt.Errorf("%w: inlet reconcile needs one provider: stripe or github", errUsage)
	}
	kind := fs.Arg(0)
	from, err := timeFlag("since", *since)
	if err != nil {
		return err
	}
	to := time.Now()
	if *until != "" {
		if to, err = timeFlag("until", *until); err != nil {
			return err
		}
	}
	// The clock is read after the flag is parsed, so --until now is no
	// future.
	if now := time.Now(); to.After(now) {
		// A run compares only the events that exist when it lists them, and
		// the scheduled reconcile takes its recorded window as compared time
		// (up to when it started): a future end (a date is midnight UTC,
		// "reconcile today") is clamped and said, not taken silently.
		fmt.Fprintf(env.stderr, "reconcile: --until %s is in the future: the window ends now, %s (a run compares only the events that exist when it lists them)\n",
			to.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		to = now
	}
	if !from.Before(to) {
		return fmt.Errorf("%w: --since %s is not before --until %s", errUsage, from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	if kind == "stripe" && time.Since(from) > backfill.StripeRetention {
		return fmt.Errorf("%w: --since %s: Stripe keeps the events of the last 30 days only", errUsage, from.Format(time.RFC3339))
	}

	lister, err := api.lister("reconcile", kind, from, to)
	if err != nil {
		return err
	}

	cfg, cfgFrom, err := operatorConfig(*cfgPath)
	if err != nil {
		return err
	}
	src, err := backfillSource(cfg, kind, *api.source, cfgFrom)
	if err != nil {
		return err
	}
	if kind == "stripe" && !*dryRun {
		if err := accountLabelNeeded(cfg.Reconcile, src.Name, *api.account, *api.types); err != nil {
			return err
		}
	}
	if kind == "stripe" && *api.account != "" {
		if lister, err = accountEntry(env, cfg.Reconcile, src.Name, api, from, to, *dryRun); err != nil {
			return err
		}
	}
	pool, err := database.Open(ctx, cfg.DatabaseURL, database.Options{Role: *cfg.Ingress.DBRole, AppName: "inlet-reconcile", MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	logger := stderrLogger(cfg, "text")
	hinter := notify.NewHinter(pool, 0, logger)
	defer hinter.Stop()
	keepJSON, jsonMax := src.JSONCopy()
	rep, err := backfill.Reconcile(ctx, backfill.ReconcileConfig{
		Source: src.Name, Scheme: src.Type,
		Store: ingress.NewPGStore(pool, hinter), DB: pool,
		Since: from, Until: to, DryRun: *dryRun,
		OccurredAt: verify.NewOccurredAt(src.Config), StoreJSON: keepJSON, StoreJSONMaxBytes: jsonMax,
		EventType: verify.NewEventTypeOf(src.Config),
		Logger:    logger,
	}, lister)
	if errors.Is(err, backfill.ErrWindowDropped) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if sk := rep.Skipped; sk != nil {
		// The log's events before sk.Until are gone, and their dedupe keys:
		// each would be stored again and handled a second time.
		fmt.Fprintf(env.stderr, "reconcile: skipped %s to %s: inlet retention dropped the log's events (and their dedupe keys) before %s; compared from there\n",
			sk.Since.Format(time.RFC3339), sk.Until.Format(time.RFC3339), sk.Until.Format(time.RFC3339))
	}
	if err != nil {
		if rep.RunID != 0 {
			fmt.Fprintf(env.stderr, "reconcile %s: run %d stopped after %d pages: %d listed, %d missing, %d stored\n",
				src.Name, rep.RunID, rep.Pages, rep.Total.Listed, rep.Total.Missing, rep.Total.Stored)
		}
		return err
	}
	if *asJSON {
		return printJSON(env.stdout, rep)
	}
	printReconcile(env, rep)
	return nil
}

// accountLabelNeeded refuses a Stripe run without --account and --types
// (recorded for the whole source) of a source whose reconcile.sources
// entries label their accounts: the entries list different accounts, and
// the run, listing one of them, would count as compared for all of them, so
// the others' events in its window would never be compared.
func accountLabelNeeded(rc backfill.Section, source, account, types string) error {
	if account != "" || strings.Trim(types, " ,") != "" {
		return nil
	}
	var labels []string
	for _, e := range rc.Sources {
		if e.Source == source && e.Account != "" && !slices.Contains(labels, e.Account) {
			labels = append(labels, e.Account)
		}
	}
	if len(labels) == 0 {
		return nil
	}
	slices.Sort(labels)
	return fmt.Errorf("%w: reconcile.sources labels the accounts of source %q (%s): pass --account with the label of the account this API key lists; "+
		"without it (or --types) the run is recorded for the whole source and counts as compared for every account's entry",
		errUsage, source, strings.Join(labels, ", "))
}

// accountEntry is the lister of a Stripe run with --account (api's lister
// over [from, to]) that lists and records the scope of the reconcile.sources
// entry of source with that label (backfill.Section.AccountRun): without
// --types, the entry's types. A run that counts for no entry of a source
// the schedule reconciles (other types than the entry's, or a label no entry
// has) is said on stderr, unless it is a dry run (which records no
// coverage): its window stays uncompared for the entries.
func accountEntry(env *environment, rc backfill.Section, source string, api *providerAPI, from, to time.Time, dryRun bool) (backfill.Lister, error) {
	given := api.stripeTypes()
	run, err := rc.AccountRun(source, *api.account, given)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	scheduled := slices.ContainsFunc(rc.Sources, func(e backfill.ReconcileSource) bool { return e.Source == source && e.Type == "stripe" })
	switch {
	case run.Entry >= 0 && len(given) == 0 && len(run.Types) > 0:
		fmt.Fprintf(env.stderr, "reconcile: --account %s: listing the types of reconcile.sources[%d] (%s), the entry the run is recorded for\n",
			*api.account, run.Entry, strings.Join(run.Types, ","))
		api.entryTypes = run.Types
	case run.Entry >= 0 || !scheduled || dryRun:
	case len(given) == 0:
		fmt.Fprintf(env.stderr, "reconcile: no reconcile.sources entry of source %q has account: %s: the run is recorded as a scope of its own "+
			"and counts as compared for no entry\n", source, *api.account)
	default:
		fmt.Fprintf(env.stderr, "reconcile: --types %s are not the types of the reconcile.sources entry of source %q with account: %s: "+
			"the run is recorded as a scope of its own and counts as compared for no entry (the entry's scheduled reconcile lists this window again)\n",
			strings.Join(given, ","), source, *api.account)
	}
	return api.lister("reconcile", "stripe", from, to)
}

func printReconcile(env *environment, rep backfill.Report) {
	what := "reconciled"
	if rep.DryRun {
		what = "dry run, nothing stored"
	}
	fmt.Fprintf(env.stdout, "reconcile %s (run %d, %s): %s to %s from %s, %d pages, %d rate-limit waits\n",
		rep.Source, rep.RunID, what, rep.Since.Format(time.RFC3339), rep.Until.Format(time.RFC3339), rep.API, rep.Pages, rep.RateLimitWaits)
	tw := newTable(env.stdout)
	fmt.Fprintln(tw, "TYPE\tLISTED\tALREADY STORED\tMISSING\tSTORED NOW\tDUPLICATES")
	row := func(name string, c backfill.Counts) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", name, c.Listed, c.AlreadyStored, c.Missing, c.Stored, c.Duplicates)
	}
	for _, t := range rep.Types {
		row(safe(t.Type), t.Counts)
	}
	row("total", rep.Total)
	_ = tw.Flush()
	if rep.Total.Gone > 0 {
		fmt.Fprintf(env.stdout, "%d missing deliveries were gone from the provider when their payloads were fetched (aged out meanwhile): not stored\n", rep.Total.Gone)
	}
}

// cmpEnv is v, or the environment variable name when v is empty.
