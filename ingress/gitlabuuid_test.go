package ingress_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/inlet-dev/inlet/ingress/verify"
)

// TestGitLabRecursiveEventUUIDIsNotADuplicate (review helper-77).
//
// Defect: the gitlab scheme takes X-Gitlab-Event-UUID as the event id, the
// dedupe key (ingress/verify/gitlab.go, Verify's schemeEvent: id :=
// req.Header.Get(gitlabUUIDHeader)). GitLab documents that header as "Unique
// ID per webhook that is not recursive. A hook is recursive if triggered by
// an earlier webhook that hit the GitLab instance. Recursive webhooks have
// the same value for this header" (docs.gitlab.com, webhooks, delivery
// headers; lib/gitlab/web_hooks/recursion_detection/uuid.rb returns the
// incoming request's UUID for every hook it fires). So a webhook that hits
// GitLab (the documented "trigger a pipeline with a webhook" URL, or a bot
// answering a push by calling the API with the header) makes GitLab send
// further, different events with the SAME X-Gitlab-Event-UUID. Ingress
// answers the second one 200 "duplicate" and stores nothing: an
// acknowledged event is lost, and GitLab never sends it again.
//
// Expected: two different GitLab events (different bodies, different
// X-Gitlab-Event, different Idempotency-Key) are two rows; a true retry (the
// same Idempotency-Key, which GitLab documents as "Unique ID that remains
// consistent across webhook retries") is still a duplicate.
func TestGitLabRecursiveEventUUIDIsNotADuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const sharedUUID = "13792a34-cac6-4fda-95a8-c58e00a3954e" // the recursion's UUID, on both
	send := func(event, idem string, body []byte) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, b.url+"/webhooks/gitlab", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range verify.SignGitLab(gitlabToken, sharedUUID, event) {
			req.Header[k] = v
		}
		req.Header.Set("Idempotency-Key", idem)
		req.Header.Set("Content-Type", "application/json")
		code, answer, _ := do(t, req)
		return code, answer
	}
	// A push whose webhook hit GitLab's pipeline trigger API...
	push := []byte(`{"object_kind":"push","ref":"refs/heads/main","checkout_sha":"da1560886d4f094c3e6c9ef40349f7d38b5d27d7"}`)
	if code, answer := send("Push Hook", "f5e5f430-f57b-4e6e-9fac-d9128cd7232f", push); code != 200 {
		t.Fatalf("push: %d %s", code, answer)
	}
	// ...and the pipeline that request created: another event, same UUID.
	pipeline := []byte(`{"object_kind":"pipeline","object_attributes":{"id":31,"status":"pending","updated_at":"2026-11-03 20:26:10 UTC"}}`)
	code, answer := send("Pipeline Hook", "0b9f3c5e-8a51-4f0e-9a57-2d7b1f7e6c11", pipeline)
	if code != 200 {
		t.Fatalf("pipeline: %d %s", code, answer)
	}
	n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'gitlab'`)
	if n != 2 {
		t.Fatalf("two different GitLab events sharing X-Gitlab-Event-UUID (a recursive webhook): %d row(s) stored, want 2; "+
			"the pipeline event was answered %d %s and is lost", n, code, answer)
	}
	// A retry of the pipeline event (same Idempotency-Key and bytes) stays a duplicate.
	if code, answer := send("Pipeline Hook", "0b9f3c5e-8a51-4f0e-9a57-2d7b1f7e6c11", pipeline); code != 200 {
		t.Fatalf("retry: %d %s", code, answer)
	}
	if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'gitlab'`); n != 2 {
		t.Fatalf("after a retry of the pipeline event: %d rows, want 2", n)
	}
}
