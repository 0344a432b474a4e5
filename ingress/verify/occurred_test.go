//go:build !fuzzonly

package verify

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	paddle "github.com/PaddleHQ/paddle-go-sdk/v4"
	"github.com/google/go-github/v75/github"
	"github.com/slack-go/slack/slackevents"
	"github.com/stripe/stripe-go/v82"
)

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Each provider's event time, read from a payload its own SDK builds where
// one exists (stripe-go, paddle-go-sdk, slack-go, go-github), and the zero
// time (NULL) when the payload has none.
func TestOccurredAt(t *testing.T) {
	t.Parallel()
	when := time.Date(2026, 11, 3, 20, 26, 10, 344522000, time.UTC)
	sec := when.Truncate(time.Second)
	shopify := func(v string) http.Header { h := http.Header{}; h.Set("X-Shopify-Triggered-At", v); return h }
	cases := []struct {
		name   string
		cfg    Config
		header http.Header
		body   []byte
		want   time.Time
	}{
		{"stripe", Config{Type: "stripe"}, nil, mustJSON(t, stripe.Event{ID: "evt_1", Type: "charge.succeeded", Created: sec.Unix()}), sec},
		{"stripe without created", Config{Type: "stripe"}, nil, []byte(`{"id":"evt_1","type":"charge.succeeded"}`), time.Time{}},
		{"stripe created not a time", Config{Type: "stripe"}, nil, []byte(`{"id":"evt_1","created":"yesterday"}`), time.Time{}},
		{"paddle", Config{Type: "paddle"}, nil, mustJSON(t, paddle.GenericEvent{EventID: "evt_1", EventType: "transaction.paid", OccurredAt: when.Format(time.RFC3339Nano)}), when},
		{"paddle without occurred_at", Config{Type: "paddle"}, nil, mustJSON(t, paddle.GenericEvent{EventID: "evt_1"}), time.Time{}},
		{"slack", Config{Type: "slack"}, nil, mustJSON(t, slackevents.EventsAPICallbackEvent{Type: "event_callback", EventID: "Ev1", EventTime: int(sec.Unix())}), sec},
		{"slack url_verification", Config{Type: "slack"}, nil, mustJSON(t, slackevents.ChallengeResponse{Challenge: "x"}), time.Time{}},
		{"slack slash command (form)", Config{Type: "slack"}, nil, []byte("command=%2Fweather&text=94070"), time.Time{}},
		{"shopify", Config{Type: "shopify"}, shopify("2026-11-03T20:26:10.344522Z"), []byte(`{"id":1}`), when},
		{"shopify offset", Config{Type: "shopify"}, shopify("2026-11-03T21:26:10.344522+01:00"), []byte(`{"id":1}`), when},
		{"shopify without header", Config{Type: "shopify"}, http.Header{}, []byte(`{"id":1}`), time.Time{}},
		{"shopify malformed header", Config{Type: "shopify"}, shopify("Tuesday"), []byte(`{"id":1}`), time.Time{}},
		{"gitlab", Config{Type: "gitlab"}, nil, []byte(`{"object_kind":"issue","object_attributes":{"id":1,"updated_at":"2026-11-03 20:26:10 UTC"}}`), sec},
		{"gitlab iso", Config{Type: "gitlab"}, nil, []byte(`{"object_kind":"merge_request","object_attributes":{"updated_at":"2026-11-03T20:26:10Z"}}`), sec},
		{"gitlab push (no object_attributes)", Config{Type: "gitlab"}, nil, []byte(`{"object_kind":"push","ref":"refs/heads/main"}`), time.Time{}},
		{"standard webhooks", Config{Type: "standard-webhooks"}, nil, []byte(`{"type":"invoice.paid","timestamp":"2026-11-03T20:26:10.344522Z","data":{}}`), when},
		{"svix without timestamp", Config{Type: "svix"}, nil, []byte(`{"type":"invoice.paid","data":{}}`), time.Time{}},
		{"github", Config{Type: "github"}, nil, mustJSON(t, github.PushEvent{Ref: github.Ptr("refs/heads/main"), Repo: &github.PushEventRepository{UpdatedAt: &github.Timestamp{Time: when}}}), time.Time{}},
		{"twilio", Config{Type: "twilio"}, nil, []byte("MessageSid=SM1&Body=hi&DateCreated=2026-11-03T20%3A26%3A10Z"), time.Time{}},
		{"hmac json path", Config{Type: "hmac", OccurredAtJSON: "meta.sent_at"}, nil, []byte(`{"meta":{"sent_at":1793737570}}`), time.Unix(1793737570, 0).UTC()},
		{"hmac json path milliseconds", Config{Type: "hmac", OccurredAtJSON: "ts"}, nil, []byte(`{"ts":1793737570123}`), time.UnixMilli(1793737570123).UTC()},
		{"hmac header", Config{Type: "hmac", OccurredAtHeader: "x-event-time"}, http.Header{"X-Event-Time": {"2026-11-03T20:26:10Z"}}, []byte(`not json`), sec},
		{"hmac unconfigured", Config{Type: "hmac"}, http.Header{"X-Event-Time": {"2026-11-03T20:26:10Z"}}, []byte(`{"created":1}`), time.Time{}},
		{"stripe override by header", Config{Type: "stripe", OccurredAtHeader: "X-Event-Time"}, http.Header{"X-Event-Time": {"1793737570"}}, []byte(`{"created":1}`), time.Unix(1793737570, 0).UTC()},
		{"year out of range", Config{Type: "stripe"}, nil, []byte(`{"created":9999999999999999}`), time.Time{}},
		{"negative", Config{Type: "stripe"}, nil, []byte(`{"created":-5}`), time.Time{}},
		{"not json", Config{Type: "stripe"}, nil, []byte(`{"created":`), time.Time{}},
		{"empty body", Config{Type: "paddle"}, nil, nil, time.Time{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := tc.header
			if h == nil {
				h = http.Header{}
			}
			got := NewOccurredAt(tc.cfg)(h, tc.body)
			if !got.Equal(tc.want) {
				t.Errorf("occurred at %v, want %v (body %s)", got, tc.want, tc.body)
			}
		})
	}
}

func TestOccurredAtConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{Type: "hmac", Secrets: []string{"s"}, HMAC: HMACConfig{Header: "X-Sig"}, OccurredAtHeader: "a", OccurredAtJSON: "b"},
		{Type: "hmac", Secrets: []string{"s"}, HMAC: HMACConfig{Header: "X-Sig"}, OccurredAtHeader: "bad header"},
		{Type: "hmac", Secrets: []string{"s"}, HMAC: HMACConfig{Header: "X-Sig"}, OccurredAtJSON: "a..b"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func FuzzOccurredAt(f *testing.F) {
	f.Add([]byte(`{"created":1700000000}`), "2026-11-03T20:26:10Z")
	f.Add([]byte(`{"created":1e400}`), "99999-01-01T00:00:00Z")
	f.Fuzz(func(t *testing.T, body []byte, header string) {
		for _, typ := range []string{"stripe", "shopify", "gitlab"} {
			got := NewOccurredAt(Config{Type: typ})(http.Header{"X-Shopify-Triggered-At": {header}}, body)
			if !got.IsZero() && (got.Year() < 1970 || got.Year() > 9999) {
				t.Fatalf("%s: %v outside 1970-9999", typ, got)
			}
		}
	})
}
