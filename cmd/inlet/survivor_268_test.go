package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestSurvivor268_VerifyJSONExitsNonZeroOnTamper (mutation tester
// helper-268).
// Guarantee: "inlet events verify ... exits 1 if there is one" event that
// no longer verifies, whatever the output format: --json changes what is
// printed, not the exit code a script or a cron job checks.
// Mutant: cmd/inlet/events.go:430, runEventsVerify, near its end:
// `if rep.Failed > 0 {` -> `if rep.Failed > 0 && !*asJSON {` (the JSON
// report says "failed": 1, and the command exits 0).
// Why existing tests missed it: every tamper check (tests/admin_test.go
// TestAdminCommandsEndToEnd) runs the table form; the --json form was run
// only on intact events or not at all.
func TestSurvivor268_VerifyJSONExitsNonZeroOnTamper(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	t.Setenv("DATABASE_URL", url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// A stored, signature-verified stripe event whose stored signature does
	// not match its stored body: what tampering leaves.
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_survivor268', 'invoice.paid',
		'{"Stripe-Signature": ["t=1765000000,v1=0000000000000000000000000000000000000000000000000000000000000000"]}',
		convert_to('{"id":"evt_survivor268","type":"invoice.paid"}', 'UTF8'), true)`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "inlet.yaml")
	if err := os.WriteFile(cfg, []byte("database_url: ${DATABASE_URL}\nsources:\n  - {name: stripe, type: stripe, secrets: [\"whsec_survivor268\"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"events", "verify", "--since", "1h", "--config", cfg},
		{"events", "verify", "--since", "1h", "--config", cfg, "--json"},
	} {
		var out, errOut bytes.Buffer
		err := run(ctx, &environment{stdout: &out, stderr: &errOut}, args)
		if err == nil || errors.Is(err, errUsage) {
			t.Errorf("inlet %v on a tampered event: error %v; want a failure (exit 1)\nstdout: %s\nstderr: %s", args, err, out.String(), errOut.String())
		}
		if args[len(args)-1] == "--json" {
			var rep struct {
				Checked, Verified, Failed int
				Failures                  []struct {
					EventID int64  `json:"event_id"`
					Reason  string `json:"reason"`
				} `json:"failures"`
			}
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Checked != 1 || rep.Failed != 1 || rep.Verified != 0 || len(rep.Failures) != 1 {
				t.Errorf("inlet %v: report %+v (%v); want 1 checked, 1 failed\n%s", args, rep, err, out.String())
			}
		}
	}
}

// TestSurvivor268_DLQListErrorClassFilters (mutation tester helper-268).
// Guarantee: inlet dlq list --error-class CLASS lists only the dead letters
// whose last error class is CLASS (its help: "only this last error
// class"), so an operator replaying "every permanent failure" from the
// list does not pick up the timeouts.
// Mutant: cmd/inlet/dlq.go:55, the filter built from the flags:
// `ErrorClass: *class` -> `ErrorClass: ""` (the flag parsed and ignored:
// every dead letter listed).
// Why existing tests missed it: the error-class filter is tested in
// admin.ListDeadLetters and GET /api/dlq, never through the command's
// flag; no test runs inlet dlq list --error-class.
func TestSurvivor268_DLQListErrorClassFilters(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	t.Setenv("DATABASE_URL", url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, max_attempts) VALUES ('billing', 'stripe', 3)`); err != nil {
		t.Fatal(err)
	}
	class := map[string]string{"evt_s268_permanent": "permanent", "evt_s268_timeout": "timeout"}
	for ext, c := range class {
		if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
			VALUES ('stripe', 'stripe', $1, 'invoice.paid', '{}', convert_to('{}', 'UTF8'), true)`, ext); err != nil {
			t.Fatal(err)
		}
		tag, err := conn.Exec(ctx, `UPDATE webhook_ingress.jobs j SET status = 'dead_letter', attempt_count = 3,
			last_error = 'said no', last_error_class = $2, updated_at = now()
			FROM webhook_ingress.events e WHERE e.id = j.event_id AND e.external_event_id = $1 AND j.handler = 'billing'`, ext, c)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("dead-letter the job of %s: %v (%d rows)", ext, err, tag.RowsAffected())
		}
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "inlet.yaml")
	if err := os.WriteFile(cfg, []byte("database_url: ${DATABASE_URL}\nsources:\n  - {name: stripe, type: stripe, secrets: [\"whsec_survivor268\"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	list := func(args ...string) []string {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append([]string{"dlq", "list", "--json", "--config", cfg}, args...)
		if err := run(ctx, &environment{stdout: &out, stderr: &errOut}, args); err != nil {
			t.Fatalf("inlet %v: %v\n%s%s", args, err, out.String(), errOut.String())
		}
		var page struct {
			Items []struct {
				ExternalEventID string `json:"external_event_id"`
				LastErrorClass  string `json:"last_error_class"`
			} `json:"items"`
		}
		if err := json.Unmarshal(out.Bytes(), &page); err != nil {
			t.Fatalf("inlet %v: %v\n%s", args, err, out.String())
		}
		var got []string
		for _, d := range page.Items {
			got = append(got, d.ExternalEventID+":"+d.LastErrorClass)
		}
		return got
	}
	if got := list(); len(got) != 2 {
		t.Fatalf("inlet dlq list: %v, want both dead letters", got)
	}
	for ext, c := range class {
		if got, want := strings.Join(list("--error-class", c), " "), ext+":"+c; got != want {
			t.Errorf("inlet dlq list --error-class %s: %q, want only %q", c, got, want)
		}
	}
}

// TestSurvivor268_EventsListTypeFilters (mutation tester helper-268).
// Guarantee: inlet events list --type GLOB lists only the events whose type
// matches the glob (and --source only that source's): the operator's view
// of "what invoice.* events arrived" holds nothing else.
// Mutant: cmd/inlet/events.go:90, the filter built from the flags:
// `EventType: *typ` -> `EventType: ""` (the flag parsed and ignored).
// Why existing tests missed it: the one run of --type
// (tests/admin_test.go TestAdminCommandsEndToEnd) lists a database holding
// only events of the matching type, so ignoring the filter lists the same.
func TestSurvivor268_EventsListTypeFilters(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	t.Setenv("DATABASE_URL", url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, e := range [][3]string{
		{"stripe", "evt_s268_invoice", "invoice.paid"},
		{"stripe", "evt_s268_charge", "charge.succeeded"},
		{"github", "gh_s268_push", "push"},
	} {
		if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
			VALUES ($1, $1, $2, $3, '{}', convert_to('{}', 'UTF8'), true)`, e[0], e[1], e[2]); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "inlet.yaml")
	if err := os.WriteFile(cfg, []byte("database_url: ${DATABASE_URL}\nsources:\n  - {name: stripe, type: stripe, secrets: [\"whsec_survivor268\"]}\n  - {name: github, type: github, secrets: [\"gh_survivor268\"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	list := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append([]string{"events", "list", "--json", "--config", cfg}, args...)
		if err := run(ctx, &environment{stdout: &out, stderr: &errOut}, args); err != nil {
			t.Fatalf("inlet %v: %v\n%s%s", args, err, out.String(), errOut.String())
		}
		var page struct {
			Items []struct {
				ExternalEventID string `json:"external_event_id"`
			} `json:"items"`
		}
		if err := json.Unmarshal(out.Bytes(), &page); err != nil {
			t.Fatalf("inlet %v: %v\n%s", args, err, out.String())
		}
		var got []string
		for _, e := range page.Items {
			got = append(got, e.ExternalEventID)
		}
		return strings.Join(got, " ")
	}
	if got := list(); got != "gh_s268_push evt_s268_charge evt_s268_invoice" {
		t.Fatalf("inlet events list: %q, want all three, newest first", got)
	}
	for _, tc := range [][]string{
		{"evt_s268_invoice", "--type", "invoice.*"},
		{"evt_s268_charge", "--type", "charge.succeeded"},
		{"evt_s268_charge evt_s268_invoice", "--source", "stripe"},
		{"evt_s268_invoice", "--source", "stripe", "--type", "invoice.*"},
		{"", "--source", "github", "--type", "invoice.*"},
	} {
		if got := list(tc[1:]...); got != tc[0] {
			t.Errorf("inlet events list %v: %q, want %q", tc[1:], got, tc[0])
		}
	}
}
