package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
)

// Usage errors are found before any database is needed: these run with none.
func TestRolesUsageErrors(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Chdir(t.TempDir())
	for _, args := range [][]string{
		{"roles"},
		{"roles", "frobnicate"},
		{"roles", "create-consumer"},
		{"roles", "create-consumer", "payments"},
		{"roles", "create-consumer", "payments", "--handlers", ","},
		{"roles", "create-consumer", "payments", "extra", "--handlers", "billing"},
		{"roles", "create-consumer", "Payments", "--handlers", "billing"},
		{"roles", "create-consumer", "pay-ments", "--handlers", "billing"},
		{"roles", "create-consumer", "payments", "--handlers", "bill ing"},
		{"roles", "create-consumer", strings.Repeat("p", 50), "--handlers", "billing"},
		{"roles", "create-consumer", "payments", "--handlers", "billing", "--member", ""},
		{"roles", "create-consumer", "payments", "--handlers", "billing"}, // no database
		{"roles", "list", "a", "b"},
		{"roles", "drop-consumer"},
		{"roles", "drop-consumer", "webhook_consumer_"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), &environment{stdout: &out, stderr: &errOut}, args)
		if !errors.Is(err, errUsage) {
			t.Errorf("inlet %s: error %v, want a usage error", strings.Join(args, " "), err)
		}
	}
}

// A bad --scope is named before the database is needed.
func TestRolesBadScope(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Chdir(t.TempDir())
	for scope, want := range map[string]string{
		"":                       "has no source",
		":invoice.*":             "has no source",
		"stripe:a\x01":           "control character",
		strings.Repeat("s", 201): "longer than 200",
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), &environment{stdout: &out, stderr: &errOut},
			[]string{"roles", "create-consumer", "payments", "--handlers", "billing", "--scope", scope})
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "-scope") || !strings.Contains(err.Error(), want) {
			t.Errorf("--scope %q: error %v, want a usage error naming -scope and saying %q", scope, err, want)
		}
	}
}

func TestRolesHelp(t *testing.T) {
	for _, args := range [][]string{
		{"roles", "--help"}, {"roles", "create-consumer", "--help"}, {"roles", "list", "--help"}, {"roles", "drop-consumer", "--help"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), &environment{stdout: &out, stderr: &errOut}, args)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("inlet %s: %v, want help", strings.Join(args, " "), err)
		}
		name := strings.Join(args[:len(args)-1], " ")
		if s := out.String(); !strings.Contains(s, "Usage: inlet "+name) || !strings.Contains(s, "-config") ||
			!strings.Contains(s, "owner of webhook_ingress") {
			t.Errorf("inlet %s --help:\n%s", name, s)
		}
	}
}

func TestConsumerRoleName(t *testing.T) {
	for name, want := range map[string]string{
		"payments":                   "webhook_consumer_payments",
		"team_2":                     "webhook_consumer_team_2",
		"webhook_consumer_payments":  "webhook_consumer_payments",
		"webhook_consumer_webhook_x": "webhook_consumer_webhook_x",
	} {
		if got, err := consumerRole(name); err != nil || got != want {
			t.Errorf("consumerRole(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
}
