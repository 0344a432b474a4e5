package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/retention"
	"github.com/inlet-dev/inlet/schema"
)

func runMigrate(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "migrate", "", `
Apply every schema migration the database lacks, as the connecting role (which
becomes the owner of webhook_ingress and must be allowed to create roles the
first time), then create the period partitions the config's retention section
asks for ahead of now (inlet retention does too). Partition indexes a
migration left for later (012's payload index on partitions over 10,000 rows)
are then built one partition at a time with CREATE INDEX CONCURRENTLY, so
ingest goes on meanwhile; each build is printed, and an interrupted run picks
up where it stopped. Running it again is a no-op. The migrations' notices and
warnings (a change one could not make as this role, with the statement to run
as another) are printed on stderr as "inlet migrate: notice: ..."; the exit
status stays 0.

`+databaseHelp)
	cfgPath := configFlag(fs)
	dbURL := fs.String("database-url", "", "PostgreSQL URL (overrides the config file)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := flagsOnly(fs); err != nil {
		return err
	}
	c, _, err := loadConfig(*cfgPath, func() (inletyaml.Config, error) { return inletyaml.Config{}.WithDefaults(), nil })
	if err != nil {
		return err
	}
	url := databaseURL(*dbURL, c.DatabaseURL)
	if url == "" {
		return errNoDatabase(*cfgPath, true)
	}
	var notices bool
	conn, err := connectMigrate(ctx, url, func(n *pgconn.Notice) {
		if notices {
			printNotice(env.stderr, n)
		}
	})
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// The migrations' notices only: the index builds' DROP INDEX … IF
	// EXISTS would say "does not exist, skipping" for every partition.
	notices = true
	applied, err := schema.Migrate(ctx, conn)
	notices = false
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(env.stdout, "schema %s is current (version %d)\n", schema.Name, schema.Latest())
	} else {
		for _, m := range applied {
			fmt.Fprintf(env.stdout, "applied %03d_%s\n", m.Version, m.Name)
		}
		fmt.Fprintf(env.stdout, "schema %s is at version %d\n", schema.Name, schema.Latest())
	}
	built, err := schema.BuildIndexes(ctx, conn, func(b schema.IndexBuild) {
		fmt.Fprintf(env.stdout, "building %s on partition %s (CONCURRENTLY: ingest continues)\n", b.Index, b.Partition)
	}, func() {
		fmt.Fprintln(env.stdout, "waiting for another inlet migrate building partition indexes")
	})
	if err != nil {
		return err
	}
	if len(built) > 0 {
		fmt.Fprintf(env.stdout, "built %s\n", plural(len(built), "partition index"))
	}
	o, err := c.Retention.Options()
	if err != nil {
		return err
	}
	created, err := retention.EnsurePartitions(ctx, conn, o.Interval, o.Ahead, o.LockTimeout)
	if err != nil {
		return err
	}
	if len(created) > 0 {
		fmt.Fprintf(env.stdout, "created %s, %s to %s\n", plural(len(created), o.Interval+" partition"),
			created[0].Start.UTC().Format("2006-01-02"), created[len(created)-1].End.UTC().Format("2006-01-02"))
	}
	return nil
}

// connectMigrate is connectURL with the server's notices passed to onNotice:
// a migration that cannot do all it should as the connecting role (060
// re-owning a partition another login owns) says so in a NOTICE, with what
// to run instead, and pgx drops notices unless asked for them.
func connectMigrate(ctx context.Context, url string, onNotice func(*pgconn.Notice)) (*pgx.Conn, error) {
	return connectURL(ctx, url, "inlet-migrate", func(cc *pgx.ConnConfig) {
		cc.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { onNotice(n) }
	})
}

// printNotice prints a server NOTICE, WARNING or INFO on w as the server's
// words, "inlet migrate: notice: …", with its detail and hint when it has
// them. Other levels (DEBUG, LOG, which a role's client_min_messages may
// ask for) are left out.
func printNotice(w io.Writer, n *pgconn.Notice) {
	level := n.SeverityUnlocalized
	if level == "" {
		level = n.Severity
	}
	switch level {
	case "NOTICE", "WARNING", "INFO":
	default:
		return
	}
	level = strings.ToLower(level)
	fmt.Fprintf(w, "inlet migrate: %s: %s\n", level, n.Message)
	if n.Detail != "" {
		fmt.Fprintf(w, "inlet migrate: %s detail: %s\n", level, n.Detail)
	}
	if n.Hint != "" {
		fmt.Fprintf(w, "inlet migrate: %s hint: %s\n", level, n.Hint)
	}
}
