package ingress_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestSlackSSLCheckIsAnsweredNotStored (review helper-330, fixed).
// Defect: Slack checks a slash command's Request URL with a POST of the form
// body "ssl_check=1&token=…" (api.slack.com/interactivity/slash-commands;
// Slack's own Bolt answers it 200 before any listener, bolt-python even
// before signature verification). It is an endpoint check, not an event,
// and the contract says provider handshakes are answered before anything is
// stored (README/DESIGN "External contract": "Provider handshakes (Slack
// challenge, …) are answered before anything is stored"). Inlet's slack
// scheme knows only url_verification (ingress/verify/slack.go:
// slackVerifier.Verify, slackHandshake; slackEvent types a form body by its
// `command`, which an ssl_check lacks): a signed ssl_check is verified,
// stored in webhook_ingress.events with event_type ” and a synthetic id,
// and handed to every handler subscribed to the source's events (a
// slash-command handler gets a "command" without command, text or
// response_url). It also carries Slack's legacy verification token into
// raw_body and to those handlers.
// Setup: a slack source on a real ingress and a throwaway PostgreSQL; a
// Slack-signed (v0, current timestamp) POST of "ssl_check=1&token=…" to
// /webhooks/slack.
// Expected: 200, and no events row (answered as a handshake, like
// url_verification).
// Observed: 200 {"status":"stored"} and 1 events row, event_type ”,
// external_event_id sha256:<body hash>.
// Fixed: slackVerifier.Verify answers a verified form body whose ssl_check
// is "1" as the handshake kind ssl_check (200, empty body), before its
// identity is read; the README and docs/providers.md name it.
func TestSlackSSLCheckIsAnsweredNotStored(t *testing.T) {
	t.Parallel()
	b := setupWith(t, pgtest.NewDatabase(t), func(*ingress.Config) {})

	body := []byte("ssl_check=1&token=gIkuvaNzQIHg97ATvDxqgjtO")
	h := verify.SignSlack(slackSecret, time.Now(), body)
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	code, answer := rawPost(t, b.url, "/webhooks/slack", h, body)
	if code != http.StatusOK {
		t.Fatalf("signed Slack ssl_check: %d %s, want 200 (Slack expects 200 OK)", code, answer)
	}

	var n int
	var types []string
	rows, err := b.admin.Query(context.Background(),
		`SELECT event_type FROM webhook_ingress.events WHERE provider = 'slack'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var typ string
		if err := rows.Scan(&typ); err != nil {
			t.Fatal(err)
		}
		n++
		types = append(types, "'"+typ+"'")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("Slack's ssl_check endpoint check was stored as %d event(s) (event_type %s; answer %s), want it answered as a handshake and nothing stored",
			n, strings.Join(types, ", "), strings.TrimSpace(answer))
	}
}
