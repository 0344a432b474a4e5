package tests

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// insertStoredEvent stores one event as the owner, the way the other
// end-to-end tests do, and returns its id; verified is its
// signature_verified (false: backfilled or reconciled).
func insertStoredEvent(t *testing.T, conn *pgx.Conn, externalID string, body []byte, verified bool) int64 {
	t.Helper()
	var id int64
	if err := conn.QueryRow(context.Background(), `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', $1, 'invoice.paid', $2, $3) RETURNING id`, externalID, body, verified).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestEventsShowLoneCarriageReturnReachesTerminal (review helper-142, fixed;
// this describes the code before the fix): `inlet events show ID` printed a
// provider's body raw to the terminal when it was "printable text", and
// printableText (cmd/inlet/events.go) let a lone carriage return through
// ('\r' was allowed anywhere, not only before '\n'). A CR moves the cursor
// back to the start of the line, so a body controlled by whoever can reach
// the webhook endpoint (e.g. the unsigned part of a request a verifier
// accepts, or any body of a source with a leaked secret, or a backfilled
// one) overwrote what the operator sees: the stored bytes
// `{"amount":100000,...}\r{"amount":1}` were displayed as `{"amount":1}...`.
// printBody's own comment promises "nothing stored can drive the terminal".
//
// Now: a body with a CR that does not start a CRLF is shown as a hex dump,
// like any other control character.
func TestEventsShowLoneCarriageReturnReachesTerminal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	body := []byte(`{"id":"evt_cr","amount":100000000,"currency":"usd"}` + "\r" + `{"id":"evt_cr","amount":1,"currency":"usd"}        `)
	id := insertStoredEvent(t, conn, "evt_cr", body, true)

	out, errOut, code := runInlet(t, cleanEnv("DATABASE_URL="+url), "events", "show", strconv.FormatInt(id, 10))
	if code != 0 {
		t.Fatalf("events show: exit %d\n%s", code, errOut)
	}
	for i := 0; i < len(out); i++ {
		if out[i] == '\r' && (i+1 == len(out) || out[i+1] != '\n') {
			// What a terminal shows for the body line: the text after the
			// last CR overwrites the start of the line.
			line := out[strings.LastIndexByte(out[:i], '\n')+1:]
			line = line[:strings.IndexByte(line, '\n')]
			var screen []byte // what a terminal shows: a CR returns the cursor to column 0
			pos := 0
			for _, c := range []byte(line) {
				if c == '\r' {
					pos = 0
					continue
				}
				if pos < len(screen) {
					screen[pos] = c
				} else {
					screen = append(screen, c)
				}
				pos++
			}
			t.Fatalf("events show wrote a lone carriage return from the stored body to the terminal:\n"+
				"  stored body line: %q\n  a terminal shows: %s", line, screen)
		}
	}
	if want := "(not printable text; inlet events show " + strconv.FormatInt(id, 10) + " --raw"; !strings.Contains(out, want) ||
		!strings.Contains(out, " 7d 0d 7b ") {
		t.Fatalf("events show: want the body as a hex dump (%q, the CR between } and { as 0d), got:\n%s", want, out)
	}
}

// TestEventsVerifyUnsignedEventSaysNoSuchEvent (review helper-142, fixed;
// this describes the code before the fix): `inlet events verify ID` (and
// POST /api/events/verify {"id": ID}) answered "re-verify event ID: no such
// event" (exit 1, 404 in the API) for an event that exists but was stored
// without a signature (backfilled from a provider's API, reconcile):
// AdminEventsToVerify (schema/queries/admin.sql, "WHERE signature_verified")
// leaves such events out, and Reverify (admin/verify.go, `req.ID > 0 &&
// rep.Checked == 0`) then reported the id as unknown. The operator was told
// the event does not exist while `inlet events show ID` shows it: a
// misleading error (an auditor may conclude the event was deleted from the
// append-only log).
//
// Now: "re-verify event ID: stored without a signature (backfilled or
// reconciled): nothing to re-verify", exit 1 and 409 in the API; "no such
// event" (404) only for an id that is not stored.
func TestEventsVerifyUnsignedEventSaysNoSuchEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	unsigned := insertStoredEvent(t, conn, "evt_backfilled", []byte(`{"id":"evt_backfilled","type":"invoice.paid"}`), false)
	id := strconv.FormatInt(unsigned, 10)
	missing := strconv.FormatInt(unsigned+100, 10)
	env := cleanEnv("DATABASE_URL=" + url)

	out, errOut, code := runInlet(t, env, "events", "show", id)
	if code != 0 || !strings.Contains(out, "evt_backfilled") {
		t.Fatalf("events show %s: exit %d\n%s%s", id, code, out, errOut)
	}
	out, errOut, code = runInlet(t, env, "events", "verify", id)
	if strings.Contains(errOut, "no such event") {
		t.Fatalf("events verify %s of an event that exists (events show prints it) but was stored without a signature: exit %d, %q",
			id, code, strings.TrimSpace(errOut+out))
	}
	const unsignedMsg = "stored without a signature (backfilled or reconciled): nothing to re-verify"
	if want := "inlet: re-verify event " + id + ": " + unsignedMsg + "\n"; code != 1 || !strings.HasSuffix(errOut, want) || out != "" {
		t.Fatalf("events verify %s (unsigned): exit %d, stdout %q, stderr %q; want exit 1 and %q", id, code, out, errOut, want)
	}
	out, errOut, code = runInlet(t, env, "events", "verify", missing)
	if want := "inlet: re-verify event " + missing + ": no such event\n"; code != 1 || !strings.HasSuffix(errOut, want) {
		t.Fatalf("events verify %s (not stored): exit %d, stdout %q, stderr %q; want exit 1 and %q", missing, code, out, errOut, want)
	}

	// The admin API answers the same: 409 with the reason, 404 only for an
	// id that is not stored.
	adminAddr := freeAddr(t)
	const token = "e2e-verify-token-0123456789"
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", `
database_url: ${DATABASE_URL}
ingress:
  listen: "`+freeAddr(t)+`"
  metrics_listen: "127.0.0.1:0"
admin:
  listen: "`+adminAddr+`"
  token: "${ADMIN_TOKEN}"
sources:
  - {name: stripe, type: stripe, secrets: ["whsec_e2e_verify"]}
`)
	p := start(t, cleanEnv("DATABASE_URL="+url, "ADMIN_TOKEN="+token), "ingress", "--config", cfg)
	p.waitLog("admin API listening", 30*time.Second)
	for _, c := range []struct {
		id, want string
		code     int
	}{
		{id, `{"error":"re-verify event ` + id + `: ` + unsignedMsg + `"}`, http.StatusConflict},
		{missing, `{"error":"re-verify event ` + missing + `: no such event"}`, http.StatusNotFound},
	} {
		req, err := http.NewRequest("POST", "http://"+adminAddr+"/api/events/verify", strings.NewReader(`{"id":`+c.id+`}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != c.code || strings.TrimSpace(string(got)) != c.want {
			t.Errorf("POST /api/events/verify {\"id\":%s}: %d %s, want %d %s", c.id, resp.StatusCode, got, c.code, c.want)
		}
	}
}
