//go:build !fuzzonly

package verify

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"
	razorpayutils "github.com/razorpay/razorpay-go/utils"
	"go.yaml.in/yaml/v3"
)

// hexMAC and b64MAC are independent oracles of a body-HMAC scheme, written
// from the provider's documentation with crypto/hmac: prefix +
// encoding(HMAC-h(secret, body)).
func hexMAC(h func() hash.Hash, prefix string) func(secret string, body []byte) string {
	return func(secret string, body []byte) string {
		return prefix + hex.EncodeToString(hmacOf(h, secret, string(body)))
	}
}

func b64MAC(h func() hash.Hash, prefix string) func(secret string, body []byte) string {
	return func(secret string, body []byte) string {
		return prefix + base64.StdEncoding.EncodeToString(hmacOf(h, secret, string(body)))
	}
}

// bodyHMACFixture is one provider's test request: a realistic body and the
// headers the provider sends besides the signature, the signature as the
// provider's scheme computes it (the oracle), and what Verify and
// NewOccurredAt must report for it.
type bodyHMACFixture struct {
	typ       string
	secret    string
	header    http.Header // without the signature
	body      []byte
	sigHeader string
	prefix    string // of the signature header's value, "" for none
	// sign is the oracle. Its doc comment in the table names the document
	// it follows, or the provider's own code that checks it.
	sign func(secret string, body []byte) string
	// vector, when set, is the provider's own signature of body under
	// secret (a published example); sign must agree with it.
	vector       string
	wantID       string // "" for the synthetic body hash
	wantType     string
	wantOccurred time.Time
	idHeader     string // the unsigned id header, "" when the id is in the body
	verifyToken  string
}

func (f bodyHMACFixture) config(secrets ...string) Config {
	return Config{Type: f.typ, Secrets: secrets, VerifyToken: f.verifyToken}
}

// signed returns the fixture's headers with sig as the signature.
func (f bodyHMACFixture) signed(sig string) http.Header {
	h := f.header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set(f.sigHeader, sig)
	return h
}

const bodyHMACOldSecret = "rotated-out-secret-0000"

var bodyHMACFixtures = []bodyHMACFixture{
	{
		// Meta signs exactly as GitHub's X-Hub-Signature-256 does
		// (https://developers.facebook.com/docs/graph-api/webhooks/getting-started#validate-payloads);
		// TestMetaMatchesGoGitHub checks the oracle against go-github.
		typ: "meta", secret: "meta-app-secret-5f1c", verifyToken: "meta-verify-token",
		body:      []byte(`{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","time":1700000000,"changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550783881","phone_number_id":"106540352242922"},"messages":[{"from":"16505551234","id":"wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=","timestamp":"1700000000","type":"text","text":{"body":"hello"}}]}}]}]}`),
		sigHeader: "X-Hub-Signature-256", prefix: "sha256=", sign: hexMAC(sha256.New, "sha256="),
		wantType: "whatsapp_business_account", wantOccurred: testNow,
	},
	{
		// https://developers.intercom.com/docs/references/webhooks/webhook-models
		// ("Signed notifications"): X-Hub-Signature: sha1= hex
		// HMAC-SHA1(client secret, body).
		typ: "intercom", secret: "intercom-client-secret-77a1",
		body:      []byte(`{"type":"notification_event","app_id":"a86dr8yl","data":{"type":"notification_event_data","item":{"type":"conversation","id":"147","created_at":1700000000}},"links":{},"id":"notif_ccd8a4d0-f965-11e3-a367-c779cae3e1b3","topic":"conversation.user.created","delivery_status":"pending","delivery_attempts":1,"delivered_at":0,"first_sent_at":1700000000,"created_at":1700000000,"self":null}`),
		sigHeader: "X-Hub-Signature", prefix: "sha1=", sign: hexMAC(sha1.New, "sha1="),
		wantID: "notif_ccd8a4d0-f965-11e3-a367-c779cae3e1b3", wantType: "conversation.user.created", wantOccurred: testNow,
	},
	{
		// https://support.atlassian.com/bitbucket-cloud/docs/manage-webhooks/
		// ("Secure webhooks"): X-Hub-Signature: sha256= hex
		// HMAC-SHA256(secret, body); headers from
		// https://support.atlassian.com/bitbucket-cloud/docs/event-payloads/.
		typ: "bitbucket", secret: "bitbucket-webhook-secret-31",
		header: http.Header{"X-Event-Key": {"repo:push"}, "X-Request-Uuid": {"afe2f5a5-5e83-4b1d-8c6b-0e0a52c6e0b3"},
			"X-Hook-Uuid": {"8c4bd3b4-1f43-4f2e-a4b5-8f0f3b6d2a71"}, "X-Attempt-Number": {"1"}},
		body:      []byte(`{"push":{"changes":[{"new":{"type":"branch","name":"main","target":{"type":"commit","hash":"709d658dc5b6d6afcd46049c2f332ee3f515a67d"}},"created":false,"closed":false,"forced":false}]},"actor":{"type":"user","display_name":"Ada"},"repository":{"type":"repository","full_name":"team/hello"}}`),
		sigHeader: "X-Hub-Signature", prefix: "sha256=", sign: hexMAC(sha256.New, "sha256="),
		wantID: "afe2f5a5-5e83-4b1d-8c6b-0e0a52c6e0b3", wantType: "repo:push", idHeader: "X-Request-UUID",
	},
	{
		// https://developer.atlassian.com/cloud/jira/platform/webhooks/
		// ("Secure admin webhooks"): X-Hub-Signature: sha256= hex
		// HMAC-SHA256(secret, body), the WebSub method=signature form.
		typ: "jira", secret: "jira-admin-webhook-secret",
		header:    http.Header{"X-Atlassian-Webhook-Identifier": {"b1f5c3a0-7d6e-4c1a-9c2b-5e8f0a1d3c47"}, "X-Atlassian-Webhook-Flow": {"Primary"}},
		body:      []byte(`{"timestamp":1700000000123,"webhookEvent":"jira:issue_created","issue_event_type_name":"issue_created","user":{"accountId":"5b10a2844c20165700ede21g"},"issue":{"id":"10002","key":"SCRUM-3","fields":{"summary":"Checkout fails on Safari"}}}`),
		sigHeader: "X-Hub-Signature", prefix: "sha256=", sign: hexMAC(sha256.New, "sha256="),
		wantID: "b1f5c3a0-7d6e-4c1a-9c2b-5e8f0a1d3c47", wantType: "jira:issue_created", wantOccurred: time.UnixMilli(1700000000123).UTC(),
		idHeader: "X-Atlassian-Webhook-Identifier",
	},
	{
		// https://www.typeform.com/developers/webhooks/secure-your-webhooks/:
		// Typeform-Signature: sha256= base64 HMAC-SHA256(secret, body).
		typ: "typeform", secret: "typeform-secret-0c5e9a",
		body:      []byte(`{"event_id":"01HF3VQ2M8Z7K9P4X5R6T7Y8W9","event_type":"form_response","form_response":{"form_id":"lT4Z3j","token":"a3a12ec67a1365927098a606107fac15","landed_at":"2023-11-14T22:12:55Z","submitted_at":"2023-11-14T22:13:20Z","answers":[{"type":"text","text":"Great","field":{"id":"DlXFaesGBpoF","type":"short_text"}}]}}`),
		sigHeader: "Typeform-Signature", prefix: "sha256=", sign: b64MAC(sha256.New, "sha256="),
		wantID: "01HF3VQ2M8Z7K9P4X5R6T7Y8W9", wantType: "form_response", wantOccurred: testNow,
	},
	{
		// https://razorpay.com/docs/webhooks/validate-test/: hex
		// HMAC-SHA256(webhook secret, body); TestRazorpayMatchesSDK checks the
		// oracle against razorpay-go's VerifyWebhookSignature.
		typ: "razorpay", secret: "razorpay-webhook-secret-9",
		header:    http.Header{"X-Razorpay-Event-Id": {"Gb5kMCdcAZ8jJ8"}},
		body:      []byte(`{"entity":"event","account_id":"acc_BFQ7uQEaa7j2z7","event":"payment.captured","contains":["payment"],"payload":{"payment":{"entity":{"id":"pay_DESlfW9H8K9uqM","entity":"payment","amount":100,"currency":"INR","status":"captured"}}},"created_at":1700000000}`),
		sigHeader: "X-Razorpay-Signature", sign: hexMAC(sha256.New, ""),
		wantID: "Gb5kMCdcAZ8jJ8", wantType: "payment.captured", wantOccurred: testNow, idHeader: "X-Razorpay-Event-Id",
	},
	{
		// https://vercel.com/docs/webhooks/webhooks-api ("Securing
		// webhooks"): x-vercel-signature: hex HMAC-SHA1(secret, body).
		typ: "vercel", secret: "vercel-webhook-secret-4d2",
		body:      []byte(`{"id":"uzq_Ml4vT6xE2rW8","type":"deployment.succeeded","createdAt":1700000000000,"region":"sfo1","payload":{"deployment":{"id":"dpl_2WEfWphQjEzCuQJD6DWeyrnN8oYJ","name":"shop"},"project":{"id":"prj_12HKQaOmR5t5Uy6vdcQsNIiZgHGB"},"target":"production"}}`),
		sigHeader: "X-Vercel-Signature", sign: hexMAC(sha1.New, ""),
		wantID: "uzq_Ml4vT6xE2rW8", wantType: "deployment.succeeded", wantOccurred: testNow,
	},
	{
		// Coinbase's own SDKs' test vector (the same payload, secret and
		// signature in both):
		// https://github.com/coinbase/coinbase-commerce-node/blob/master/test/testWebhook.spec.js
		// https://github.com/coinbase/coinbase-commerce-python/blob/master/tests/test_webhook.py
		// Scheme: https://docs.cdp.coinbase.com/commerce/api-arcitecture/webhooks-security
		typ: "coinbase-commerce", secret: "30291a20-0bd1-4267-9b0f-e6e7b123c0bf",
		body:      []byte(`{"id":1,"scheduled_for":"2017-01-31T20:50:02Z","attempt_number":1,"event":{"id":"24934862-d980-46cb-9402-43c81b0cdba6","type":"charge:created","api_version":"2018-03-22","created_at":"2017-01-31T20:49:02Z","data":{"code":"66BEOV2A","name":"The Sovereign Individual","description":"Mastering the Transition to the Information Age","hosted_url":"https://commerce.coinbase.com/charges/66BEOV2A","created_at":"2017-01-31T20:49:02Z","expires_at":"2017-01-31T21:04:02Z","timeline":[{"time":"2017-01-31T20:49:02Z","status":"NEW"}],"metadata":{},"pricing_type":"no_price","payments":[],"addresses":{"bitcoin":"0000000000000000000000000000000000","ethereum":"0x0000000000000000000000000000000000000000","litecoin":"3000000000000000000000000000000000","bitcoincash":"bitcoincash:000000000000000000000000000000000000000000"}}}}`),
		sigHeader: "X-CC-Webhook-Signature", sign: hexMAC(sha256.New, ""),
		vector: "8be7742c7d372f08a6a3224edadf18a22b65fa9e28f3f2de97376cdaa092590d",
		wantID: "24934862-d980-46cb-9402-43c81b0cdba6", wantType: "charge:created",
		wantOccurred: time.Date(2017, 1, 31, 20, 49, 2, 0, time.UTC),
	},
	{
		// WooCommerce's signer, WC_Webhook::generate_signature
		// (plugins/woocommerce/includes/class-wc-webhook.php): base64
		// HMAC-SHA256(secret, body); headers from WC_Webhook::deliver and
		// https://woocommerce.github.io/woocommerce-rest-api-docs/#webhooks.
		typ: "woocommerce", secret: "woo-secret-(]Q!x8&k^",
		header: http.Header{"X-Wc-Webhook-Delivery-Id": {"3e0e9d0b2c5f4b8a9f1d7c6b5a4e3d2c"}, "X-Wc-Webhook-Topic": {"order.created"},
			"X-Wc-Webhook-Resource": {"order"}, "X-Wc-Webhook-Event": {"created"}, "X-Wc-Webhook-Id": {"12"},
			"X-Wc-Webhook-Source": {"https://shop.example.com/"}},
		body:      []byte(`{"id":1234,"status":"processing","currency":"USD","date_created_gmt":"2023-11-14T22:13:20","date_modified_gmt":"2023-11-14T22:13:20","total":"42.00"}`),
		sigHeader: "X-WC-Webhook-Signature", sign: b64MAC(sha256.New, ""),
		wantType: "order.created", wantOccurred: testNow, // the id: synthetic, whatever the delivery id
	},
	{
		// https://www.dropbox.com/developers/reference/webhooks:
		// X-Dropbox-Signature: hex HMAC-SHA256(app secret, body).
		typ: "dropbox", secret: "dropbox-app-secret-h7k2",
		body:      []byte(`{"list_folder":{"accounts":["dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc"]},"delta":{"users":[12345678]}}`),
		sigHeader: "X-Dropbox-Signature", sign: hexMAC(sha256.New, ""),
	},
	{
		// https://docs.sentry.io/organization/integrations/integration-platform/webhooks/:
		// Sentry-Hook-Signature: hex HMAC-SHA256(client secret, body).
		typ: "sentry", secret: "sentry-client-secret-2b9e",
		header: http.Header{"Request-Id": {"c5a6b7d8-1e2f-4a3b-9c4d-5e6f7a8b9c0d"}, "Sentry-Hook-Resource": {"issue"},
			"Sentry-Hook-Timestamp": {"1700000000"}},
		body:      []byte(`{"action":"created","installation":{"uuid":"7a485448-a9e2-4c85-8a3c-4f44175783c9"},"data":{"issue":{"id":"1170820242","shortId":"BACKEND-9","title":"ZeroDivisionError: division by zero"}},"actor":{"type":"application","id":"sentry","name":"Sentry"}}`),
		sigHeader: "Sentry-Hook-Signature", sign: hexMAC(sha256.New, ""),
		wantType: "issue", wantOccurred: testNow, // the id: synthetic, whatever the Request-ID
	},
	{
		// https://linear.app/developers/webhooks ("Securing webhooks"):
		// Linear-Signature: hex HMAC-SHA256(secret, body), webhookTimestamp
		// within a minute, as @linear/sdk's LinearWebhookClient.verify
		// checks.
		typ: "linear", secret: "lin_wh_secret_8d1c",
		header:    http.Header{"Linear-Delivery": {"234d1a4e-b617-4388-90fe-adc3633d6b72"}, "Linear-Event": {"Issue"}},
		body:      []byte(`{"action":"create","actor":{"id":"aacdca22-6266-4c0a-ab3c-8fa70a26765c","name":"Ada"},"createdAt":"2023-11-14T22:13:20.000Z","data":{"id":"2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9","title":"Checkout fails on Safari"},"url":"https://linear.app/acme/issue/ENG-42","type":"Issue","organizationId":"5a1b2c3d-0000-4000-8000-000000000042","webhookTimestamp":1700000000000,"webhookId":"000042e3-d123-4980-b49f-8e140eef9329"}`),
		sigHeader: "Linear-Signature", sign: hexMAC(sha256.New, ""),
		wantID: "234d1a4e-b617-4388-90fe-adc3633d6b72", wantType: "Issue", wantOccurred: testNow, idHeader: "Linear-Delivery",
	},
}

func fixtureOf(t *testing.T, typ string) bodyHMACFixture {
	t.Helper()
	for _, f := range bodyHMACFixtures {
		if f.typ == typ {
			return f
		}
	}
	t.Fatalf("no fixture for %s", typ)
	return bodyHMACFixture{}
}

// Every body-HMAC preset has a fixture.
func TestBodyHMACFixturesCoverThePresets(t *testing.T) {
	t.Parallel()
	for _, p := range bodyHMACProviders {
		fixtureOf(t, p.name)
	}
}

func TestBodyHMACProviders(t *testing.T) {
	t.Parallel()
	for _, f := range bodyHMACFixtures {
		t.Run(f.typ, func(t *testing.T) {
			t.Parallel()
			valid := f.sign(f.secret, f.body)
			if f.vector != "" && valid != f.vector {
				t.Fatalf("oracle %s disagrees with the provider's vector %s", valid, f.vector)
			}
			want := Result{EventID: f.wantID, EventType: f.wantType}
			if f.wantID == "" {
				want.EventID = syntheticID(f.body)
			}
			rotated := want
			rotated.SecretIndex = 1
			encoded := strings.TrimPrefix(valid, f.prefix)
			cases := []verifyCase{
				{name: "valid", header: f.signed(valid), wantRes: want},
				{name: "rotated secret", secrets: []string{bodyHMACOldSecret, f.secret}, header: f.signed(valid), wantRes: rotated},
				{name: "tampered body", header: f.signed(valid), body: flipBit(f.body, 3), wantErr: ErrSignatureMismatch},
				{name: "signature of another body", header: f.signed(f.sign(f.secret, append([]byte(" "), f.body...))), wantErr: ErrSignatureMismatch},
				{name: "rotated-out secret only", secrets: []string{bodyHMACOldSecret}, header: f.signed(valid), wantErr: ErrSignatureMismatch},
				{name: "signed with the old secret", secrets: []string{f.secret}, header: f.signed(f.sign(bodyHMACOldSecret, f.body)), wantErr: ErrSignatureMismatch},
				{name: "no signature header", header: f.signed(""), wantErr: ErrSignatureMissing},
				{name: "truncated", header: f.signed(valid[:len(valid)-4]), wantErr: ErrSignatureMalformed},
				{name: "not the encoding", header: f.signed(f.prefix + strings.Repeat("!", len(encoded))), wantErr: ErrSignatureMalformed},
			}
			if f.prefix != "" {
				cases = append(cases,
					verifyCase{name: "prefix missing", header: f.signed(encoded), wantErr: ErrSignatureMalformed},
					verifyCase{name: "other algorithm's prefix", header: f.signed("md5=" + encoded), wantErr: ErrSignatureMalformed})
			}
			if f.idHeader != "" {
				h := f.signed(valid)
				h.Del(f.idHeader)
				cases = append(cases, verifyCase{name: "no id header", header: h, wantErr: ErrMalformedPayload})
			}
			if f.verifyToken != "" {
				// A signed event carrying hub.* in its URL is still an event
				// when it comes by POST.
				cases = append(cases, verifyCase{name: "POST with a query", header: f.signed(valid), url: "/webhooks/x?hub.mode=subscribe", wantRes: want})
			}
			runVerifyCases(t, f.config(f.secret), f.body, cases)

			t.Run("occurred_at", func(t *testing.T) {
				t.Parallel()
				got := NewOccurredAt(f.config(f.secret))(f.signed(valid), f.body)
				if !got.Equal(f.wantOccurred) {
					t.Errorf("NewOccurredAt = %v, want %v", got, f.wantOccurred)
				}
			})

			// SignTest signs a given body as the oracle does, and its own
			// sample too; the verifier reads the id where SignTest put it.
			t.Run("SignTest", func(t *testing.T) {
				t.Parallel()
				cfg := f.config(f.secret)
				h, body, err := SignTest(cfg, "evt_roundtrip", f.body, "", testNow)
				if err != nil {
					t.Fatal(err)
				}
				if got := h.Get(f.sigHeader); got != valid {
					t.Errorf("SignTest signature %s, oracle %s", got, valid)
				}
				if !bytes.Equal(body, f.body) {
					t.Errorf("SignTest changed the given body")
				}
				h, body, err = SignTest(cfg, "evt_roundtrip", nil, "", testNow)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := h.Get(f.sigHeader), f.sign(f.secret, body); got != want {
					t.Errorf("SignTest sample signature %s, oracle %s", got, want)
				}
				res, err := mustNew(t, cfg).Verify(&Request{Header: h, Body: body, Now: testNow})
				if err != nil {
					t.Fatalf("Verify(SignTest sample): %v", err)
				}
				if f.wantID != "" && res.EventID != "evt_roundtrip" {
					t.Errorf("sample event id %q, want evt_roundtrip", res.EventID)
				}
				if f.wantType != "" && res.EventType == "" {
					t.Error("sample has no event type where the preset reads it")
				}
				if f.wantOccurred.IsZero() != NewOccurredAt(cfg)(h, body).IsZero() {
					t.Errorf("sample occurred_at %v, fixture %v", NewOccurredAt(cfg)(h, body), f.wantOccurred)
				}
			})
		})
	}
}

// TestMetaMatchesGoGitHub: Meta's X-Hub-Signature-256 is GitHub's scheme,
// so go-github's ValidateSignature is an independent check of the oracle
// and of SignTest's output.
func TestMetaMatchesGoGitHub(t *testing.T) {
	t.Parallel()
	f := fixtureOf(t, "meta")
	if err := github.ValidateSignature(f.sign(f.secret, f.body), f.body, []byte(f.secret)); err != nil {
		t.Fatalf("go-github rejects the oracle: %v", err)
	}
	h, body, err := SignTest(f.config(f.secret), "wamid.x", nil, "", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if err := github.ValidateSignature(h.Get("X-Hub-Signature-256"), body, []byte(f.secret)); err != nil {
		t.Errorf("go-github rejects SignTest: %v", err)
	}
	if err := github.ValidateSignature(h.Get("X-Hub-Signature-256"), body, []byte(bodyHMACOldSecret)); err == nil {
		t.Error("go-github accepts SignTest under another secret")
	}
}

// TestRazorpayMatchesSDK checks the oracle and SignTest against Razorpay's
// own verifier, razorpay-go's utils.VerifyWebhookSignature.
func TestRazorpayMatchesSDK(t *testing.T) {
	t.Parallel()
	f := fixtureOf(t, "razorpay")
	if !razorpayutils.VerifyWebhookSignature(string(f.body), f.sign(f.secret, f.body), f.secret) {
		t.Fatal("razorpay-go rejects the oracle")
	}
	h, body, err := SignTest(f.config(f.secret), "evt_rzp", nil, "", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if !razorpayutils.VerifyWebhookSignature(string(body), h.Get("X-Razorpay-Signature"), f.secret) {
		t.Error("razorpay-go rejects SignTest")
	}
	if razorpayutils.VerifyWebhookSignature(string(flipBit(body, 3)), h.Get("X-Razorpay-Signature"), f.secret) {
		t.Error("razorpay-go accepts a tampered body: the oracle is no oracle")
	}
	if h.Get("X-Razorpay-Event-Id") != "evt_rzp" {
		t.Errorf("SignTest id header %q", h.Get("X-Razorpay-Event-Id"))
	}
}

// getRequest is a GET to a source with query as its query string.
func getRequest(query url.Values) *Request {
	return &Request{Method: http.MethodGet, URL: "/webhooks/src?" + query.Encode(), Now: testNow}
}

func checkHandshake(t *testing.T, res Result, err error, kind, body string) {
	t.Helper()
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	hs := res.Handshake
	if hs == nil {
		t.Fatalf("Verify = %+v, want a handshake", res)
	}
	if hs.Kind != kind || string(hs.Body) != body || !strings.HasPrefix(hs.ContentType, "text/plain") ||
		hs.Header.Get("X-Content-Type-Options") != "nosniff" || res.EventID != "" {
		t.Errorf("handshake %+v, want kind %s, text/plain %q with nosniff", hs, kind, body)
	}
}

func TestMetaHandshake(t *testing.T) {
	t.Parallel()
	f := fixtureOf(t, "meta")
	cfg := f.config(f.secret)
	v := mustNew(t, cfg)
	if !AnswersGET(v) {
		t.Fatal("meta does not take GET")
	}
	sub := func(mode, token, challenge string) url.Values {
		q := url.Values{}
		for k, val := range map[string]string{"hub.mode": mode, "hub.verify_token": token, "hub.challenge": challenge} {
			if val != "-" {
				q.Set(k, val)
			}
		}
		return q
	}
	res, err := v.Verify(getRequest(sub("subscribe", f.verifyToken, "1158201444")))
	checkHandshake(t, res, err, "subscribe", "1158201444")

	tests := []struct {
		name  string
		query url.Values
		want  error
	}{
		{"wrong token", sub("subscribe", "guessed-token", "1158201444"), ErrSignatureMismatch},
		{"token of another case", sub("subscribe", strings.ToUpper(f.verifyToken), "1158201444"), ErrSignatureMismatch},
		{"the app secret as token", sub("subscribe", f.secret, "1158201444"), ErrSignatureMismatch},
		{"missing token", sub("subscribe", "-", "1158201444"), ErrSignatureMissing},
		{"empty token", sub("subscribe", "", "1158201444"), ErrSignatureMissing},
		{"mode not subscribe", sub("unsubscribe", f.verifyToken, "1158201444"), ErrSignatureMalformed},
		{"unprintable challenge", sub("subscribe", f.verifyToken, "11582\x00<script>"), ErrSignatureMalformed},
		{"newline in challenge", sub("subscribe", f.verifyToken, "1158\r\nSet-Cookie: a=b"), ErrSignatureMalformed},
		{"invalid UTF-8 challenge", sub("subscribe", f.verifyToken, "\xff\xfe"), ErrSignatureMalformed},
		{"too long challenge", sub("subscribe", f.verifyToken, strings.Repeat("7", maxEcho+1)), ErrSignatureMalformed},
		{"missing challenge", sub("subscribe", f.verifyToken, "-"), ErrSignatureMalformed},
		{"GET that is no handshake", url.Values{"challenge": {"x"}}, ErrSignatureMissing},
	}
	for _, tt := range tests {
		req := getRequest(tt.query)
		res, err := v.Verify(req)
		if !errors.Is(err, tt.want) || res.Handshake != nil {
			t.Errorf("%s: Verify = %+v, %v; want %v", tt.name, res, err, tt.want)
		}
		checkErrorSafe(t, err, append(cfg.Secrets, f.verifyToken), req)
		if err != nil && strings.Contains(err.Error(), f.verifyToken) {
			t.Errorf("%s: error names the verify token: %v", tt.name, err)
		}
	}
	// The longest challenge that may be echoed is.
	long := strings.Repeat("7", maxEcho)
	res, err = v.Verify(getRequest(sub("subscribe", f.verifyToken, long)))
	checkHandshake(t, res, err, "subscribe", long)

	// Without a verify token the source is refused, with one it must be
	// echoable.
	if _, err := New(Config{Type: "meta", Secrets: []string{f.secret}}); err == nil || !strings.Contains(err.Error(), "verify_token") {
		t.Errorf("meta without verify_token: %v", err)
	}
	if _, err := New(Config{Type: "meta", Secrets: []string{f.secret}, VerifyToken: "tab\there"}); err == nil {
		t.Error("meta with an unprintable verify_token accepted")
	}
	if _, err := New(Config{Type: "intercom", Secrets: []string{f.secret}, VerifyToken: "x"}); err == nil {
		t.Error("verify_token accepted for a preset without a token handshake")
	}
}

func TestDropboxChallenge(t *testing.T) {
	t.Parallel()
	f := fixtureOf(t, "dropbox")
	v := mustNew(t, f.config(f.secret))
	if !AnswersGET(v) {
		t.Fatal("dropbox does not take GET")
	}
	res, err := v.Verify(getRequest(url.Values{"challenge": {"abc123-XYZ"}}))
	checkHandshake(t, res, err, "challenge", "abc123-XYZ")

	for name, q := range map[string]url.Values{
		"empty challenge":       {"challenge": {""}},
		"too long challenge":    {"challenge": {strings.Repeat("a", maxEcho+1)}},
		"unprintable challenge": {"challenge": {"<b>\x07</b>"}},
	} {
		req := getRequest(q)
		if res, err := v.Verify(req); !errors.Is(err, ErrSignatureMalformed) || res.Handshake != nil {
			t.Errorf("%s: Verify = %+v, %v; want malformed", name, res, err)
		}
	}
	// A GET without the challenge is no handshake.
	if _, err := v.Verify(&Request{Method: http.MethodGet, URL: "/webhooks/dropbox", Now: testNow}); !errors.Is(err, ErrSignatureMissing) {
		t.Errorf("plain GET: %v, want signature missing", err)
	}
	// A POST is an event even with ?challenge= in its URL: never echoed.
	h := f.signed(f.sign(f.secret, f.body))
	res, err = v.Verify(&Request{Method: http.MethodPost, URL: "/webhooks/dropbox?challenge=abc", Header: h, Body: f.body, Now: testNow})
	if err != nil || res.Handshake != nil || asBodyHash(res, f.body).EventID != syntheticID(f.body) {
		t.Errorf("signed POST with ?challenge=: %+v, %v", res, err)
	}
	if _, err := v.Verify(&Request{Method: http.MethodPost, URL: "/webhooks/dropbox?challenge=abc", Body: f.body, Now: testNow}); !errors.Is(err, ErrSignatureMissing) {
		t.Errorf("unsigned POST with ?challenge=: %v, want signature missing", err)
	}
}

// WooCommerce posts "webhook_id=N", unsigned, when a webhook is created
// (WC_Webhook::deliver_ping) and reports the URL as failing unless the
// answer is 200: it is answered, never stored.
func TestWooCommercePing(t *testing.T) {
	t.Parallel()
	f := fixtureOf(t, "woocommerce")
	v := mustNew(t, f.config(f.secret))
	if AnswersGET(v) {
		t.Error("woocommerce takes GET")
	}
	form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "User-Agent": {"WooCommerce/8.3.0 Hookshot (WordPress/6.4.1)"}}
	res, err := v.Verify(&Request{Method: http.MethodPost, Header: form, Body: []byte("webhook_id=12"), Now: testNow})
	if err != nil || res.Handshake == nil || res.Handshake.Kind != "ping" || len(res.Handshake.Body) != 0 || res.EventID != "" {
		t.Fatalf("ping: Verify = %+v, %v", res, err)
	}
	for name, body := range map[string]string{
		"not an id":        "webhook_id=12;drop",
		"no id":            "webhook_id=",
		"another field":    "webhook_id=12&x=1",
		"very long id":     "webhook_id=" + strings.Repeat("9", 21),
		"json with the id": `{"webhook_id":12}`,
	} {
		req := &Request{Method: http.MethodPost, Header: form, Body: []byte(body), Now: testNow}
		if res, err := v.Verify(req); !errors.Is(err, ErrSignatureMissing) || res.Handshake != nil {
			t.Errorf("%s: Verify = %+v, %v; want signature missing", name, res, err)
		}
	}
	// With a signature it is verified as an event: a forged one fails.
	h := form.Clone()
	h.Set("X-WC-Webhook-Signature", f.sign(bodyHMACOldSecret, []byte("webhook_id=12")))
	if _, err := v.Verify(&Request{Method: http.MethodPost, Header: h, Body: []byte("webhook_id=12"), Now: testNow}); !errors.Is(err, ErrSignatureMismatch) {
		t.Errorf("signed ping body with a wrong signature: %v", err)
	}
}

// The handshake `inlet send --handshake` builds is answered as its own
// check expects.
func TestBodyHMACHandshakeProbes(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"meta", "dropbox", "woocommerce"} {
		f := fixtureOf(t, typ)
		cfg := f.config(f.secret)
		pr, err := HandshakeTest(cfg, "https://inlet.example.com/webhooks/"+typ, testNow)
		if err != nil {
			t.Fatalf("%s: HandshakeTest: %v", typ, err)
		}
		res, err := mustNew(t, cfg).Verify(&Request{Method: pr.Method, URL: pr.URL, Header: pr.Header, Body: pr.Body, Now: testNow})
		if err != nil || res.Handshake == nil || res.Handshake.Kind != pr.Kind {
			t.Fatalf("%s: Verify(probe) = %+v, %v", typ, res, err)
		}
		if err := pr.Check(http.StatusOK, http.Header{"Content-Type": {res.Handshake.ContentType}}, res.Handshake.Body); err != nil {
			t.Errorf("%s: probe check: %v", typ, err)
		}
		if err := pr.Check(http.StatusUnauthorized, nil, []byte(`{"status":"rejected"}`)); err == nil {
			t.Errorf("%s: probe check accepts a refusal", typ)
		}
	}
	for _, typ := range []string{"intercom", "bitbucket", "jira", "typeform", "razorpay", "vercel", "coinbase-commerce", "sentry", "linear"} {
		if _, err := HandshakeTest(Config{Type: typ, Secrets: []string{"s3cret-value"}}, "https://x.example/w", testNow); err == nil {
			t.Errorf("%s: HandshakeTest succeeded for a provider without a handshake", typ)
		}
	}
}

// Linear signs webhookTimestamp with the body; Inlet refuses one more than
// a minute away, as Linear's SDK does.
func TestLinearTimestamp(t *testing.T) {
	t.Parallel()
	f := fixtureOf(t, "linear")
	at := func(ts string) []byte {
		return []byte(strings.Replace(string(f.body), `"webhookTimestamp":1700000000000`, `"webhookTimestamp":`+ts, 1))
	}
	ms := func(d time.Duration) []byte { return at(strconv.FormatInt(testNow.Add(d).UnixMilli(), 10)) }
	signed := func(body []byte) http.Header { return f.signed(f.sign(f.secret, body)) }
	want := Result{EventID: f.wantID, EventType: f.wantType}
	var cases []verifyCase
	for _, c := range []struct {
		name string
		body []byte
		err  error
	}{
		{"now", ms(0), nil},
		{"a minute old", ms(-time.Minute), nil},
		{"a minute ahead", ms(time.Minute), nil},
		{"stale", ms(-time.Minute - time.Millisecond), ErrTimestampOutsideTolerance},
		{"future", ms(time.Minute + time.Millisecond), ErrTimestampOutsideTolerance},
		{"an hour old", ms(-time.Hour), ErrTimestampOutsideTolerance},
		{"in seconds, not ms", at(strconv.FormatInt(testNow.Unix(), 10)), ErrTimestampOutsideTolerance},
		{"a string", at(`"soon"`), ErrSignatureMalformed},
		{"negative", at("-1700000000000"), ErrSignatureMalformed},
		{"fraction", at("1700000000000.5"), ErrSignatureMalformed},
		{"missing", []byte(strings.Replace(string(f.body), `"webhookTimestamp":1700000000000,`, "", 1)), ErrSignatureMissing},
	} {
		vc := verifyCase{name: c.name, header: signed(c.body), body: c.body, wantErr: c.err}
		if c.err == nil {
			vc.wantRes = want
		}
		cases = append(cases, vc)
	}
	cases = append(cases,
		// The timestamp is signed: moving it breaks the signature first.
		verifyCase{name: "timestamp changed after signing", header: signed(f.body), body: ms(time.Second), wantErr: ErrSignatureMismatch},
		verifyCase{name: "stale but re-verified", header: signed(ms(-48 * time.Hour)), body: ms(-48 * time.Hour), ignore: true, wantRes: want},
		verifyCase{name: "stale with a wider tolerance", cfg: func(c *Config) { c.Tolerance = 5 * time.Minute },
			header: signed(ms(-4 * time.Minute)), body: ms(-4 * time.Minute), wantRes: want},
		verifyCase{name: "stale from the old secret", secrets: []string{bodyHMACOldSecret, f.secret}, header: signed(ms(-2 * time.Minute)),
			body: ms(-2 * time.Minute), wantErr: ErrTimestampOutsideTolerance},
	)
	runVerifyCases(t, f.config(f.secret), f.body, cases)

	// SignTest signs the timestamp the body carries.
	h, body, err := SignTest(f.config(f.secret), "d-1", nil, "", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if ts, _ := lookupJSON(body, []string{"webhookTimestamp"}); ts != strconv.FormatInt(testNow.UnixMilli(), 10) {
		t.Errorf("sample webhookTimestamp %s", ts)
	}
	if _, err := mustNew(t, f.config(f.secret)).Verify(&Request{Header: h, Body: body, Now: testNow.Add(61 * time.Second)}); !errors.Is(err, ErrTimestampOutsideTolerance) {
		t.Errorf("SignTest sample a minute later: %v", err)
	}
}

// Sentry-Hook-Timestamp is not signed, so it is not checked as a signed
// timestamp: any value verifies, and it only feeds occurred_at.
func TestSentryTimestampNotSigned(t *testing.T) {
	t.Parallel()
	f := fixtureOf(t, "sentry")
	valid := f.sign(f.secret, f.body)
	for _, ts := range []string{"1", "1600000000", "not a time", ""} {
		h := f.signed(valid)
		h.Set("Sentry-Hook-Timestamp", ts)
		if ts == "" {
			h.Del("Sentry-Hook-Timestamp")
		}
		if _, err := mustNew(t, f.config(f.secret)).Verify(&Request{Header: h, Body: f.body, Now: testNow}); err != nil {
			t.Errorf("Sentry-Hook-Timestamp %q: %v", ts, err)
		}
	}
	h := f.signed(valid)
	h.Set("Sentry-Hook-Timestamp", "1600000000")
	if got := NewOccurredAt(f.config(f.secret))(h, f.body); !got.Equal(time.Unix(1600000000, 0)) {
		t.Errorf("occurred_at %v", got)
	}
}

// Each preset documents itself completely, and its copy-ready source entry
// is valid configuration.
func TestBodyHMACPresetDocs(t *testing.T) {
	t.Parallel()
	for _, p := range bodyHMACProviders {
		d, ok := PresetDocOf(p.name)
		if !ok {
			t.Fatalf("%s: no doc", p.name)
		}
		fields := map[string]string{"Provider": d.Provider, "Headers": d.Headers, "Signed": d.Signed, "ID": d.ID,
			"Type": d.Type, "Occurred": d.Occurred, "Source": d.Source, "Docs": d.Docs}
		for name, v := range fields {
			if v == "" {
				t.Errorf("%s: doc.%s is empty", p.name, name)
			}
		}
		if (d.Handshake == "") != (len(p.handshakes) == 0) {
			t.Errorf("%s: doc.Handshake %q with %d handshakes", p.name, d.Handshake, len(p.handshakes))
		}
		if !strings.HasPrefix(d.Docs, "https://") {
			t.Errorf("%s: doc.Docs %q", p.name, d.Docs)
		}
		var cfg Config
		dec := yaml.NewDecoder(strings.NewReader(d.Source))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil {
			t.Errorf("%s: doc.Source: %v", p.name, err)
			continue
		}
		if cfg.Type != p.name || len(cfg.Secrets) == 0 || !strings.HasPrefix(cfg.Secrets[0], "${") {
			t.Errorf("%s: doc.Source gives %+v", p.name, cfg)
		}
		cfg.Secrets = []string{"s3cret-value"}
		if _, err := New(cfg); err != nil {
			t.Errorf("%s: doc.Source does not build: %v", p.name, err)
		}
		if !reflect.DeepEqual(p.apply(Config{}).HMAC, p.hmac) {
			t.Errorf("%s: apply does not set the preset's HMAC", p.name)
		}
	}
}

// FuzzBodyHMACPresets sends each body-HMAC preset mutated bodies and
// signatures: Verify must not panic, and may accept an event only when the
// signature is the oracle's for that very body.
func FuzzBodyHMACPresets(f *testing.F) {
	for i, fx := range bodyHMACFixtures {
		f.Add(uint8(i), fx.body, fx.sign(fx.secret, fx.body))
		f.Add(uint8(i), flipBit(fx.body, 7), fx.sign(fx.secret, fx.body))
		f.Add(uint8(i), fx.body, strings.ToUpper(fx.sign(fx.secret, fx.body)))
	}
	f.Add(uint8(8), []byte("webhook_id=12"), "")
	f.Fuzz(func(t *testing.T, i uint8, body []byte, sig string) {
		fx := bodyHMACFixtures[int(i)%len(bodyHMACFixtures)]
		cfg := fx.config(bodyHMACOldSecret, fx.secret)
		req := &Request{Header: fx.signed(sig), Body: body, Now: testNow}
		res, err := mustNew(t, cfg).Verify(req)
		checkErrorSafe(t, err, cfg.Secrets, req)
		if err != nil || res.Handshake != nil {
			return
		}
		// Hex MACs are accepted in either case, after the exact prefix.
		want := fx.sign(cfg.Secrets[res.SecretIndex], body)
		hexCase := presets[fx.typ].hmac.Encoding == "hex" && strings.HasPrefix(sig, fx.prefix) && strings.EqualFold(sig, want)
		if sig != want && !hexCase {
			t.Fatalf("%s accepted signature %q for body %q (oracle %q)", fx.typ, sig, body, want)
		}
	})
}
