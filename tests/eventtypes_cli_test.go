package tests

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// inlet events types prints event types as stored. A type is the provider's
// text: GitHub's X-GitHub-Event and Shopify's X-Shopify-Topic are unsigned
// headers (Go's server lets a TAB through in a header value), and a type
// read from a JSON body (event_type_json, Stripe's "type") may hold any
// character but NUL. The other listings pass such text through safe(); this
// one wrote it raw into its tabwriter (a review proved it): a TAB shifted the
// columns (an unrouted type read as routed "yes"), a newline split a row,
// and an escape sequence reached the operator's terminal. It quotes them now.
func TestEventsTypesQuotesControlCharacters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for i, typ := range []string{"push\tyes", "order.paid\nstripe\tcharge.ok", "invoice\x1b[2J\x1b[31m.paid"} {
		if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, headers, request_uri, raw_body, signature_verified)
			VALUES ('github', 'github', $1, $2, '{}', '/webhooks/github', '{}', true)`, "d"+string(rune('a'+i)), typ); err != nil {
			t.Fatal(err)
		}
	}
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", `
database_url: ${DATABASE_URL}
sources:
  - {name: github, type: github, secrets: ["types-review-github"]}
`)
	out, errOut, code := runInlet(t, cleanEnv("DATABASE_URL="+url), "events", "types", "--config", cfg)
	if code != 0 {
		t.Fatalf("inlet events types: exit %d\n%s", code, errOut)
	}
	if strings.ContainsRune(out, '\x1b') {
		t.Errorf("inlet events types wrote a raw escape sequence to the terminal")
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 {
		t.Errorf("inlet events types printed %d lines for 3 types, want 4 (header + one per type)", len(lines))
	}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "github" && f[2] != "no" {
			t.Errorf("row %q shows ROUTED %q; every one of these types is unrouted", l, f[2])
		}
	}
}
