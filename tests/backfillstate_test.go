package tests

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// Found by review helper-72: inlet backfill with an unreadable (corrupt)
// state file gives contradictory advice. backfill.loadState says
// "(remove it, or run with --restart)", and runBackfill then appends
// "; run the same command again to resume from the cursor in <file>"
// because the file exists and the error is not ErrStateMismatch
// (cmd/inlet/backfill.go, the os.Stat(*statePath) branch after Run fails).
// Running the same command again fails the same way, forever: there is no
// cursor to resume from. (The same text follows any final 4xx, e.g. a
// resumed Stripe cursor whose event has aged out of the 30 days: "run the
// same command again" can never help there either.)
//
// Expected: the one-line reason tells the operator what works (remove the
// file or pass --restart) and does not promise a resume.
func TestBackfillCorruptStateFileAdviceIsNotResume(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	env := cleanEnv("DATABASE_URL=" + url)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"object":"list","data":[],"has_more":false,"url":"/v1/events"}`))
	}))
	defer api.Close()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".inlet"), 0o700); err != nil {
		t.Fatal(err)
	}
	// Half a file, as a full disk or a copy gone wrong leaves it.
	if err := os.WriteFile(filepath.Join(dir, ".inlet", "backfill-stripe.json"), []byte(`{"source": "stripe", "key": "stri`), 0o600); err != nil {
		t.Fatal(err)
	}
	for run := 1; run <= 2; run++ {
		_, errOut, code := runInletIn(t, dir, env, "backfill", "stripe", "--api-key", "sk_test_review", "--base-url", api.URL)
		if code == 0 {
			t.Fatalf("run %d: a corrupt state file was accepted:\n%s", run, errOut)
		}
		if strings.Contains(errOut, "run the same command again to resume") {
			t.Fatalf("run %d: the error promises a resume from a file that cannot be read (running again fails the same way):\n%s", run, errOut)
		}
	}
}
