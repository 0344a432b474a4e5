package ingress_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress/verify"
)

// Sentry's retry of a webhook (a new Request-ID) is answered duplicate.
//
// Regression test (review helper-124; fixed: the text describes the
// behaviour before the fix). The sentry preset (ingress/verify/providers_hmac.go, the "sentry"
// entry: idHeader "Request-ID") uses Sentry's Request-ID header as the event
// id, the key ingress deduplicates on. Sentry does not keep that header across
// its retries of one webhook: Sentry's source builds the headers of every send
// afresh, in AppPlatformEvent (src/sentry/sentry_apps/api/serializers/
// app_platform_event.py):
//
//	request_uuid = uuid4().hex
//	return {"Content-Type": "application/json", "Request-ID": request_uuid,
//	        "Sentry-Hook-Resource": self.resource,
//	        "Sentry-Hook-Timestamp": str(int(time())),
//	        "Sentry-Hook-Signature": self.install.sentry_app.build_signature(self.body)}
//
// and the webhook task (send_resource_change_webhook, src/sentry/sentry_apps/
// tasks/sentry_apps.py: retry=Retry(times=3, delay=60*5), @retry_decorator)
// re-runs send_webhooks -> a new AppPlatformEvent -> a new uuid4 whenever
// send_and_save_webhook_request raises: on a Timeout / ConnectionError (Sentry
// waits ~1 s) and on a 503/504 answer. The body is json.dumps of the same
// data, so it is byte for byte the same; only Request-ID (and the unsigned
// Sentry-Hook-Timestamp) differ. Sentry's docs call Request-ID "a unique
// identifier for tracking and debugging", not an event id.
//
// Inlet's own contract (DESIGN.md, ingress/doc.go) is that when the outcome of
// a write is unknown it answers 503 "and the provider's retry is then answered
// duplicate"; "A duplicate delivery -> 2xx and no new rows." For Sentry the
// retry carries a fresh Request-ID and is stored as a second event, so every
// Sentry retry after a slow or unknown-outcome commit (exactly the case the
// design relies on dedupe for) runs every subscribed handler twice.
//
// Expected: the same Sentry webhook body, re-sent by Sentry's retry with a new
// Request-ID and Sentry-Hook-Timestamp, is answered as a duplicate and leaves
// one event row.
func TestSentryRetryIsNotADuplicate(t *testing.T) {
	t.Parallel()
	const secret = "sentry-client-secret-review"
	b := setupSource(t, "sentry", verify.Config{Type: "sentry", Secrets: []string{secret}})

	// One issue.created webhook, as Sentry serializes it (json.dumps: ", "
	// and ": " separators), signed as SentryApp.build_signature does: hex
	// HMAC-SHA256(client secret, body).
	body := []byte(`{"action": "created", "installation": {"uuid": "7a485448-a9e2-4c85-8a3c-4f44175783c9"}, "data": {"issue": {"id": "1170820242", "shortId": "BACKEND-9", "title": "ZeroDivisionError: division by zero", "status": "unresolved", "project": {"id": "1", "slug": "backend"}}}, "actor": {"type": "application", "id": "sentry", "name": "Sentry"}}`)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	sig := hex.EncodeToString(m.Sum(nil))

	send := func(attempt int, sent time.Time) (int, string) {
		// uuid4().hex: a fresh one for every send, as Sentry makes it.
		var u [16]byte
		if _, err := rand.Read(u[:]); err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodPost, b.url+"/webhooks/sentry", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = http.Header{
			"Content-Type":          {"application/json"},
			"Request-Id":            {hex.EncodeToString(u[:])},
			"Sentry-Hook-Resource":  {"issue"},
			"Sentry-Hook-Timestamp": {fmt.Sprint(sent.Unix())},
			"Sentry-Hook-Signature": {sig},
		}
		code, answer, _ := do(t, req)
		t.Logf("attempt %d (Request-ID %s): %d %s", attempt, req.Header.Get("Request-Id"), code, strings.TrimSpace(answer))
		return code, answer
	}

	// Attempt 1 is stored; Sentry never saw the answer (its ~1 s timeout
	// fired, or ingress answered 503 "outcome unknown" and the commit then
	// landed), so its task retries 5 minutes later with the same body.
	now := time.Now()
	if code, answer := send(1, now); code != http.StatusOK {
		t.Fatalf("genuine Sentry delivery answered %d %s", code, answer)
	}
	code, answer := send(2, now.Add(5*time.Minute))
	if code != http.StatusOK {
		t.Fatalf("Sentry's retry answered %d %s", code, answer)
	}

	n := storedOf(t, b, "sentry")
	if n != 1 {
		t.Errorf("one Sentry webhook and Sentry's retry of it (same signed body, new Request-ID): %d events stored, want 1 "+
			"(the preset's id is Request-ID, which Sentry mints with uuid4() on every send, so its retry is never a duplicate)", n)
	}
}
