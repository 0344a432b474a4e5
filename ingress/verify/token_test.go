package verify

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	oktaToken    = "Bearer okta-hook-secret-4f9a1c"
	oktaOldToken = "Bearer okta-hook-secret-old-77e2"
)

// oktaBody is Okta's "Sample Event Delivery Payload"
// (https://developer.okta.com/docs/concepts/event-hooks/, from
// okta/okta-developer-docs docs/concepts/event-hooks/index.md), as is.
var oktaBody = []byte(`{
  "eventType": "com.okta.event_hook",
  "eventTypeVersion": "1.0",
  "cloudEventsVersion": "0.1",
  "contentType": "application/json",
  "eventId": "b5a188b9-5ece-4636-b041-482ffda96311",
  "eventTime": "2019-03-27T16:59:53.032Z",
  "source": "https://{yourOktaDomain}/api/v1/eventHooks/whoql0HfiLGPWc8Jx0g3",
  "data": {
    "events": [
      {
        "version": "0",
        "severity": "INFO",
        "client": {
          "zone": "OFF_NETWORK",
          "device": "Unknown",
          "userAgent": {
            "os": "Unknown",
            "browser": "UNKNOWN",
            "rawUserAgent": "UNKNOWN-DOWNLOAD"
          },
          "ipAddress": "12.97.85.90"
        },
        "actor": {
          "id": "00u1qw6mqitPHM8AJ0g7",
          "type": "User",
          "alternateId": "admin@example.com",
          "displayName": "Example Admin"
        },
        "outcome": {
          "result": "SUCCESS"
        },
        "uuid": "f790999f-fe87-467a-9880-6982a583986c",
        "published": "2018-03-28T22:23:07.777Z",
        "eventType": "user.session.start",
        "displayMessage": "User login to Okta",
        "transaction": {
          "type": "WEB",
          "id": "V04Oy4ubUOc5UuG6s9DyNQAABtc"
        },
        "legacyEventType": "core.user_auth.login_success",
        "authenticationContext": {
          "authenticationStep": 0,
          "externalSessionId": "1013FfF-DKQSvCI4RVXChzX-w"
        }
      }
    ]
  }
}`)

func oktaConfig() Config {
	return Config{Type: "okta", Secrets: []string{oktaOldToken, oktaToken}}
}

func TestOktaVerify(t *testing.T) {
	t.Parallel()
	cfg := oktaConfig()
	v := mustNew(t, cfg)
	auth := func(v string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}}
		if v != "" {
			h.Set("Authorization", v)
		}
		return h
	}
	tests := []struct {
		name   string
		header http.Header
		want   error
		index  int
	}{
		{"new token", auth(oktaToken), nil, 1},
		{"old token", auth(oktaOldToken), nil, 0},
		{"wrong token", auth("Bearer guessed"), ErrSignatureMismatch, 0},
		{"token with a suffix", auth(oktaToken + " "), ErrSignatureMismatch, 0},
		{"no Authorization", auth(""), ErrSignatureMissing, 0},
		// A stored digest is accepted only when re-verifying.
		{"digest at ingestion", (&tokenVerifier{header: "Authorization"}).RedactForStorage(auth(oktaToken)), ErrSignatureMismatch, 0},
	}
	for _, tt := range tests {
		req := &Request{Header: tt.header, Body: oktaBody, Now: testNow}
		res, err := v.Verify(req)
		if tt.want != nil {
			checkErr(t, err, tt.want, cfg.Secrets, req)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if res.EventID != "b5a188b9-5ece-4636-b041-482ffda96311" || res.EventType != "user.session.start" || res.SecretIndex != tt.index {
			t.Errorf("%s: %+v", tt.name, res)
		}
	}
	if got := NewOccurredAt(cfg)(nil, oktaBody); !got.Equal(time.Date(2019, 3, 27, 16, 59, 53, 32e6, time.UTC)) {
		t.Errorf("occurred_at = %v", got)
	}
	// The body is not signed: Okta sends nothing that covers it. Whoever
	// has the token can send any body; this is the provider's scheme.
	if _, err := v.Verify(&Request{Header: auth(oktaToken), Body: bytes.Replace(oktaBody, []byte("12.97.85.90"), []byte("10.0.0.1"), 1), Now: testNow}); err != nil {
		t.Errorf("changed body: %v", err)
	}
	// No eventId: refused as a malformed payload.
	req := &Request{Header: auth(oktaToken), Body: []byte(`{"eventType":"com.okta.event_hook"}`), Now: testNow}
	_, err := v.Verify(req)
	checkErr(t, err, ErrMalformedPayload, cfg.Secrets, req)
}

// TestOktaRedaction: the Authorization value is stored as its SHA-256,
// which re-verification still checks and which is no use as a token.
func TestOktaRedaction(t *testing.T) {
	t.Parallel()
	cfg := oktaConfig()
	v := mustNew(t, cfg)
	red, ok := v.(StorageRedactor)
	if !ok {
		t.Fatal("okta verifier is no StorageRedactor")
	}
	h := http.Header{"Authorization": {oktaToken}, "Content-Type": {"application/json"}}
	stored := red.RedactForStorage(h)
	if got := stored.Get("Authorization"); !strings.HasPrefix(got, "sha256:") || strings.Contains(got, "okta-hook-secret") {
		t.Fatalf("stored Authorization %q", got)
	}
	if h.Get("Authorization") != oktaToken || stored.Get("Content-Type") != "application/json" {
		t.Error("RedactForStorage changed its argument or dropped headers")
	}
	res, err := Reverify(cfg, stored, oktaBody, "")
	if err != nil || res.SecretIndex != 1 || res.EventID != "b5a188b9-5ece-4636-b041-482ffda96311" {
		t.Errorf("Reverify(stored) = %+v, %v", res, err)
	}
	bad := stored.Clone()
	bad.Set("Authorization", "sha256:zz")
	_, err = Reverify(cfg, bad, oktaBody, "")
	checkErr(t, err, ErrSignatureMalformed, cfg.Secrets, nil)
	if got := red.RedactForStorage(http.Header{}); len(got) != 0 {
		t.Errorf("RedactForStorage(empty) = %v", got)
	}
	// Microsoft Graph's token is in the body, which is stored as received.
	g := mustNew(t, graphConfig()).(StorageRedactor)
	if got := g.RedactForStorage(h); got.Get("Authorization") != oktaToken {
		t.Errorf("graph redacted a header: %v", got)
	}
}

// TestOktaVerification: Okta's one-time verification GET carries the
// hook's Authorization and X-Okta-Verification-Challenge; the answer is
// {"verification": the challenge} (see
// https://developer.okta.com/docs/concepts/event-hooks/, "One-time
// verification request"), and only with the right Authorization.
func TestOktaVerification(t *testing.T) {
	t.Parallel()
	cfg := oktaConfig()
	v := mustNew(t, cfg)
	const challenge = "j5yGzFvBdBkOROQOUfmBXZgeyaSjeuJjmfQZiRsE"
	get := func(auth, ch string) *Request {
		h := http.Header{}
		if auth != "" {
			h.Set("Authorization", auth)
		}
		if ch != "" {
			h.Set("X-Okta-Verification-Challenge", ch)
		}
		return &Request{Method: http.MethodGet, Header: h, URL: "https://hooks.example.com/webhooks/okta", Now: testNow}
	}
	res, err := v.Verify(get(oktaToken, challenge))
	if err != nil || res.Handshake == nil || res.Handshake.Kind != "verification" || res.Handshake.ContentType != "application/json" ||
		string(res.Handshake.Body) != `{"verification":"`+challenge+`"}` || res.SecretIndex != 1 {
		t.Fatalf("verification: %+v (%+v), %v", res, res.Handshake, err)
	}
	for _, tt := range []struct {
		name string
		req  *Request
		want error
	}{
		{"no Authorization", get("", challenge), ErrSignatureMissing},
		{"wrong Authorization", get("Bearer guessed", challenge), ErrSignatureMismatch},
		{"challenge not printable", get(oktaToken, "a\x01b"), ErrSignatureMalformed},
		{"challenge too long", get(oktaToken, strings.Repeat("c", maxEcho+1)), ErrSignatureMalformed},
		{"GET without challenge", get(oktaToken, ""), ErrSignatureMissing},
	} {
		res, err := v.Verify(tt.req)
		if res.Handshake != nil {
			t.Errorf("%s: answered %+v", tt.name, res.Handshake)
		}
		checkErr(t, err, tt.want, cfg.Secrets, tt.req)
	}

	// The probe of `inlet send --handshake` carries the first secret.
	probe, err := HandshakeTest(cfg, "http://localhost/webhooks/okta", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if probe.Method != http.MethodGet || probe.Header.Get("Authorization") != oktaOldToken || probe.Kind != "verification" {
		t.Errorf("probe %+v", probe)
	}
	res, err = v.Verify(&Request{Method: probe.Method, Header: probe.Header, Body: probe.Body, URL: probe.URL, Now: testNow})
	if err != nil || res.Handshake == nil {
		t.Fatalf("probe: %+v, %v", res, err)
	}
	if err := probe.Check(http.StatusOK, nil, res.Handshake.Body); err != nil {
		t.Error(err)
	}
}

// graphSecret is the clientState of Microsoft's documented example
// notification.
const graphSecret = "secretClientValue"

// graphBody is the example change notification Microsoft documents
// (https://learn.microsoft.com/en-us/graph/change-notifications-delivery-webhooks,
// "Receive notifications"), its placeholders filled in.
var graphBody = []byte(`{
  "value": [
    {
      "id": "lsgTZMr9KwAAA",
      "subscriptionId": "a8df3d73-b0a1-4d1d-9e0a-4a0a6d5a5b11",
      "subscriptionExpirationDateTime": "2016-03-19T22:11:09.952Z",
      "clientState": "secretClientValue",
      "changeType": "created",
      "resource": "users/5c8a8b24@84bd8158/messages/AAMkADA1",
      "tenantId": "84bd8158-6d4d-4958-8b9f-9d6445542f95",
      "resourceData": {
        "@odata.type": "#Microsoft.Graph.Message",
        "@odata.id": "Users/5c8a8b24@84bd8158/Messages/AAMkADA1",
        "@odata.etag": "W/\"CQAAABYAAADkrWGo7bouTKlsgTZMr9KwAAAUWRHf\"",
        "id": "AAMkADA1"
      }
    }
  ]
}`)

func graphConfig() Config {
	return Config{Type: "microsoft-graph", Secrets: []string{"old-client-state-3e1f", graphSecret}}
}

func TestGraphVerify(t *testing.T) {
	t.Parallel()
	cfg := graphConfig()
	v := mustNew(t, cfg)
	two := []byte(`{"value":[{"clientState":"secretClientValue","changeType":"updated"},{"clientState":"old-client-state-3e1f","changeType":"deleted"}]}`)
	tests := []struct {
		name  string
		body  []byte
		want  error
		index int
		typ   string
	}{
		{"documented example", graphBody, nil, 1, "created"},
		{"two subscriptions, two secrets", two, nil, 1, "updated"},
		{"lifecycle notification", []byte(`{"value":[{"subscriptionId":"x","clientState":"old-client-state-3e1f","lifecycleEvent":"reauthorizationRequired"}]}`), nil, 0, ""},
		{"wrong clientState", bytes.Replace(graphBody, []byte(graphSecret), []byte("guessedValue"), 1), ErrSignatureMismatch, 0, ""},
		{"one item wrong", []byte(`{"value":[{"clientState":"secretClientValue"},{"clientState":"guessed"}]}`), ErrSignatureMismatch, 0, ""},
		{"one item without clientState", []byte(`{"value":[{"clientState":"secretClientValue"},{"changeType":"created"}]}`), ErrSignatureMissing, 0, ""},
		{"clientState not a string", []byte(`{"value":[{"clientState":42}]}`), ErrSignatureMalformed, 0, ""},
		{"clientState empty", []byte(`{"value":[{"clientState":""}]}`), ErrSignatureMalformed, 0, ""},
		{"empty value", []byte(`{"value":[]}`), ErrSignatureMissing, 0, ""},
		{"no value", []byte(`{"clientState":"secretClientValue"}`), ErrSignatureMissing, 0, ""},
		{"value not an array", []byte(`{"value":{"clientState":"secretClientValue"}}`), ErrSignatureMalformed, 0, ""},
		{"item not an object", []byte(`{"value":["secretClientValue"]}`), ErrSignatureMalformed, 0, ""},
		{"item null", []byte(`{"value":[null]}`), ErrSignatureMalformed, 0, ""},
		{"not JSON", []byte("clientState=secretClientValue"), ErrSignatureMissing, 0, ""},
		{"truncated JSON", graphBody[:len(graphBody)-3], ErrSignatureMissing, 0, ""},
	}
	for _, tt := range tests {
		req := &Request{Header: http.Header{"Content-Type": {"application/json"}}, Body: tt.body, Now: testNow}
		res, err := v.Verify(req)
		if tt.want != nil {
			checkErr(t, err, tt.want, cfg.Secrets, req)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if res = asBodyHash(res, tt.body); res.EventID != syntheticID(tt.body) || res.EventType != tt.typ || res.SecretIndex != tt.index {
			t.Errorf("%s: %+v", tt.name, res)
		}
	}
	if got := NewOccurredAt(cfg)(nil, graphBody); !got.IsZero() {
		t.Errorf("occurred_at = %v, want none", got)
	}
	// Graph signs nothing else: a changed resource with the right
	// clientState is accepted. This is the provider's scheme.
	if _, err := v.Verify(&Request{Body: bytes.Replace(graphBody, []byte(`"created"`), []byte(`"deleted"`), 1), Now: testNow}); err != nil {
		t.Errorf("changed body: %v", err)
	}
}

// TestGraphValidationToken: a subscription's validation POST
// ?validationToken=… is echoed, URL-decoded, as text/plain with 200 (see
// https://learn.microsoft.com/en-us/graph/change-notifications-delivery-webhooks,
// "notificationUrl validation").
func TestGraphValidationToken(t *testing.T) {
	t.Parallel()
	cfg := graphConfig()
	v := mustNew(t, cfg)
	const token = "Validation: Testing client application reachability for subscription Request-Id: 9ea9b1c4-7e52-4b7f-b2f4-0c8a1e8d1a11"
	u := "https://hooks.example.com/webhooks/graph?validationToken=" + url.QueryEscape(token)
	res, err := v.Verify(&Request{Method: http.MethodPost, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, URL: u, Now: testNow})
	if err != nil || res.Handshake == nil || res.Handshake.Kind != "validation_token" || string(res.Handshake.Body) != token ||
		!strings.HasPrefix(res.Handshake.ContentType, "text/plain") || res.Handshake.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("validation: %+v, %v", res, err)
	}
	for name, q := range map[string]string{
		"empty":         "?validationToken=",
		"not printable": "?validationToken=" + url.QueryEscape("a\x00b"),
		"too long":      "?validationToken=" + strings.Repeat("t", maxEcho+1),
	} {
		req := &Request{Method: http.MethodPost, URL: "https://hooks.example.com/webhooks/graph" + q, Now: testNow}
		res, err := v.Verify(req)
		if res.Handshake != nil {
			t.Errorf("%s: answered", name)
		}
		checkErr(t, err, ErrSignatureMalformed, cfg.Secrets, req)
	}
	// Graph validates with POST only.
	req := &Request{Method: http.MethodGet, URL: u, Now: testNow}
	_, err = v.Verify(req)
	checkErr(t, err, ErrSignatureMissing, cfg.Secrets, req)
	if AnswersGET(v) {
		t.Error("microsoft-graph answers GET")
	}

	probe, err := HandshakeTest(cfg, "http://localhost/webhooks/graph", testNow)
	if err != nil {
		t.Fatal(err)
	}
	res, err = v.Verify(&Request{Method: probe.Method, Header: probe.Header, Body: probe.Body, URL: probe.URL, Now: testNow})
	if err != nil || res.Handshake == nil {
		t.Fatalf("probe: %+v, %v", res, err)
	}
	if err := probe.Check(http.StatusOK, res.Handshake.Header, res.Handshake.Body); err != nil || probe.Method != http.MethodPost {
		t.Errorf("probe %s: %v", probe.Method, err)
	}
}

// TestGraphSign: `inlet send` puts the first secret in every
// notification's clientState; a body already carrying it is unchanged.
func TestGraphSign(t *testing.T) {
	t.Parallel()
	cfg := Config{Type: "microsoft-graph", Secrets: []string{graphSecret}}
	v := mustNew(t, cfg)
	given := []byte(`{"value":[{"clientState":"placeholder","changeType":"updated","n":12345678901234567890},{"changeType":"deleted"}]}`)
	_, body, err := SignTest(cfg, "x", given, "", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(body, []byte("12345678901234567890")) || bytes.Contains(body, []byte("placeholder")) {
		t.Errorf("signed body %s", body)
	}
	if res, err := v.Verify(&Request{Body: body, Now: testNow}); err != nil || res.EventType != "updated" {
		t.Errorf("Verify(signed) = %+v, %v", res, err)
	}
	if _, again, err := SignTest(cfg, "x", body, "", testNow); err != nil || !bytes.Equal(again, body) {
		t.Errorf("signing a signed body changed it: %s, %v", again, err)
	}
	for _, bad := range []string{`[]`, `{"value":[]}`, `{"value":["x"]}`, `not json`} {
		_, _, err := SignTest(cfg, "x", []byte(bad), "", testNow)
		if err == nil {
			t.Errorf("SignTest(%s) succeeded", bad)
		}
		checkErrorSafe(t, err, cfg.Secrets, nil)
	}
}

// FuzzToken: no input panics, every error carries a sentinel and no
// secret, and a request is accepted only when its token is a secret:
// Okta's Authorization, or every clientState of Graph's notifications.
func FuzzToken(f *testing.F) {
	f.Add(oktaToken, graphBody, false)
	f.Add("Bearer x", []byte(`{"value":[{"clientState":"secretClientValue"},{"clientState":"old-client-state-3e1f"}]}`), true)
	f.Add("", []byte(`{"value":[{"clientState":1}]}`), true)
	f.Add("sha256:00", []byte(`{"value":{}}`), false)
	okta, graph := oktaConfig(), graphConfig()
	vo, vg := mustNew(f, okta), mustNew(f, graph)
	f.Fuzz(func(t *testing.T, auth string, body []byte, stored bool) {
		req := &Request{Header: http.Header{"Authorization": {auth}}, Body: body, IgnoreTolerance: stored, Now: testNow}
		res, err := vo.Verify(req)
		if err == nil {
			if !stored && auth != okta.Secrets[res.SecretIndex] {
				t.Fatalf("okta accepted %q", auth)
			}
		} else {
			if Reason(err) == "unknown" {
				t.Fatalf("okta error without sentinel: %v", err)
			}
			checkErrorSafe(t, err, okta.Secrets, req)
		}
		req = &Request{Body: body, Now: testNow}
		res, err = vg.Verify(req)
		if err != nil {
			if Reason(err) == "unknown" {
				t.Fatalf("graph error without sentinel: %v", err)
			}
			checkErrorSafe(t, err, graph.Secrets, nil)
			return
		}
		// Decoded as the verifier must read it: exact key names.
		var doc map[string][]map[string]any
		if json.Unmarshal(body, &doc) != nil || len(doc["value"]) == 0 {
			t.Fatalf("graph accepted %q", body)
		}
		for _, item := range doc["value"] {
			s, ok := item["clientState"].(string)
			if !ok || !slices.Contains(graph.Secrets, s) {
				t.Fatalf("graph accepted %q", body)
			}
		}
		if doc["value"][0]["clientState"] != graph.Secrets[res.SecretIndex] {
			t.Fatalf("graph SecretIndex %d for %q", res.SecretIndex, body)
		}
	})
}
