package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// ownerDatabase gives the test its own migrated database: its URL (the
// owner's) and a connection to it, closed when the test ends.
func ownerDatabase(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return url, conn
}

// recordNextRelease records a newer release's migration (version Latest+1),
// as the next release's inlet migrate writes it, and returns that version.
func recordNextRelease(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	next := schema.Latest() + 1
	if _, err := conn.Exec(context.Background(), `INSERT INTO webhook_ingress.schema_migrations (version, name) VALUES ($1, 'next_release')`, next); err != nil {
		t.Fatal(err)
	}
	return next
}

// insertUnfilledStripeEvent stores an event of source provider (scheme
// stripe) with payload and occurred_at NULL, as an ingress before 012 did.
func insertUnfilledStripeEvent(t *testing.T, conn *pgx.Conn, provider, id, body string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
		VALUES ($1, 'stripe', $2, 'charge.succeeded', '{}', convert_to($3, 'UTF8'), true)`, provider, id, body); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateOnNewerSchemaAppliesNothingAndSucceeds (review helper-240, fixed).
//
// Defect: during a rolling upgrade (docs/pipeline.md "Upgrading from the
// previous protocol": "run inlet migrate, then replace the services in any
// order"; 070: "Services of the previous version run beside it unchanged")
// and on a rollback of the binary after inlet migrate, the services of the
// previous version accept the newer schema (schema.Check/CheckWritable pass
// for a version above Latest), but the previous version's inlet migrate
// fails, exit 1, "database schema is at version N, newer than this binary's
// M: upgrade inlet" (schema/migrate.go:migrateTo, the `current > len(ms)`
// branch). The shipped deployments run inlet migrate before every service
// and make the services depend on its success: systemd
// (inlet-ingress/streamer/consumer.service: Requires= and After=
// inlet-migrate.service, which runs once per boot) and compose
// (depends_on migrate: service_completed_successfully). So a host of the
// previous version that reboots mid-rollout, or any rollback of the
// binary, leaves ingress, streamer and consumer stopped ("Dependency
// failed"), although they would run: ingest on that host is down until it
// is upgraded again. The refusal protects nothing: the old binary has no
// migration to apply.
// Setup: a database migrated to this binary's Latest, with a newer
// release's migration recorded (schema_migrations version Latest+1, what
// the next release's inlet migrate writes); `inlet migrate` of this binary
// run on it, as the shipped units run it (DATABASE_URL, no --config).
// Expected: exit 0, nothing applied ("schema webhook_ingress is current",
// or "newer than this binary: nothing to apply"), as the services' own
// schema check accepts that database.
// Observed: schema.CheckWritable passes; inlet migrate exits 1 with
// "inlet: database schema is at version 71, newer than this binary's 70:
// upgrade inlet".
// Fixed: migrateTo returns a *schema.NewerSchemaError, having applied
// nothing; inlet migrate prints that the schema is newer and nothing was
// applied, builds no partition index (the newer release's), creates the
// partitions ahead through the database's own create_partitions, and
// exits 0.
func TestMigrateOnNewerSchemaAppliesNothingAndSucceeds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := ownerDatabase(t)
	next := recordNextRelease(t, conn)
	// Control: every service of this version accepts the newer schema.
	if err := schema.CheckWritable(ctx, conn); err != nil {
		t.Fatalf("the services' schema check on a schema at %d: %v; want accepted", next, err)
	}
	out, errOut, code := runInlet(t, cleanEnv("DATABASE_URL="+url), "migrate")
	if code != 0 {
		t.Errorf("inlet migrate of version %d on a schema a newer release migrated to %d: exit %d; want 0 and nothing applied "+
			"(the shipped systemd units and compose file start no service after a failed migrate, so a host of this version "+
			"cannot start during the rollout or after a rollback, though its services accept the schema)\nstdout: %s\nstderr: %s",
			schema.Latest(), next, code, out, errOut)
	}
}

// TestBackfillStoredRefusesWithoutTheSourcesConfig (review helper-240, fixed).
//
// Defect: docs/database.md "Upgrading to 012" says to run `inlet backfill
// stored [--batch 1000]   # as the schema owner, like inlet migrate`, and
// that it "derives both from the stored headers and bytes exactly as
// ingress does now". inlet migrate is shipped to run without a config file
// (systemd WorkingDirectory=/, the Kubernetes Job: "No --config: migrate
// needs only DATABASE_URL"; a --config would need every secret the file
// names). Run the same way, inlet backfill stored finds no inlet.yaml and
// silently derives every source from "embedded defaults"
// (cmd/inlet/backfillstored.go:runBackfillStored via loadConfig's
// fallback; backfill/stored.go:FillStored's derive for a source not in
// cfg.Sources): store_json true for every scheme but twilio, the scheme's
// default occurred_at field. A source the ingress keeps no JSON copy of
// (sources[].store_json: false, e.g. so that a body's card or personal data
// is not copied into a GIN-indexed column, or for space) gets payload
// filled on every stored event, and that cannot be undone: events is
// append-only, and events_guard lets payload go only from NULL to a value.
// Nothing in its output says the sources' settings were not read.
// Setup: the services' inlet.yaml (elsewhere, as /etc/inlet/inlet.yaml)
// declares source quiet (type stripe) with store_json: false; one event of
// quiet stored before 012's columns were filled (payload NULL); inlet
// backfill stored run with the owner's DATABASE_URL in a directory without
// inlet.yaml. Control: the same with --config, on another such event.
// Expected: the event's payload stays NULL (as ingress keeps it): the
// command refuses to derive without the sources' configuration (or reads
// it), exit non-zero, naming --config.
// Observed: exit 0, "done: events through 2 filled (2 read, 0 occurred_at,
// 2 payloads)", payload = the parsed body (with its "card" field), no word
// that no configuration was read; with --config (control, run first) the
// payloads stay NULL.
// Fixed: runBackfillStored refuses (usage error, exit 2, naming --config
// and why) unless a configuration with a sources: section was read (--config,
// or the project's inlet.yaml), loaded as the ingress loads it; the events of
// a source that configuration does not name are skipped (backfill.StoredConfig
// OnlyConfigured), counted and named in the summary line, not derived from
// the scheme's defaults.
func TestBackfillStoredRefusesWithoutTheSourcesConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := ownerDatabase(t)
	// Two events of quiet stored with payload NULL (as before 012, or by an
	// ingress that kept none): inserted by the owner, as an old ingress did.
	for _, id := range []string{"evt_review240_a", "evt_review240_b"} {
		insertUnfilledStripeEvent(t, conn, "quiet", id, `{"id":"`+id+`","created":1765000000,"type":"charge.succeeded","card":"4242424242424242"}`)
	}
	payloadOf := func(id string) *string {
		t.Helper()
		var p *string
		if err := conn.QueryRow(ctx, `SELECT payload::text FROM webhook_ingress.events WHERE external_event_id = $1`, id).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// The services' configuration: quiet keeps no JSON copy.
	etc := t.TempDir()
	cfg := writeFile(t, etc, "inlet.yaml", `sources:
  - name: quiet
    type: stripe
    secrets: ["whsec_review240_quiet_secret"]
    store_json: false
`)
	// Control: with the services' file, quiet's event keeps payload NULL.
	// Events up to the newest are covered by the first run; the second
	// starts over (the first finished), so each run sees both events: the
	// control run goes first and fills nothing of quiet.
	out, errOut, code := runInlet(t, cleanEnv("DATABASE_URL="+url), "backfill", "stored", "--config", cfg)
	if code != 0 {
		t.Fatalf("control: inlet backfill stored --config: exit %d\n%s\n%s", code, out, errOut)
	}
	if p := payloadOf("evt_review240_a"); p != nil {
		t.Fatalf("control: with --config (store_json: false) payload = %s; want NULL", *p)
	}

	// As the docs say to run it, like inlet migrate: the owner's
	// DATABASE_URL, no inlet.yaml in the working directory.
	wd := t.TempDir()
	if _, err := os.Stat(filepath.Join(wd, "inlet.yaml")); err == nil {
		t.Fatal("working directory has an inlet.yaml")
	}
	out, errOut, code = runInletIn(t, wd, cleanEnv("DATABASE_URL="+url), "backfill", "stored")
	p := payloadOf("evt_review240_b")
	if code == 0 || p != nil {
		filled := "NULL"
		if p != nil {
			filled = *p
		}
		t.Errorf("inlet backfill stored without the services' config (run like inlet migrate): exit %d, quiet's payload = %s; "+
			"want it refused (non-zero, naming --config) and payload left NULL, as the ingress (store_json: false) keeps it: "+
			"a filled payload can never be set back to NULL (events_guard)\nstdout: %s\nstderr: %s",
			code, filled, strings.TrimSpace(out), strings.TrimSpace(errOut))
	}
}

// inlet migrate on a schema a newer release migrated runs none of this
// version's partition index builds: an index the newer release left to build
// (here one made ON ONLY events, with no partition's index attached) is the
// newer inlet migrate's, and stays as it was; the output says the schema is
// newer and nothing was applied (review helper-240, fixed).
func TestMigrateOnNewerSchemaBuildsNoIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := ownerDatabase(t)
	next := recordNextRelease(t, conn)
	if _, err := conn.Exec(ctx, `CREATE INDEX idx_events_next_release ON ONLY webhook_ingress.events (event_type)`); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runInlet(t, cleanEnv("DATABASE_URL="+url), "migrate")
	if code != 0 {
		t.Fatalf("inlet migrate on schema %d: exit %d\nstdout: %s\nstderr: %s", next, code, out, errOut)
	}
	want := fmt.Sprintf("is at version %d, newer than this binary's %d: nothing applied", next, schema.Latest())
	if !strings.Contains(out, want) || strings.Contains(out, "building ") {
		t.Errorf("inlet migrate on schema %d: stdout %q; want it to say %q and build nothing", next, out, want)
	}
	var attached int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_inherits
		WHERE inhparent = 'webhook_ingress.idx_events_next_release'::regclass`).Scan(&attached); err != nil {
		t.Fatal(err)
	}
	if attached != 0 {
		t.Errorf("inlet migrate of version %d built %d partition indexes of the newer release's idx_events_next_release; want none",
			schema.Latest(), attached)
	}
	var version int
	if err := conn.QueryRow(ctx, `SELECT max(version) FROM webhook_ingress.schema_migrations`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != next {
		t.Errorf("schema version after inlet migrate: %d; want %d (unchanged)", version, next)
	}
}

// inlet backfill stored leaves the events of a source its configuration does
// not name as they are (their scheme's defaults would keep a JSON copy the
// source may never have kept), and names that source in its summary; a
// configured source's events are filled (review helper-240, fixed).
func TestBackfillStoredSkipsSourcesNotConfigured(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := ownerDatabase(t)
	for _, e := range []struct{ provider, id string }{{"kept", "evt_kept"}, {"gone", "evt_gone"}} {
		insertUnfilledStripeEvent(t, conn, e.provider, e.id, `{"id":"`+e.id+`","created":1765000000,"type":"charge.succeeded"}`)
	}
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", `sources:
  - name: kept
    type: stripe
    secrets: ["whsec_skip_test_kept_secret"]
`)
	out, errOut, code := runInlet(t, cleanEnv("DATABASE_URL="+url), "backfill", "stored", "--config", cfg)
	if code != 0 {
		t.Fatalf("inlet backfill stored --config: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "1 event of 1 source not in "+cfg+" left unfilled") || !strings.Contains(out, "gone") {
		t.Errorf("summary %q: want it to count gone's event as left unfilled, naming gone", strings.TrimSpace(out))
	}
	for id, want := range map[string]bool{"evt_kept": true, "evt_gone": false} {
		var filled, occurred bool
		if err := conn.QueryRow(ctx, `SELECT payload IS NOT NULL, occurred_at IS NOT NULL FROM webhook_ingress.events WHERE external_event_id = $1`, id).
			Scan(&filled, &occurred); err != nil {
			t.Fatal(err)
		}
		if filled != want || occurred != want {
			t.Errorf("%s: payload filled %t, occurred_at filled %t; want %t (only configured sources are derived)", id, filled, occurred, want)
		}
	}
}
