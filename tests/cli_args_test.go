package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestRetentionRefusesStrayArguments (review helper-167, fixed; this
// describes the code before the fix): inlet retention never looked at its
// positional arguments (cmd/inlet/retention.go: runRetention parsed the flags
// and went on; there was no fs.NArg() check, unlike every operator command
// such as replay, audit seal, events list). A --dry-run that did not arrive as
// a flag — pasted from a page whose typography turned "--" into an em dash
// ("—dry-run"), or written "dry-run" — is a positional argument: it was
// silently dropped and the run was a real one. On a destructive command that
// drops whole periods of the append-only event log, that is lost data the
// operator explicitly asked to only preview. docs/operations.md: "A usage
// error (an unknown flag, a missing argument) exits 2".
//
// Now: "inlet retention ... —dry-run" exits 2 with a one-line usage error
// naming the stray argument, and drops nothing.
func TestRetentionRefusesStrayArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, env := sealedOldLog(t,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at) VALUES
			('stripe', 'stripe', 'evt_rv167_old_1', '{}', true, now() - interval '60 days'),
			('stripe', 'stripe', 'evt_rv167_old_2', '{}', true, now() - interval '60 days'),
			('stripe', 'stripe', 'evt_rv167_new', '{}', true, now() - interval '1 minute')`,
		`UPDATE webhook_ingress.jobs SET status = 'completed'`,
	)
	// An em dash, as a blog or chat client renders "--dry-run".
	out, errOut, code := runInlet(t, env, "retention", "--max-age", "30d", "\u2014dry-run")
	var events int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 3 {
		t.Errorf("inlet retention --max-age 30d \u2014dry-run dropped %d of 3 events (exit %d): a stray argument was ignored and the run was real\nstdout:\n%s\nstderr:\n%s",
			3-events, code, out, errOut)
	}
	if code != 2 || !strings.Contains(errOut, "dry-run") {
		t.Errorf("inlet retention with a stray argument: exit %d, stderr %q; want exit 2 naming the argument", code, errOut)
	}
}

// TestMigrateRefusesStrayArguments (review helper-167, fixed; this describes
// the code before the fix): inlet migrate never looked at its positional
// arguments either (cmd/inlet/migrate.go: runMigrate had no fs.NArg() check).
// An operator who typed what other migration tools take — "inlet migrate
// status" to see the version, "inlet migrate down" or "inlet migrate 41" —
// got every pending migration applied to the database instead, exit 0.
// Migrations create cluster-wide roles and take table locks ingest queues
// behind, so doing them unasked is not harmless.
//
// Now: exit 2, "inlet migrate takes flags only, got [\"status\"]", and the
// database untouched.
func TestMigrateRefusesStrayArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewEmptyDatabase(t)
	env := cleanEnv("DATABASE_URL=" + dbURL)
	out, errOut, code := runInlet(t, env, "migrate", "status")
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var schemaExists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = 'webhook_ingress')`).Scan(&schemaExists); err != nil {
		t.Fatal(err)
	}
	if schemaExists {
		t.Errorf("inlet migrate status (exit %d) applied the migrations: an unknown argument was ignored\nstdout:\n%s", code, out)
	}
	if code != 2 || !strings.Contains(errOut, "status") {
		t.Errorf("inlet migrate status: exit %d, stderr %q; want exit 2 naming the argument", code, errOut)
	}
}

// TestRolesListUnknownNameIsAnError (review helper-167, fixed; this
// describes the code before the fix): inlet roles list NAME for a consumer
// that does not exist (a typo) exited 0 and printed "no consumer roles (every
// consumer runs as webhook_worker)" — a false statement while other consumer
// roles exist, and exactly what an operator auditing isolation does not want
// to be told wrongly. cmd/inlet/roles.go runRolesList printed that sentence
// whenever the (filtered) list was empty, ignoring that a NAME was given.
// Every other lookup of one named thing fails on a miss (events show, dlq
// show, subscriptions disable, roles drop-consumer: exit 1, "no such ...").
//
// Now: exit 1 with "no consumer role webhook_consumer_NAME" (and never the
// claim that there are none at all).
func TestRolesListUnknownNameIsAnError(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	env := cleanEnv("DATABASE_URL=" + dbURL)
	if out, errOut, code := runInlet(t, env, "roles", "create-consumer", "payments", "--handlers", "billing", "--scope", "stripe"); code != 0 {
		t.Fatalf("roles create-consumer: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := runInlet(t, env, "roles", "list", "paymnts")
	if strings.Contains(out+errOut, "no consumer roles") {
		t.Errorf("inlet roles list paymnts (exit %d) says there are no consumer roles at all, while webhook_consumer_payments exists:\n%s%s", code, out, errOut)
	}
	if code == 0 {
		t.Errorf("inlet roles list of a consumer that does not exist: exit 0; want exit 1 naming webhook_consumer_paymnts")
	}
}

// TestDocsNameRealFlags: every flag the docs (README.md, docs/*.md) give an
// inlet command, in a code span or a code block, is one of that command's
// flags in its --help. docs/pipeline.md named `inlet replay --missing`, a flag
// that never existed (the filtered replay creates the missing jobs).
func TestDocsNameRealFlags(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../README.md")
	helpFlag := regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`)
	flags := map[string]map[string]bool{} // command words → its flags; nil: no such command
	flagsOf := func(words []string) map[string]bool {
		key := strings.Join(words, " ")
		if f, ok := flags[key]; ok {
			return f
		}
		out, _, code := runInlet(t, cleanEnv(), append(slices.Clone(words), "--help")...)
		var f map[string]bool
		if code == 0 && strings.Contains(out, "Usage: inlet "+words[0]) {
			f = map[string]bool{"help": true, "h": true}
			for _, m := range helpFlag.FindAllStringSubmatch(out, -1) {
				f[m[1]] = true
			}
		}
		flags[key] = f
		return f
	}
	// The sentence as it was is caught: the check reads what it should.
	if p, _ := docFlagProblems("catch-up (`inlet replay --missing|--unrouted`, a filtered handler's catch-up)", flagsOf); len(p) != 1 || !strings.Contains(p[0], "--missing") {
		t.Errorf("the check of `inlet replay --missing|--unrouted` found %q; want --missing alone", p)
	}
	checked := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		problems, n := docFlagProblems(string(b), flagsOf)
		checked += n
		for _, p := range problems {
			t.Errorf("%s: %s", file, p)
		}
	}
	if checked < 10 {
		t.Errorf("checked %d inlet invocations with flags in the docs; the scan finds too few to be reading them", checked)
	}
}

// docFlagProblems lists the flags that text's code spans and code blocks give
// an inlet command and that flagsOf (nil: no such command) does not know, and
// counts the invocations with flags it checked.
func docFlagProblems(text string, flagsOf func(words []string) map[string]bool) (problems []string, checked int) {
	span := regexp.MustCompile("`([^`\n]+)`")
	invocation := regexp.MustCompile(`(?:^|[\s($])inlet ([^|;&>]*(?:\|--[^|;&>]*)*)`)
	word := regexp.MustCompile(`^[a-z][a-z-]*$`)
	flagRe := regexp.MustCompile(`(?:^|[\s\[|(])--?([a-z][a-z0-9-]*)`)
	var snippets []string
	fenced := false
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			snippets = append(snippets, line)
			continue
		}
		for _, m := range span.FindAllStringSubmatch(line, -1) {
			snippets = append(snippets, m[1])
		}
	}
	for _, s := range snippets {
		for _, m := range invocation.FindAllStringSubmatch(s, -1) {
			var words []string
			for _, w := range strings.Fields(m[1]) {
				if !word.MatchString(w) {
					break
				}
				words = append(words, w)
			}
			found := flagRe.FindAllStringSubmatch(m[1], -1)
			if len(words) == 0 || len(found) == 0 {
				continue
			}
			known := flagsOf(words)
			if known == nil {
				continue
			}
			checked++
			for _, f := range found {
				if !known[f[1]] {
					problems = append(problems, fmt.Sprintf("`inlet %s` names --%s, which inlet %s --help does not list",
						strings.TrimSpace(m[1]), f[1], strings.Join(words, " ")))
				}
			}
		}
	}
	return problems, checked
}
