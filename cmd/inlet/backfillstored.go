package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/config"
)

func runBackfillStored(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "backfill stored", "", `
Fill occurred_at and payload of events stored before they existed (migration
012) from the bytes and headers stored with them, as ingress fills them now:
each source's occurred_at field and store_json setting from the sources: of
the services' config file, read as ingress reads it (the other sections'
secrets need not be set). It needs that file: pass --config (and
--database-url with the owner's URL when the file's database_url is the
services'), or run it in the project whose inlet.yaml it is; without one, or
with a file without sources, it refuses, as a filled value cannot be taken
back. The events of a source the file does not name are left as they are,
counted and named in the summary. Oldest first, --batch events per
transaction, each recording its progress in webhook_ingress.derived_backfill:
stop it any time and run it again to resume. It covers the events that
existed when the first run began. A value is only ever filled where it was
NULL, never changed; raw_body is untouched.

Runs as the schema owner (the role of inlet migrate, but unlike inlet migrate
with the services' config file): the append-only guard on events lets exactly
this update through. Each filled row leaves a dead tuple for autovacuum; on a
busy log pick a quiet hour, or a smaller --batch.

`+databaseHelp)
	cfgPath := configFlag(fs)
	dbURL := fs.String("database-url", "", "PostgreSQL URL of the schema owner (overrides the config file)")
	batch := fs.Int("batch", 1000, "events per transaction")
	restart := fs.Bool("restart", false, "ignore the saved progress and start from the oldest event")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := flagsOnly(fs); err != nil {
		return err
	}
	if *batch < 1 {
		return fmt.Errorf("%w: --batch %d: must be at least 1", errUsage, *batch)
	}
	// Read as the ingress reads it: the sources: section (and database_url)
	// is what ingress derives with; the other sections' secrets are not
	// needed. No embedded defaults: they would keep a JSON copy of every
	// source but twilio's, store_json: false or not (review helper-240).
	c, from, err := loadServiceConfig(*cfgPath, config.IngressService, func() (inletyaml.Config, error) {
		return inletyaml.Config{}, fmt.Errorf("%w: no config file: found no %s here or in the project; backfill stored derives as the ingress does, "+
			"from each source's store_json and occurred_at settings, and a value it fills cannot be undone (events are append-only): "+
			"pass --config with the services' file (such as --config /etc/inlet/inlet.yaml)", errUsage, *cfgPath)
	})
	if err != nil {
		return err
	}
	if len(c.Sources) == 0 {
		return fmt.Errorf("%w: config file %s has no sources: backfill stored derives each source's events with its store_json and occurred_at settings: "+
			"pass --config with the services' file, the one whose sources: the ingress runs with", errUsage, from)
	}
	url, err := databaseURL(*dbURL, c.DatabaseURL)
	if err != nil {
		return err
	}
	conn, err := connectOwner(ctx, url, *cfgPath, "inlet-backfill-stored")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	sources := map[string]backfill.Derive{}
	for _, s := range c.Sources {
		keep, max := s.JSONCopy()
		sources[s.Name] = backfill.Derive{OccurredAt: verify.NewOccurredAt(s.Config), StoreJSON: keep, StoreJSONMaxBytes: max}
	}
	st, err := backfill.FillStored(ctx, conn, backfill.StoredConfig{Sources: sources, OnlyConfigured: true, BatchSize: *batch, Restart: *restart,
		Progress: func(st backfill.StoredStats) {
			fmt.Fprintf(env.stderr, "filled through event %d of %d: %d read, %d occurred_at, %d payloads\n", st.LastID, st.UntilID, st.Read, st.Occurred, st.Payloads)
		}})
	if err != nil {
		return fmt.Errorf("%w; run the same command again to resume after event %d", err, st.LastID)
	}
	fmt.Fprintf(env.stdout, "done: events through %d filled (%d read, %d occurred_at, %d payloads)", st.UntilID, st.Read, st.Occurred, st.Payloads)
	if st.Skipped > 0 {
		fmt.Fprintf(env.stdout, "; %s of %s not in %s left unfilled (add %s to its sources: and run again to fill them)",
			plural(int(st.Skipped), "event"), plural(len(st.SkippedSources), "source"), from, strings.Join(st.SkippedSources, ", "))
	}
	fmt.Fprintln(env.stdout)
	return nil
}
