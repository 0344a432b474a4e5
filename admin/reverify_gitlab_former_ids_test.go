package admin_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/ingress/verify"
)

// TestGitLabEventsStoredUnderTheFormerIDRuleStillVerify (review helper-271, fixed).
//
// Defect: 507f59c changed the GitLab scheme's event id from the
// X-Gitlab-Event-UUID header alone (else the body's hash) to Idempotency-Key
// (GitLab 17.4 on), else X-Gitlab-Event-UUID + "/" + 16 hex digits of the
// body's SHA-256. Seven hours later 542624c taught re-verification the
// former id rules of the presets whose rule had changed (woocommerce,
// sentry, hubspot: preset.formerIDs, verify.FormerEventIDs), so that
// "inlet events verify accepts the ids the former rules gave (those events
// are not reported event_id_changed)" (CHANGELOG). GitLab was left out:
// it is a scheme (ingress/verify/gitlab.go), not a preset, and
// verify.FormerEventIDs (ingress/verify/presets.go) returns nil for every
// type that is not a preset. So every genuine GitLab event stored before
// the upgrade, unaltered (body, headers and token digest intact, the
// stored id exactly what ingress assigned then), is reported by
// admin.Reverify (admin/verify.go reverifier.check, behind `inlet events
// verify` and the admin API) as "event_id_changed", and `inlet events
// verify --since …` exits 1: an auditor is told the append-only log was
// tampered with.
//
// Setup: real PostgreSQL (pgtest). Two GitLab deliveries stored as the
// previous rule stored them, their token redacted as ingress redacts it:
// a GitLab 17.4+ delivery (Idempotency-Key and X-Gitlab-Event-UUID, stored
// under the UUID), and an older GitLab delivery (X-Gitlab-Event-UUID only,
// stored under the UUID). admin.Reverify on each.
//
// Expected: both verify (Failed == 0), as the pre-upgrade Sentry, HubSpot
// and WooCommerce events do (TestReverifyPreUpgradeSentryHubSpotEvents).
//
// Observed: Checked 1, Failed 1 for each, reason "event_id_changed":
// "verifies, but with event id \"0d5e1c52-…-review271-key\", not the stored
// one" (the Idempotency-Key) for the first, and
// "\"9c4f2e11-…-review271-uuid/6cb61fd5410c0f94\"" for the second.
//
// Fixed: verify.FormerEventIDs gives the gitlab scheme its former ids
// (gitlabFormerIDs, ingress/verify/gitlab.go): for a source with no
// event_id_* of its own, the X-Gitlab-Event-Uuid value when present, else
// syntheticID(body), the rule before 507f59c.
func TestGitLabEventsStoredUnderTheFormerIDRuleStillVerify(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cfg := b.sources["gitlab"]
	v, err := verify.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	redact := func(h http.Header) http.Header {
		if r, ok := v.(verify.StorageRedactor); ok {
			return r.RedactForStorage(h)
		}
		return h
	}
	token := cfg.Secrets[0]
	body := []byte(`{"object_kind":"push","event_name":"push","ref":"refs/heads/main","checkout_sha":"da1560886d4f094c3e6c9ef40349f7d38b5d27d7","project_id":15,"commits":[],"total_commits_count":0}`)

	cases := []struct {
		name    string
		headers http.Header
		oldID   string // the id the rule before 507f59c gave
	}{
		{
			name: "gitlab 17.4+ (Idempotency-Key and X-Gitlab-Event-UUID)",
			headers: http.Header{
				"X-Gitlab-Token":      {token},
				"Idempotency-Key":     {"0d5e1c52-8a3b-4c2e-9f7a-review271-key"},
				"X-Gitlab-Event-Uuid": {"6b1d7a80-2f4e-4b8e-a1c3-review271-uuid"},
				"X-Gitlab-Event":      {"Push Hook"},
				"Content-Type":        {"application/json"},
			},
			oldID: "6b1d7a80-2f4e-4b8e-a1c3-review271-uuid",
		},
		{
			name: "older gitlab (X-Gitlab-Event-UUID only)",
			headers: http.Header{
				"X-Gitlab-Token":      {token},
				"X-Gitlab-Event-Uuid": {"9c4f2e11-7b6a-4d3c-8e2f-review271-uuid"},
				"X-Gitlab-Event":      {"Push Hook"},
				"Content-Type":        {"application/json"},
			},
			oldID: "9c4f2e11-7b6a-4d3c-8e2f-review271-uuid",
		},
	}
	for _, c := range cases {
		// The delivery is genuine: it verifies as received today.
		if _, err := v.Verify(&verify.Request{Header: c.headers, Body: body}); err != nil {
			t.Fatalf("%s: the delivery does not verify as received: %v", c.name, err)
		}
		id := b.insert(t, event{source: "gitlab", id: c.oldID, eventType: "Push Hook", body: body, headers: redact(c.headers)})
		rep, err := admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{ID: id})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if rep.Checked != 1 {
			t.Fatalf("%s: checked %d events, want 1", c.name, rep.Checked)
		}
		if rep.Failed != 0 {
			t.Errorf("%s: a genuine GitLab event stored before the id rule changed (stored id %q, nothing altered) "+
				"is reported as failing re-verification: %+v; want verified, as pre-upgrade Sentry, HubSpot and "+
				"WooCommerce events are (verify.FormerEventIDs knows no former GitLab rule)", c.name, c.oldID, rep.Failures)
		}
	}
}
