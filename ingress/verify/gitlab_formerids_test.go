package verify

import (
	"net/http"
	"slices"
	"testing"
)

// TestGitLabFormerEventIDs: the gitlab scheme's id rule before
// Idempotency-Key (X-Gitlab-Event-UUID as it is, else the synthetic body
// hash) is named to re-verification, so an event stored under it is not
// reported event_id_changed (review helper-271). A source that names its
// own id has no former ids: its rule never changed.
func TestGitLabFormerEventIDs(t *testing.T) {
	t.Parallel()
	cfg := Config{Type: "gitlab", Secrets: []string{gitlabToken}}
	v, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const uuid = "6b1d7a80-2f4e-4b8e-a1c3-5d7e9f0a1b2c"
	for _, tc := range []struct {
		name   string
		header http.Header
		former string // the id the rule before 507f59c gave
	}{
		{name: "17.4+ (Idempotency-Key and UUID)", header: func() http.Header {
			h := gitlabHeaders(gitlabToken, "0d5e1c52-8a3b-4c2e-9f7a-3e4d5c6b7a89", "Push Hook")
			h.Set("X-Gitlab-Event-UUID", uuid)
			return h
		}(), former: uuid},
		{name: "before 17.4 (UUID only)", header: func() http.Header {
			h := gitlabHeaders(gitlabToken, uuid, "Push Hook")
			h.Del("Idempotency-Key")
			return h
		}(), former: uuid},
		{name: "neither", header: gitlabHeaders(gitlabToken, "", "Push Hook"), former: syntheticID(gitlabBody)},
	} {
		res, err := v.Verify(&Request{Header: tc.header, Body: gitlabBody})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := FormerEventIDs(cfg, tc.header, gitlabBody)
		if !slices.Contains(got, tc.former) {
			t.Errorf("%s: FormerEventIDs = %q, want it to hold %q (the id stored before 507f59c; today's is %q)", tc.name, got, tc.former, res.EventID)
		}
		for _, own := range []Config{
			{Type: "gitlab", Secrets: cfg.Secrets, EventIDHeader: "X-Gitlab-Event-UUID"},
			{Type: "gitlab", Secrets: cfg.Secrets, EventIDJSON: "checkout_sha"},
		} {
			if got := FormerEventIDs(own, tc.header, gitlabBody); got != nil {
				t.Errorf("%s: a source naming its own id (event_id_header %q, event_id_json %q) has former ids %q, want none",
					tc.name, own.EventIDHeader, own.EventIDJSON, got)
			}
		}
	}
	// Schemes whose id rule never changed have none.
	for _, typ := range []string{"github", "stripe", "shopify", "hmac"} {
		if got := FormerEventIDs(Config{Type: typ}, gitlabHeaders(gitlabToken, uuid, "Push Hook"), gitlabBody); got != nil {
			t.Errorf("type %s: FormerEventIDs = %q, want none", typ, got)
		}
	}
}
