package main

import (
	"context"
	"fmt"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/inletyaml"
)

func runBackfillStored(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "backfill stored", "", `
Fill occurred_at and payload of events stored before they existed (migration
012) from the bytes and headers stored with them, as ingress fills them now:
each source's occurred_at field and store_json setting from the config file
(a source no longer configured: its scheme's defaults). Oldest first, --batch
events per transaction, each recording its progress in
webhook_ingress.derived_backfill: stop it any time and run it again to
resume. It covers the events that existed when the first run began. A value
is only ever filled where it was NULL, never changed; raw_body is untouched.

Runs as the schema owner (like inlet migrate): the append-only guard on
events lets exactly this update through. Each filled row leaves a dead
tuple for autovacuum; on a busy log pick a quiet hour, or a smaller --batch.

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
	c, _, err := loadConfig(*cfgPath, func() (inletyaml.Config, error) { return inletyaml.Config{}.WithDefaults(), nil })
	if err != nil {
		return err
	}
	url := databaseURL(*dbURL, c.DatabaseURL)
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
	st, err := backfill.FillStored(ctx, conn, backfill.StoredConfig{Sources: sources, BatchSize: *batch, Restart: *restart,
		Progress: func(st backfill.StoredStats) {
			fmt.Fprintf(env.stderr, "filled through event %d of %d: %d read, %d occurred_at, %d payloads\n", st.LastID, st.UntilID, st.Read, st.Occurred, st.Payloads)
		}})
	if err != nil {
		return fmt.Errorf("%w; run the same command again to resume after event %d", err, st.LastID)
	}
	fmt.Fprintf(env.stdout, "done: events through %d filled (%d read, %d occurred_at, %d payloads)\n", st.UntilID, st.Read, st.Occurred, st.Payloads)
	return nil
}
