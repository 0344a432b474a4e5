package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestServicesRefuseStrayArguments (review helper-167, fixed; this describes
// the code before the fix): the long-running services never looked at their
// positional arguments: inlet ingress and inlet dev (cmd/inlet/ingress.go
// runIngress, cmd/inlet/dev.go runDev; likewise streamer, consumer, relay and
// control-plane in services.go/relay.go/controlplane.go) parsed their flags
// and started, so "inlet ingress extra" (or a flag that lost its dashes,
// "inlet dev listen 127.0.0.1:8080", or an em-dashed "—config prod.yaml")
// started the service on other settings than the operator wrote, with no
// word. docs/operations.md: "A usage error (an unknown flag, a missing
// argument) exits 2 with one line that points to the help"; the operator
// commands (events list, replay, audit seal, config check) all refuse a stray
// argument this way.
//
// Now: each service returns a usage error (exit 2) naming the stray
// argument, before loading anything or binding a port.
func TestServicesRefuseStrayArguments(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	dir := t.TempDir()
	t.Chdir(dir)
	// A complete file: the database refuses connections (port 1), so inlet
	// dev starts no local PostgreSQL and nothing here waits on one.
	cfg := filepath.Join(dir, "svc.yaml")
	if err := os.WriteFile(cfg, []byte(`database_url: postgres://u:p@127.0.0.1:1/db
ingress:
  listen: "127.0.0.1:0"
  metrics_listen: "off"
sources:
  - name: acme
    type: standard-webhooks
    secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"ingress", "dev"} {
		t.Run(cmd, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			args := []string{cmd, "--config", cfg, "\u2014listen", "127.0.0.1:9999"}
			err := run(ctx, &environment{stdout: &out, stderr: &errOut}, args)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "listen") {
				t.Errorf("inlet %s: error %v; want a usage error naming the stray arguments [\u2014listen 127.0.0.1:9999]\nstderr:\n%s",
					strings.Join(args, " "), err, errOut.String())
			}
		})
	}
}

// Every command that takes flags only refuses a positional argument as a
// usage error naming it, before it reads its config file (here one that does
// not exist: reading it would be another error).
func TestFlagsOnlyCommandsRefuseStrayArguments(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Chdir(t.TempDir())
	for _, cmd := range [][]string{
		{"ingress"}, {"dev"}, {"streamer"}, {"consumer"}, {"relay"}, {"control-plane"},
		{"migrate"}, {"retention"}, {"config", "check"}, {"audit", "seal"}, {"audit", "verify"},
		{"events", "list"}, {"events", "types"}, {"dlq", "list"}, {"subscriptions", "list"},
		{"replay"}, {"backfill", "stored"},
	} {
		name := strings.Join(cmd, " ")
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			env := &environment{stdout: &out, stderr: &errOut}
			err := run(context.Background(), env, append(slices.Clone(cmd), "--config", "missing.yaml", "\u2014dry-run"))
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "\u2014dry-run") {
				t.Fatalf("inlet %s --config missing.yaml \u2014dry-run: error %v; want a usage error naming the stray argument", name, err)
			}
			if code := exitCode(env, err); code != 2 || strings.Count(errOut.String(), "\n") != 1 {
				t.Errorf("inlet %s with a stray argument: exit %d, stderr %q; want exit 2 and one line", name, code, errOut.String())
			}
		})
	}
}

// --limit 0 is refused as -1 is (the admin package reads a 0 as "none given",
// so it silently meant the default page of 50); an omitted --limit is still
// that default.
func TestListsRefuseLimitZero(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Chdir(t.TempDir())
	for _, list := range [][]string{{"events", "list"}, {"dlq", "list"}} {
		name := strings.Join(list, " ")
		for _, limit := range []string{"0", "-1", "1001"} {
			var out, errOut bytes.Buffer
			env := &environment{stdout: &out, stderr: &errOut}
			err := run(context.Background(), env, append(slices.Clone(list), "--limit", limit))
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--limit "+limit+": must be between 1 and 1000") {
				t.Errorf("inlet %s --limit %s: error %v; want a usage error: must be between 1 and 1000", name, limit, err)
			}
		}
		// In range, --limit passes (and the command goes on to look for a
		// database, which there is none of here).
		var out, errOut bytes.Buffer
		err := run(context.Background(), &environment{stdout: &out, stderr: &errOut}, append(slices.Clone(list), "--limit", "1000"))
		if err != nil && strings.Contains(err.Error(), "limit") {
			t.Errorf("inlet %s --limit 1000: %v", name, err)
		}
		out.Reset()
		if err := run(context.Background(), &environment{stdout: &out, stderr: &errOut}, append(slices.Clone(list), "--help")); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("inlet %s --help: %v", name, err)
		}
		if !regexp.MustCompile(`-limit int\n.*\(default 50\)`).MatchString(out.String()) {
			t.Errorf("inlet %s --help: want --limit to default to 50:\n%s", name, out.String())
		}
	}
}

// inlet help CMD prints CMD's help, as inlet CMD --help does (it printed the
// top-level help whatever CMD was).
func TestHelpCommandPrintsTheCommandsHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"help"}, "inlet receives provider webhooks"},
		{[]string{"help", "events"}, "Usage: inlet events <"},
		{[]string{"help", "events", "list"}, "Usage: inlet events list [flags]"},
		{[]string{"help", "retention"}, "Usage: inlet retention [flags]"},
		{[]string{"help", "send"}, "Usage: inlet send [flags] SOURCE"},
	} {
		var out, errOut bytes.Buffer
		env := &environment{stdout: &out, stderr: &errOut}
		err := run(context.Background(), env, tc.args)
		if code := exitCode(env, err); code != 0 || !strings.Contains(out.String(), tc.want) {
			t.Errorf("inlet %s: exit %d, stdout:\n%s\nwant %q", strings.Join(tc.args, " "), code, out.String(), tc.want)
		}
		if len(tc.args) > 1 && strings.Contains(out.String(), "inlet receives provider webhooks") {
			t.Errorf("inlet %s printed the top-level help", strings.Join(tc.args, " "))
		}
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), &environment{stdout: &out, stderr: &errOut}, []string{"help", "frobnicate"})
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "frobnicate") {
		t.Errorf("inlet help frobnicate: error %v; want a usage error naming it", err)
	}
}
