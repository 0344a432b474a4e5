package main

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// devTree is a directory where inlet dev ran, its .inlet/database_url
// naming a real database, and a subdirectory a/b of it as the working
// directory, no DATABASE_URL and no inlet.yaml anywhere. It returns the
// top directory and a superuser pool on the database.
func devTree(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	clearDevEnv(t)
	url := pgtest.NewDatabase(t)
	top := t.TempDir()
	if err := os.MkdirAll(filepath.Join(top, devDataDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(top, devDataDir, "database_url"), []byte(url+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(top, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return top, pool
}

// A command run two directories below the one where inlet dev wrote
// .inlet/database_url finds it, as git finds .git. Before the fix only the
// working directory was looked at: "no database: ... start inlet dev in
// this directory".
func TestCommandsFindInletDevFromASubdirectory(t *testing.T) {
	_, db := devTree(t)
	storeEvent(t, db, "stripe", "evt_found_from_below")
	out, err := runInlet(t, "events", "list")
	if err != nil || !strings.Contains(out, "evt_found_from_below") {
		t.Fatalf("inlet events list from a subdirectory: %v\n%s", err, out)
	}
	// The nearest .inlet wins: one in between, without a database_url,
	// is passed over; one with a database_url is taken.
	if err := os.MkdirAll(filepath.Join("..", devDataDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err = runInlet(t, "events", "list"); err != nil || !strings.Contains(out, "evt_found_from_below") {
		t.Fatalf("inlet events list with an .inlet without database_url in between: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join("..", devDataDir, "database_url"), []byte("postgres://nobody@127.0.0.1:1/none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err = runInlet(t, "events", "list"); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("inlet events list with a nearer .inlet/database_url: %v; want it to connect there (and fail)", err)
	}
}

// inlet backfill's cursor file goes to the .inlet directory found above,
// beside the database_url, not to a new .inlet in the subdirectory. A
// Stripe events API (a real HTTP server) gives one page and then refuses
// the next, so the run stops with its cursor saved. Before the fix the
// run could not start from below at all ("no database").
func TestBackfillStateGoesToTheInletDirectoryFound(t *testing.T) {
	top, db := devTree(t)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("starting_after") != "" {
			http.Error(w, `{"error":{"message":"no"}}`, http.StatusBadRequest) // a permanent failure: the run stops
			return
		}
		ev := map[string]any{"id": "evt_backfilled_1", "object": "event", "type": "invoice.paid", "created": 1767225600}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{ev}, "has_more": true})
	}))
	t.Cleanup(api.Close)
	_, err := runInlet(t, "backfill", "stripe", "--base-url", api.URL, "--api-key", "sk_test_backfill_state")
	if err == nil || strings.Contains(err.Error(), "no database") {
		t.Fatalf("inlet backfill stripe from a subdirectory: %v; want it to stop at the refused second page", err)
	}
	want := filepath.Join(top, devDataDir, "backfill-stripe.json")
	if _, serr := os.Stat(want); serr != nil {
		t.Errorf("cursor file %s: %v (the run ended: %v)", want, serr, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("the error %q does not name the cursor file %s", err, want)
	}
	if _, serr := os.Stat(devDataDir); !errors.Is(serr, fs.ErrNotExist) {
		t.Errorf("backfill made %s in the subdirectory: %v", devDataDir, serr)
	}
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = 'evt_backfilled_1'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("backfilled events stored: %d, %v; want 1", n, err)
	}
}
