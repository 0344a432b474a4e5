package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeGitHubHook is a real HTTP server standing in for GitHub's hook
// deliveries API: one push and one issues delivery, both made an hour ago.
func fakeGitHubHook(t *testing.T) string {
	t.Helper()
	at := time.Now().Add(-time.Hour).UTC()
	deliveries := []map[string]any{
		{"id": 101, "guid": "guid-push-323", "event": "push", "delivered_at": at},
		{"id": 102, "guid": "guid-issues-323", "event": "issues", "delivered_at": at.Add(-time.Minute)},
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/repos/acme/app/hooks/7/deliveries":
			_ = json.NewEncoder(w).Encode(deliveries)
		case "/repos/acme/app/hooks/7/deliveries/101", "/repos/acme/app/hooks/7/deliveries/102":
			d := deliveries[0]
			if strings.HasSuffix(r.URL.Path, "102") {
				d = deliveries[1]
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"request": map[string]any{
				"headers": map[string]string{"X-GitHub-Event": d["event"].(string), "X-GitHub-Delivery": d["guid"].(string)},
				"payload": map[string]any{"action": "opened", "zen": "review 323"},
			}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(api.Close)
	return api.URL
}

// TestProviderFlagsOfTheOtherAPIAreRefused (review helper-323, fixed).
// Defect: inlet backfill github --types push and inlet reconcile github
// --types push accept --types and ignore it: every delivery type the hook
// has is stored (and fanned out to every subscribed handler), and a
// reconcile "of push" compares and stores all types. --help says "stripe:
// only these event types", and the sibling Stripe-only flag --since is
// already refused for github as a usage error (TestBackfillGitHubRefusesSince:
// "it was accepted and ignored"). An operator narrowing a backfill to the
// types a handler is ready for gets the others handled too. Root cause:
// cmd/inlet/providerapi.go listerSince (the github case never looks at
// p.types) and cmd/inlet/backfill.go runBackfill / reconcile.go
// runReconcile (no check of Stripe-only flags given with github).
// Setup: a real GitHub-like deliveries API (httptest) with a push and an
// issues delivery; a fresh migrated database; the embedded dev sources.
// Expected: --types with github is a usage error (exit 2) naming --types,
// and nothing is stored (or, if supported, only push is stored).
// Observed: both commands exit 0; backfill stores 2 events (push and
// issues); the reconcile run stores both as well.
// Fixed: providerAPI.otherProvidersFlags refuses, as a usage error, the
// flags of the other provider's API (--api-key, --types with github;
// --token, --repo, --org, --hook-id with stripe) for both commands.
func TestProviderFlagsOfTheOtherAPIAreRefused(t *testing.T) {
	for _, cmd := range []string{"backfill", "reconcile"} {
		t.Run(cmd, func(t *testing.T) {
			db := operatorDatabase(t)
			api := fakeGitHubHook(t)
			args := []string{cmd, "github", "--base-url", api, "--token", "ghp_review323", "--repo", "acme/app", "--hook-id", "7", "--types", "push"}
			if cmd == "backfill" {
				args = append(args, "--state", filepath.Join(t.TempDir(), "state.json"))
			} else {
				args = append(args, "--since", "3h")
			}
			out, err := runInlet(t, args...)
			var types []string
			rows, qerr := db.Query(context.Background(), `SELECT event_type FROM webhook_ingress.events ORDER BY event_type`)
			if qerr != nil {
				t.Fatal(qerr)
			}
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				types = append(types, s)
			}
			rows.Close()
			stored := strings.Join(types, ",")
			if err == nil && stored != "push" {
				t.Fatalf("inlet %s: exit 0 with --types push, stored event types [%s]; want a usage error naming --types, or only push stored\n%s",
					strings.Join(args, " "), stored, out)
			}
			if err != nil && (!strings.Contains(err.Error(), "types") || stored != "") {
				t.Fatalf("inlet %s: %v, stored [%s]; want a usage error naming --types and nothing stored", strings.Join(args, " "), err, stored)
			}
		})
	}
}

// The other direction: GitHub's flags with stripe are refused before any
// request (the listing would be Stripe's, whatever --repo or --hook-id say).
func TestStripeRefusesGitHubFlags(t *testing.T) {
	operatorDatabase(t)
	for _, cmd := range []string{"backfill", "reconcile"} {
		for _, flag := range [][]string{{"--repo", "acme/app"}, {"--org", "acme"}, {"--hook-id", "7"}, {"--token", "ghp_x"}} {
			args := append([]string{cmd, "stripe", "--api-key", "sk_test_flags", "--base-url", "http://127.0.0.1:1"}, flag...)
			if cmd == "backfill" {
				args = append(args, "--state", filepath.Join(t.TempDir(), "state.json"))
			} else {
				args = append(args, "--since", "3h")
			}
			out, err := runInlet(t, args...)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), flag[0]) {
				t.Errorf("inlet %s: %v; want a usage error naming %s (printed:\n%s)", strings.Join(args, " "), err, flag[0], out)
			}
		}
	}
}
