package main

import (
	"context"
	"errors"
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
up where it stopped. Running it again is a no-op. On a schema a newer release
migrated (a host of this version during a rolling upgrade, a rolled-back
binary) it applies nothing and builds no index, says so, creates the
partitions ahead through the database's own function, and exits 0: the
services of this version run against that schema. The migrations' notices and
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
	url, err := databaseURL(*dbURL, c.DatabaseURL)
	if err != nil {
		return err
	}
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
	var newer *schema.NewerSchemaError
	if errors.As(err, &newer) {
		return migrateNewer(ctx, env, conn, c, newer)
	}
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
	_, err = createPartitionsAhead(ctx, env, conn, c)
	return err
}

// migrateNewer is inlet migrate on a schema a newer release migrated (a host
// of this version rebooting during a rolling upgrade, a binary rolled back
// after the new one's migrate): nothing applied, and exit 0, as the services
// of this version accept that schema and the shipped units start them only
// after migrate succeeded (review helper-240). The partition index builds
// are the newer release's to run: its migrations decided which indexes
// exist and which it left to build, and how (this version's builds, lock
// and definition parsing are its own). The partitions ahead are still made,
// through the database's own webhook_ingress.create_partitions, whose body
// is the newer migration's (this binary passes only the period and how
// many): unless the newer release changed its arguments, then the newer
// inlet migrate and inlet retention make them.
func migrateNewer(ctx context.Context, env *environment, conn *pgx.Conn, c inletyaml.Config, newer *schema.NewerSchemaError) error {
	fmt.Fprintf(env.stdout, "schema %s is at version %d, newer than this binary's %d: nothing applied; "+
		"services of this version run against it (partition indexes are left to the newer inlet migrate)\n",
		schema.Name, newer.Version, newer.Latest)
	skipped, err := createPartitionsAhead(ctx, env, conn, c)
	if skipped {
		fmt.Fprintf(env.stdout, "partitions ahead not created: webhook_ingress.create_partitions of schema %d takes other arguments "+
			"than this binary passes; the newer inlet migrate and inlet retention create them\n", newer.Version)
		return nil
	}
	return err
}

// createPartitionsAhead creates the period partitions the retention section asks
// for ahead of now and prints them. skipped reports that the database has
// no create_partitions this binary can call (undefined_function: a newer
// schema changed its arguments); the error is then returned too.
func createPartitionsAhead(ctx context.Context, env *environment, conn *pgx.Conn, c inletyaml.Config) (skipped bool, err error) {
	o, err := c.Retention.Options()
	if err != nil {
		return false, err
	}
	created, err := retention.EnsurePartitions(ctx, conn, o.Interval, o.Ahead, o.LockTimeout)
	if err != nil {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == "42883", err // undefined_function
	}
	if len(created) > 0 {
		fmt.Fprintf(env.stdout, "created %s, %s to %s\n", plural(len(created), o.Interval+" partition"),
			created[0].Start.UTC().Format("2006-01-02"), created[len(created)-1].End.UTC().Format("2006-01-02"))
	}
	return false, nil
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
