package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/notify"
)

func runBackfill(ctx context.Context, env *environment, args []string) error {
	if len(args) > 0 && args[0] == "stored" {
		return runBackfillStored(ctx, env, args[1:])
	}
	fs := newFlagSet(env, "backfill", " stripe|github|stored", `
Fill the event log from the provider's history API, for events that never
arrived as webhooks (Inlet was down past the provider's retries, or was set up
later):

  inlet backfill stripe [--since 7d] [--types 'invoice.*,charge.refunded']
  inlet backfill github --repo owner/name --hook-id 123   (or --org name)
  inlet backfill stored    (occurred_at and payload of old events from their
                           stored bytes; see inlet backfill stored --help)

Stripe: GET /v1/events, newest first (Stripe keeps 30 days), with the secret
or a restricted events:read key from --api-key or $STRIPE_API_KEY. GitHub:
the webhook's deliveries (GET …/hooks/{id}/deliveries, then each delivery's
request payload), with a token from --token or $GITHUB_TOKEN.

Each event is stored as ingress stores a webhook, under the source (--source,
default the first configured source of that type): an event the log holds
(received by webhook, or backfilled before) is a duplicate and is left as it
is; a new one gets a job for each subscribed handler. Backfilled events have
signature_verified = false, the body exactly as the API returned it, and a
header Inlet-Backfill naming the API; credentials are never stored or
printed.

Nothing made before the end of the newest period inlet retention dropped is
stored: the log keeps none of those events nor their dedupe keys, so each
would be stored again and handled a second time. The run reads that point
when it starts and with each page, counts such events skipped, stops the
listing there (it reads newest first; the state file is removed) and says so
on stderr. So with a retention.max_age under 30 days a backfill reaches back
about that far, not Stripe's 30 days, whatever --since asks.

A GitHub delivery made more than 2 days ago, listed but gone when its
payload is fetched (404 or 410: it aged out of GitHub's history meanwhile),
is counted skipped, logged with its delivery id, and the run goes on; any
other failed fetch stops it, a 404 for a more recent delivery too (GitHub
answers 404 to a token whose access changed).

Rate limits (429; GitHub's 403 with X-RateLimit-Remaining: 0, and its
secondary limit: a 403 with Retry-After or saying "secondary rate limit")
are waited out as Retry-After or X-RateLimit-Reset asks, else from at least
a minute (GitHub) backing off; 5xx and network errors are retried with
exponential backoff. A refused key or token's error quotes what the
provider says it lacks (Stripe's message, GitHub's accepted permissions
and scopes).

Resumable: after every page the cursor is written to --state (default
.inlet/backfill-<source>.json, in the .inlet directory where the database_url
below was found, else in this directory). An interrupted run (Ctrl-C, an error) is
continued by running the same command again; the file is removed when the
history has been read to the end. --restart ignores the file and starts from
the newest event (what the log holds is not stored twice either way). A Stripe cursor is
kept per key mode (test or live). A saved cursor the provider refuses (aged
out of its history) stops the run with that advice: remove the file or run
with --restart.

Writes run as ingress.db_role (default webhook_ingress_writer) on the
config file's database_url, else DATABASE_URL, else the local PostgreSQL
that inlet dev started from this directory or the nearest parent directory
that has one (.inlet/database_url).`)
	cfgPath := configFlag(fs)
	statePath := fs.String("state", "", "cursor file of an unfinished run (default .inlet/backfill-<source>.json, in the .inlet found with database_url)")
	restart := fs.Bool("restart", false, "ignore the saved cursor and start from the newest event")
	sinceFlag := fs.String("since", "", "stripe: only events created at or after (RFC 3339, a date, now, or 24h, 7d)")
	api := providerAPIFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || (fs.Arg(0) != "stripe" && fs.Arg(0) != "github") {
		return fmt.Errorf("%w: inlet backfill needs one provider: stripe or github", errUsage)
	}
	kind := fs.Arg(0)

	var since time.Time
	var sinceAsGiven string
	switch {
	case kind == "stripe":
		var err error
		if since, err = timeFlag("since", *sinceFlag); err != nil {
			return err
		}
		if admin.RelativeTime(*sinceFlag) {
			sinceAsGiven = *sinceFlag
		}
	case *sinceFlag != "":
		return fmt.Errorf("%w: --since: stripe only (GitHub's deliveries are read newest first, all of them the API keeps)", errUsage)
	}
	lister, err := api.listerSince("backfill", kind, since, sinceAsGiven, time.Time{})
	if err != nil {
		return err
	}

	cfg, from, err := operatorConfig(*cfgPath)
	if err != nil {
		return err
	}
	src, err := backfillSource(cfg, kind, *api.source, from)
	if err != nil {
		return err
	}
	if *statePath == "" {
		// Beside the database_url of the inlet dev found here or above, so
		// a run resumed from another directory of the tree finds it.
		dir, err := devStateDir("pass --state PATH for the cursor file")
		if err != nil {
			return err
		}
		*statePath = filepath.Join(dir, "backfill-"+src.Name+".json")
	}
	pool, err := database.Open(ctx, cfg.DatabaseURL, database.Options{Role: *cfg.Ingress.DBRole, AppName: "inlet-backfill", MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	logger := stderrLogger(cfg, "text")
	hinter := notify.NewHinter(pool, 0, logger)
	defer hinter.Stop()

	keepJSON, jsonMax := src.JSONCopy()
	stats, err := backfill.Run(ctx, backfill.Config{
		StoreJSON: keepJSON, StoreJSONMaxBytes: jsonMax,
		Source:     src.Name,
		Scheme:     src.Type,
		Store:      ingress.NewPGStore(pool, hinter),
		DB:         pool,
		Logger:     logger,
		OccurredAt: verify.NewOccurredAt(src.Config),
		EventType:  verify.NewEventTypeOf(src.Config),
		StatePath:  *statePath,
		Restart:    *restart,
		Progress:   env.stderr,
		Terminal:   isTerminal(env.stderr),
	}, lister)
	if stats.Dropped > 0 {
		// Their events and dedupe keys are gone: each would have been
		// stored again and handled a second time.
		fmt.Fprintf(env.stderr, "backfill %s: skipped %d events made before %s: inlet retention dropped the log's events (and their dedupe keys) before then; stopped the listing there\n",
			src.Name, stats.Dropped, stats.KeptSince.UTC().Format(time.RFC3339))
	}
	if errors.Is(err, backfill.ErrWindowDropped) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err != nil {
		fmt.Fprintf(env.stderr, "backfill %s: stopped after %s\n", src.Name, stats)
		// Name the cursor file only if there is one: none is written before
		// the first page is stored.
		if _, serr := os.Stat(*statePath); serr == nil && !errors.Is(err, backfill.ErrStateMismatch) && !errors.Is(err, backfill.ErrStateUnreadable) && !errors.Is(err, backfill.ErrCursorRefused) {
			return fmt.Errorf("%w; run the same command again to resume from the cursor in %s", err, *statePath)
		}
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("%w before a page was stored (no cursor saved; the next run starts from the newest event)", err)
		}
		return err
	}
	fmt.Fprintf(env.stdout, "backfill %s: done: %s\n", src.Name, stats)
	return nil
}

// backfillSource is the configured source named name, or without a name the
// first one of type kind.
func backfillSource(cfg inletyaml.Config, kind, name, from string) (sources.Source, error) {
	for _, s := range cfg.Sources {
		if name == "" && s.Type == kind {
			return s, ownIDs(s)
		}
		if name != "" && s.Name == name {
			if s.Type != kind {
				return s, fmt.Errorf("%w: source %q is of type %s, not %s", errUsage, name, s.Type, kind)
			}
			return s, ownIDs(s)
		}
	}
	if name != "" {
		return sources.Source{}, fmt.Errorf("%w: no source %q in %s", errUsage, name, from)
	}
	return sources.Source{}, fmt.Errorf("%w: no source of type %s in %s (add one, or pass --source)", errUsage, kind, from)
}

// ownIDs is backfill.CheckSourceIDs as a usage error.
func ownIDs(s sources.Source) error {
	if err := backfill.CheckSourceIDs(s); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return nil
}

// isTerminal reports whether w is a character device (a terminal), where the
// progress line is redrawn in place.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
