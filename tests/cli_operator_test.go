package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// inlet backfill --help and docs/operations.md: "Resumable: after every page
// the cursor is written to --state ... An interrupted run (Ctrl-C, an error)
// is continued by running the same command again", and the documented form
// is `inlet backfill stripe [--since 7d]`: with a relative --since too, and
// the resumed run asks for the window the first one resolved. (Found by a
// review: the cursor was keyed by --since resolved against the clock at
// each run, so the same command a second later was refused with
// ErrStateMismatch.)
func TestBackfillWithRelativeSinceResumes(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	env := cleanEnv("DATABASE_URL=" + url)
	created := time.Now().Add(-time.Hour).Unix()
	ev := func(id string) string {
		return fmt.Sprintf(`{"id":%q,"object":"event","type":"invoice.paid","created":%d,"data":{"object":{}}}`, id, created)
	}
	var secondPageCalls atomic.Int32
	var gteMu sync.Mutex
	var gte []string // created[gte] of each request
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gteMu.Lock()
		gte = append(gte, r.URL.Query().Get("created[gte]"))
		gteMu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Query().Get("starting_after") {
		case "":
			fmt.Fprintf(w, `{"object":"list","data":[%s,%s],"has_more":true}`, ev("evt_rv_1"), ev("evt_rv_2"))
		case "evt_rv_2":
			if secondPageCalls.Add(1) == 1 { // the first run stops here
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprint(w, `{"error":{"message":"try again"}}`)
				return
			}
			fmt.Fprintf(w, `{"object":"list","data":[%s],"has_more":false}`, ev("evt_rv_3"))
		default:
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	defer api.Close()

	dir := t.TempDir()
	args := []string{"backfill", "stripe", "--api-key", "sk_test_resume", "--base-url", api.URL, "--since", "7d"}
	_, errOut, code := runInletIn(t, dir, env, args...)
	if code == 0 {
		t.Fatalf("first run: exit 0, want it stopped by the 400\n%s", errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, ".inlet", "backfill-stripe.json")); err != nil {
		t.Fatalf("no cursor saved after the first page: %v\n%s", err, errOut)
	}
	time.Sleep(1100 * time.Millisecond) // an operator reruns it later, never within the same second
	out, errOut2, code := runInletIn(t, dir, env, args...)
	if code != 0 || !strings.Contains(out, "done") {
		t.Fatalf("the same command run again does not resume: exit %d\nstdout: %s\nstderr: %s", code, out, errOut2)
	}
	// The resumed run asks for the window the first one resolved, not 7d
	// back from its own start.
	gteMu.Lock()
	defer gteMu.Unlock()
	if len(gte) < 3 || gte[0] == "" || gte[len(gte)-1] != gte[0] {
		t.Errorf("created[gte] of each request %v: the resumed run must ask for the first run's", gte)
	}
}

// docs/operations.md: every --json list is {"items": [...], "next": "<id>"},
// "next, present only when more match, is the --before of the next page";
// the table form prints "more events match: add --before N" on stderr. With
// exactly --limit events matching, neither says more match. (Found by a
// review: admin.ListEvents set NextBefore whenever the page was full, and
// the --before it pointed to listed nothing. Same in dlq list.)
func TestEventsListNextOnlyWhenMoreMatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, id := range []string{"evt_page_1", "evt_page_2"} {
		if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ('stripe', 'stripe', $1, 'invoice.paid', convert_to('{}', 'UTF8'), true)`, id); err != nil {
			t.Fatal(err)
		}
	}
	env := cleanEnv("DATABASE_URL=" + url)
	out, errOut, code := runInlet(t, env, "events", "list", "--limit", "2", "--json")
	if code != 0 {
		t.Fatalf("events list: exit %d\n%s", code, errOut)
	}
	var page struct {
		Items []json.RawMessage `json:"items"`
		Next  *string           `json:"next"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Items) != 2 {
		t.Fatalf("events list --json: %v\n%s", err, out)
	}
	if page.Next != nil {
		next, _, _ := runInlet(t, env, "events", "list", "--json", "--before", *page.Next)
		t.Errorf("2 events match, --limit 2 printed both, and still \"next\": %q (the page it names: %s)", *page.Next, strings.TrimSpace(next))
	}
	_, errOut, _ = runInlet(t, env, "events", "list", "--limit", "2")
	if strings.Contains(errOut, "more events match") {
		t.Errorf("table form with every match printed says on stderr: %s", strings.TrimSpace(errOut))
	}
}

// audit.grace ("seal only events older than this") and audit.db_role ("role
// of the sealer") are documented in inlet.example.yaml beside seal_every
// ("0: a separate inlet audit seal"): inlet audit seal reads them when its
// flags are not given. An event 6 s old is not sealed when the file asks for
// a 1 h grace. (Found by a review: the flags defaulted to the constants 5s
// and webhook_sealer whatever the file said.)
func TestAuditSealHonoursConfiguredGrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_grace', 'invoice.paid', convert_to('{}', 'UTF8'), true)`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeFile(t, dir, "inlet.yaml", "database_url: ${DATABASE_URL}\naudit:\n  grace: 1h\n")
	time.Sleep(6 * time.Second) // older than the built-in 5 s, far younger than the configured 1 h
	env := cleanEnv("DATABASE_URL=" + url)
	out, errOut, code := runInletIn(t, dir, env, "audit", "seal", "--config", cfg)
	if code != 0 {
		t.Fatalf("audit seal: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "nothing to seal") {
		t.Fatalf("with audit.grace: 1h, inlet audit seal sealed an event received 6s ago: %s", strings.TrimSpace(out))
	}
}
