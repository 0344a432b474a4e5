package verify

import (
	"bytes"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testNow is the fixed clock of the table tests.
var testNow = time.Unix(1_700_000_000, 0)

// checkErr fails unless err matches want (nil meaning success), and checks
// that an error's text leaks neither a secret, nor the body, nor any
// header value.
func checkErr(t *testing.T, err, want error, secrets []string, req *Request) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("Verify: unexpected error %v", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("Verify error = %v, want %v", err, want)
	}
	if r := Reason(err); r == "unknown" || r == "" {
		t.Errorf("Reason(%v) = %q", err, r)
	}
	checkErrorSafe(t, err, secrets, req)
}

// checkErrorSafe asserts that err's text contains no secret, no body and no
// header value. Very short values are skipped: they match by accident.
func checkErrorSafe(t *testing.T, err error, secrets []string, req *Request) {
	t.Helper()
	if err == nil {
		return
	}
	msg := err.Error()
	for i, s := range secrets {
		if s != "" && strings.Contains(msg, s) {
			t.Errorf("error text contains secrets[%d]: %q", i, msg)
		}
		if key, ok := strings.CutPrefix(s, "whsec_"); ok && len(key) >= 8 && strings.Contains(msg, key) {
			t.Errorf("error text contains the base64 of secrets[%d]: %q", i, msg)
		}
	}
	if req == nil {
		return
	}
	if len(req.Body) >= 8 && strings.Contains(msg, string(req.Body)) {
		t.Errorf("error text contains the body: %q", msg)
	}
	for name, values := range req.Header {
		for _, v := range values {
			if len(v) >= 8 && strings.Contains(msg, v) {
				t.Errorf("error text contains the value of header %s: %q", name, msg)
			}
		}
	}
}

func mustNew(tb testing.TB, cfg Config) Verifier {
	tb.Helper()
	v, err := New(cfg)
	if err != nil {
		tb.Fatalf("New(%s): %v", cfg.Type, err)
	}
	return v
}

func TestNew(t *testing.T) {
	t.Parallel()

	const goodStandard = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring; "" means success
	}{
		{"stripe", Config{Type: "stripe", Secrets: []string{"whsec_abc"}}, ""},
		{"github", Config{Type: "github", Secrets: []string{"s3cret"}}, ""},
		{"standard-webhooks", Config{Type: "standard-webhooks", Secrets: []string{goodStandard}}, ""},
		{"svix alias", Config{Type: "svix", Secrets: []string{goodStandard}}, ""},
		{"standard-webhooks plain base64", Config{Type: "standard-webhooks", Secrets: []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}, ""},
		{"github ignores tolerance", Config{Type: "github", Secrets: []string{"s3cret-value"}, Tolerance: time.Hour}, ""},
		{"several secrets", Config{Type: "stripe", Secrets: []string{"old", "new"}}, ""},

		{"gitlab", Config{Type: "gitlab", Secrets: []string{"glpat-token"}}, ""},
		{"shopify", Config{Type: "shopify", Secrets: []string{"shpss_abc"}}, ""},
		{"slack", Config{Type: "slack", Secrets: []string{"8f742231b10e8888abcd99yyyzzz85a5"}}, ""},
		{"paddle", Config{Type: "paddle", Secrets: []string{"pdl_ntfset_abc"}}, ""},
		{"twilio", Config{Type: "twilio", Secrets: []string{"auth-token"}}, ""},
		{"twilio public_url", Config{Type: "twilio", Secrets: []string{"auth-token"}, PublicURL: "https://hooks.example.com/twilio"}, ""},
		{"twilio public_url with fragment", Config{Type: "twilio", Secrets: []string{"auth-token"}, PublicURL: "https://hooks.example.com/twilio#rc=3&rp=all"}, ""},
		{"hmac minimal", Config{Type: "hmac", Secrets: []string{"s3cret-value"}, HMAC: HMACConfig{Header: "X-Signature"}}, ""},
		{"hmac full", Config{Type: "hmac", Secrets: []string{"s3cret-value"}, HMAC: HMACConfig{Header: "X-Sig", Algorithm: "sha512", Encoding: "base64", Prefix: "v1=", TimestampHeader: "X-Ts", SignedPayload: "{timestamp}:{body}"}}, ""},
		{"standard public key", Config{Type: "standard-webhooks", Secrets: []string{"whpk_" + strings.Repeat("A", 43) + "="}}, ""},
		{"identity fields", Config{Type: "github", Secrets: []string{"s3cret-value"}, EventIDJSON: "data.id", EventTypeHeader: "X-Kind"}, ""},

		{"unknown type", Config{Type: "foo", Secrets: []string{"s3cret-value"}}, `type "foo": unknown (known: `},
		{"type is case sensitive", Config{Type: "Stripe", Secrets: []string{"s3cret-value"}}, `type "Stripe": unknown`},
		{"empty type", Config{Secrets: []string{"s3cret-value"}}, "type: must be set (known: "},
		{"nil secrets", Config{Type: "stripe"}, "secrets: at least one secret is required"},
		{"empty secrets", Config{Type: "github", Secrets: []string{}}, "secrets: at least one secret is required"},
		{"empty secret stripe", Config{Type: "stripe", Secrets: []string{""}}, "secrets[0]: must not be empty"},
		{"empty secret github", Config{Type: "github", Secrets: []string{""}}, "secrets[0]: must not be empty"},
		{"empty secret gitlab", Config{Type: "gitlab", Secrets: []string{""}}, "secrets[0]: must not be empty"},
		{"empty secret twilio", Config{Type: "twilio", Secrets: []string{"s3cret-value", ""}}, "secrets[1]: must not be empty"},
		{"second secret empty", Config{Type: "github", Secrets: []string{"old", ""}}, "secrets[1]: must not be empty"},
		{"empty secret standard", Config{Type: "standard-webhooks", Secrets: []string{""}}, "secrets[0]: must not be empty"},
		{"negative tolerance", Config{Type: "stripe", Secrets: []string{"s3cret-value"}, Tolerance: -time.Second}, "tolerance -1s: must not be negative"},
		{"standard bad base64", Config{Type: "standard-webhooks", Secrets: []string{goodStandard, "whsec_not*base64!"}}, "secrets[1]: not valid base64"},
		{"standard empty key", Config{Type: "svix", Secrets: []string{"whsec_"}}, "secrets[0]: decodes to an empty key"},
		{"standard public key bad base64", Config{Type: "standard-webhooks", Secrets: []string{goodStandard, "whpk_***"}}, "secrets[1]: not valid base64"},
		{"standard public key short", Config{Type: "standard-webhooks", Secrets: []string{"whpk_c2hvcnQ="}}, "secrets[0]: \"whpk_\" key decodes to 5 bytes"},
		{"standard private key", Config{Type: "standard-webhooks", Secrets: []string{"whsk_c2VjcmV0LXNpZ25pbmcta2V5LWJ5dGVz"}}, "secrets[0]: is a \"whsk_\" private signing key"},

		{"public_url on other type", Config{Type: "github", Secrets: []string{"s3cret-value"}, PublicURL: "https://x.example/y"}, "public_url: only used by type twilio, hmac and the presets that sign the URL, not github"},
		{"public_url relative", Config{Type: "twilio", Secrets: []string{"s3cret-value"}, PublicURL: "/webhooks/twilio"}, "public_url: must be an absolute http:// or https:// URL"},
		{"public_url ftp", Config{Type: "twilio", Secrets: []string{"s3cret-value"}, PublicURL: "ftp://x.example/y"}, "public_url: must be an absolute http:// or https:// URL"},
		{"public_url query", Config{Type: "twilio", Secrets: []string{"s3cret-value"}, PublicURL: "https://x.example/y?a=1"}, "public_url: must not have a query string"},
		{"public_url credentials", Config{Type: "twilio", Secrets: []string{"s3cret-value"}, PublicURL: "https://user:hunter2-pass@x.example/y"}, "public_url: must not contain user:password@"},
		{"public_url unparsable", Config{Type: "twilio", Secrets: []string{"s3cret-value"}, PublicURL: "https://x.example/%zz"}, "public_url: not a valid URL"},

		{"id header and json", Config{Type: "github", Secrets: []string{"s3cret-value"}, EventIDHeader: "X-Id", EventIDJSON: "id"}, "event_id_header and event_id_json: set at most one"},
		{"type header and json", Config{Type: "github", Secrets: []string{"s3cret-value"}, EventTypeHeader: "X-T", EventTypeJSON: "type"}, "event_type_header and event_type_json: set at most one"},
		{"bad id header", Config{Type: "github", Secrets: []string{"s3cret-value"}, EventIDHeader: "X Id"}, `event_id_header: "X Id" is not a valid header name`},
		{"bad type header", Config{Type: "github", Secrets: []string{"s3cret-value"}, EventTypeHeader: "X:T"}, `event_type_header: "X:T" is not a valid header name`},
		{"empty id path segment", Config{Type: "github", Secrets: []string{"s3cret-value"}, EventIDJSON: "data..id"}, `event_id_json: "data..id" has an empty segment`},
		{"empty type path segment", Config{Type: "github", Secrets: []string{"s3cret-value"}, EventTypeJSON: ".type"}, `event_type_json: ".type" has an empty segment`},

		{"hmac on other type", Config{Type: "stripe", Secrets: []string{"s3cret-value"}, HMAC: HMACConfig{Header: "X-Sig"}}, "hmac: only used by type hmac, not stripe"},
		{"hmac no header", Config{Type: "hmac", Secrets: []string{"s3cret-value"}}, "hmac.header: required for type hmac"},
		{"hmac bad header", Config{Type: "hmac", Secrets: []string{"s3cret-value"}, HMAC: HMACConfig{Header: "X Sig"}}, `hmac.header: "X Sig" is not a valid header name`},
		{"hmac md5", Config{Type: "hmac", Secrets: []string{"s3cret-value"}, HMAC: HMACConfig{Header: "X-Sig", Algorithm: "md5"}}, `hmac.algorithm: "md5" is not sha1, sha256 or sha512`},
		{"hmac algorithm case", Config{Type: "hmac", Secrets: []string{"s3cret-value"}, HMAC: HMACConfig{Header: "X-Sig", Algorithm: "SHA256"}}, `hmac.algorithm: "SHA256" is not sha1, sha256 or sha512`},
		{"hmac encoding", Config{Type: "hmac", Secrets: []string{"s3cret-value"}, HMAC: HMACConfig{Header: "X-Sig", Encoding: "b32"}}, `hmac.encoding: "b32" is not hex or base64`},
		{"hmac bad timestamp header", Config{Type: "hmac", Secrets: []string{"s3cret-value"}, HMAC: HMACConfig{Header: "X-Sig", TimestampHeader: "X Ts"}}, `hmac.timestamp_header: "X Ts" is not a valid header name`},
		{"hmac payload without body", Config{Type: "hmac", Secrets: []string{"s3cret-value"}, HMAC: HMACConfig{Header: "X-Sig", SignedPayload: "{timestamp}"}}, `hmac.signed_payload: "{timestamp}" must contain {body} exactly once`},
		{"hmac payload body twice", Config{Type: "hmac", Secrets: []string{"s3cret-value"}, HMAC: HMACConfig{Header: "X-Sig", SignedPayload: "{body}{body}"}}, "must contain {body} exactly once"},
		{"hmac timestamp without header", Config{Type: "hmac", Secrets: []string{"s3cret-value"}, HMAC: HMACConfig{Header: "X-Sig", SignedPayload: "{timestamp}.{body}"}}, "hmac.signed_payload: \"{timestamp}.{body}\" uses {timestamp} but no timestamp is configured"},
		{"hmac timestamp header unsigned", Config{Type: "hmac", Secrets: []string{"s3cret-value"}, HMAC: HMACConfig{Header: "X-Sig", TimestampHeader: "X-Ts", SignedPayload: "{body}"}}, "must contain {timestamp} when the timestamp is in a header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil || v == nil {
					t.Fatalf("New() = %v, %v; want a verifier", v, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New() succeeded, want error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("New() error = %q, want it to contain %q", err, tt.wantErr)
			}
			checkErrorSafe(t, err, tt.cfg.Secrets, nil)
		})
	}
}

func TestTypes(t *testing.T) {
	t.Parallel()
	got := Types()
	want := append([]string{"github", "gitlab", "hmac", "paddle", "shopify", "slack", "standard-webhooks", "stripe", "twilio"}, Presets()...)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("Types() = %q, want %q", got, want)
	}
	if !slices.IsSorted(got) {
		t.Errorf("Types() not sorted: %q", got)
	}
	first := got[0]
	got[0] = "mutated"
	if Types()[0] != first {
		t.Error("Types() shares its backing array with callers")
	}
}

func TestReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{ErrSignatureMissing, "signature_missing"},
		{ErrSignatureMalformed, "signature_malformed"},
		{ErrSignatureMismatch, "signature_mismatch"},
		{ErrTimestampOutsideTolerance, "timestamp_outside_tolerance"},
		{ErrMalformedPayload, "malformed_payload"},
		{fmt.Errorf("stripe: %w: no t=", ErrSignatureMalformed), "signature_malformed"},
		{fmt.Errorf("source %q: %w", "billing", fmt.Errorf("github: %w", ErrSignatureMismatch)), "signature_mismatch"},
		{errors.New("something else"), "unknown"},
	}
	for _, tt := range tests {
		if got := Reason(tt.err); got != tt.want {
			t.Errorf("Reason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestParseUnix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1700000000", 1_700_000_000, true},
		{"999999999999999999", 999_999_999_999_999_999, true},
		{"", 0, false},
		{"1000000000000000000", 0, false}, // 19 digits
		{"01700000000", 0, false},
		{"+1700000000", 0, false},
		{"-1700000000", 0, false},
		{" 1700000000", 0, false},
		{"1700000000 ", 0, false},
		{"17e8", 0, false},
		{"1.7", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseUnix(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseUnix(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestDecodeHex32(t *testing.T) {
	t.Parallel()
	lower := strings.Repeat("0123456789abcdef", 4)
	got, ok := decodeHex32(lower)
	if !ok || got[0] != 0x01 || got[7] != 0xef || got[31] != 0xef {
		t.Errorf("decodeHex32(lower) = %x, %v", got, ok)
	}
	if up, ok := decodeHex32(strings.ToUpper(lower)); !ok || up != got {
		t.Errorf("decodeHex32(upper) = %x, %v; want %x", up, ok, got)
	}
	for _, bad := range []string{"", lower[:62], lower + "00", lower[:63] + "g", " " + lower[1:]} {
		if _, ok := decodeHex32(bad); ok {
			t.Errorf("decodeHex32(%q) succeeded", bad)
		}
	}
}

// TestConcurrentVerify shares one Verifier across goroutines, as ingress
// does; run under -race it checks the pooled MAC state.
func TestConcurrentVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1","type":"ping"}`)
	stdSecret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	stdHeader, err := SignStandardWebhooks(stdSecret, "msg_1", testNow, body)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cfg    Config
		header http.Header
	}{
		{Config{Type: "stripe", Secrets: []string{"other", "whsec_x"}}, SignStripe("whsec_x", testNow, body)},
		{Config{Type: "github", Secrets: []string{"other", "gh"}}, SignGitHub("gh", "d-1", "push", body)},
		{Config{Type: "standard-webhooks", Secrets: []string{"whsec_b3RoZXI=", stdSecret}}, stdHeader},
	}
	for _, c := range cases {
		v := mustNew(t, c.cfg)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 200 {
					res, err := v.Verify(&Request{Header: c.header, Body: body, Now: testNow})
					if err != nil || res.SecretIndex != 1 {
						t.Errorf("%s: Verify = %+v, %v", c.cfg.Type, res, err)
						return
					}
					bad := append([]byte(nil), body...)
					bad[3] ^= 1
					if _, err := v.Verify(&Request{Header: c.header, Body: bad, Now: testNow}); !errors.Is(err, ErrSignatureMismatch) {
						t.Errorf("%s: tampered Verify error = %v", c.cfg.Type, err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
}

// verifyCase is one row of a scheme's table test; zero fields take the
// table's defaults.
type verifyCase struct {
	name      string
	secrets   []string
	cfg       func(*Config) // adjusts the table's Config
	header    http.Header
	body      []byte
	url       string
	now       time.Time
	ignore    bool
	wantErr   error
	wantRes   Result
	wantInErr string
}

// runVerifyCases runs cases against New(base) with base.Secrets and body
// as defaults, checking the error sentinel, the error's safety and the
// Result (zero on failure).
func runVerifyCases(t *testing.T, base Config, body []byte, cases []verifyCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := base
			if tt.secrets != nil {
				cfg.Secrets = tt.secrets
			}
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			v := mustNew(t, cfg)
			req := &Request{Header: tt.header, Body: tt.body, URL: tt.url, Now: tt.now, IgnoreTolerance: tt.ignore}
			if req.Body == nil {
				req.Body = body
			}
			if req.Now.IsZero() {
				req.Now = testNow
			}
			res, err := v.Verify(req)
			res = asBodyHash(res, req.Body)
			checkErr(t, err, tt.wantErr, cfg.Secrets, req)
			if tt.wantInErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantInErr)) {
				t.Errorf("error %v does not mention %q", err, tt.wantInErr)
			}
			if !reflect.DeepEqual(res, tt.wantRes) {
				t.Errorf("Verify = %+v, want %+v", res, tt.wantRes)
			}
		})
	}
}

// flipBit returns a copy of b with one bit, chosen by n, inverted.
func flipBit(b []byte, n uint) []byte {
	out := bytes.Clone(b)
	out[n%uint(len(out))] ^= 1 << (n / uint(len(out)) % 8)
	return out
}

// hmacOf is an independent HMAC for test oracles.
func hmacOf(h func() hash.Hash, key string, parts ...string) []byte {
	m := hmac.New(h, []byte(key))
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

func TestSyntheticID(t *testing.T) {
	t.Parallel()
	// sha256("") is the well-known e3b0c442...
	if got := syntheticID(nil); got != "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("syntheticID(empty) = %s", got)
	}
	if syntheticID([]byte("a")) == syntheticID([]byte("b")) {
		t.Error("different bodies share a synthetic id")
	}
}

// TestReverify checks that a stored event verifies long after its
// timestamp window, still fails when tampered, and reports the same Result
// as at ingestion.
func TestReverify(t *testing.T) {
	t.Parallel()
	old := testNow.Add(-400 * 24 * time.Hour)
	body := []byte(`{"id":"evt_stored","type":"invoice.paid"}`)
	cfg := Config{Type: "stripe", Secrets: []string{"whsec_rotated_out", stripeSecret}}
	h := SignStripe(stripeSecret, old, body)

	v := mustNew(t, cfg)
	if _, err := v.Verify(&Request{Header: h, Body: body, Now: testNow}); !errors.Is(err, ErrTimestampOutsideTolerance) {
		t.Fatalf("live Verify of a stale event: %v, want ErrTimestampOutsideTolerance", err)
	}
	res, err := Reverify(cfg, h, body, "")
	if err != nil {
		t.Fatalf("Reverify: %v", err)
	}
	if want := (Result{EventID: "evt_stored", EventType: "invoice.paid", SecretIndex: 1}); res != want {
		t.Errorf("Reverify = %+v, want %+v", res, want)
	}
	if _, err := Reverify(cfg, h, flipBit(body, 3), ""); !errors.Is(err, ErrSignatureMismatch) {
		t.Errorf("Reverify of a tampered body: %v, want mismatch", err)
	}
	if _, err := Reverify(Config{Type: "stripe"}, h, body, ""); err == nil || !strings.Contains(err.Error(), "secrets:") {
		t.Errorf("Reverify with a bad config: %v", err)
	}

	// Twilio needs the URL; with public_url the stored query suffices.
	tw := Config{Type: "twilio", Secrets: []string{twilioToken}, PublicURL: "https://hooks.example.com/twilio"}
	form := []byte("MessageSid=SM1&MessageStatus=sent")
	th, err := SignTwilio(twilioToken, "https://hooks.example.com/twilio", form)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Reverify(tw, th, form, ""); err != nil {
		t.Errorf("Reverify twilio without URL: %v", err)
	}
	if _, err := Reverify(tw, th, form, "http://10.0.0.1:8080/webhooks/twilio?x=1"); !errors.Is(err, ErrSignatureMismatch) {
		t.Errorf("Reverify twilio with a different query: %v, want mismatch", err)
	}
}

// TestIdentityOverrides runs every scheme with each identity setting.
func TestIdentityOverrides(t *testing.T) {
	t.Parallel()
	// webhookTimestamp (testNow in ms): Linear signs its timestamp in the body.
	body := []byte(`{"id":"evt_1","type":"a.b","data":{"id":"obj_7","kind":"created","n":42,"list":[{"id":"first"}]},"webhookTimestamp":1700000000000}`)
	for _, typ := range Types() {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			base := signTestConfig(typ)
			tests := []struct {
				name    string
				adjust  func(*Config)
				header  map[string]string
				body    []byte
				wantID  string
				wantTyp string
				wantErr error
			}{
				{name: "id header", adjust: func(c *Config) { c.EventIDHeader = "x-request-id" }, header: map[string]string{"X-Request-Id": "req-9"}, wantID: "req-9"},
				{name: "id header missing", adjust: func(c *Config) { c.EventIDHeader = "X-Request-Id" }, header: map[string]string{"X-Request-Id": ""}, wantErr: ErrMalformedPayload},
				{name: "id header not UTF-8", adjust: func(c *Config) { c.EventIDHeader = "X-Request-Id" }, header: map[string]string{"X-Request-Id": "\xff"}, wantErr: ErrMalformedPayload},
				{name: "id json", adjust: func(c *Config) { c.EventIDJSON = "data.id" }, wantID: "obj_7"},
				{name: "id json number", adjust: func(c *Config) { c.EventIDJSON = "data.n" }, wantID: "42"},
				{name: "id json array index", adjust: func(c *Config) { c.EventIDJSON = "data.list.0.id" }, wantID: "first"},
				{name: "id json missing", adjust: func(c *Config) { c.EventIDJSON = "data.nope" }, wantErr: ErrMalformedPayload},
				{name: "id json object", adjust: func(c *Config) { c.EventIDJSON = "data" }, wantErr: ErrMalformedPayload},
				{name: "id json body not JSON", adjust: func(c *Config) { c.EventIDJSON = "id" }, body: []byte("not json"), wantErr: ErrMalformedPayload},
				{name: "type header", adjust: func(c *Config) { c.EventTypeHeader = "X-Kind"; c.EventIDJSON = "id" }, header: map[string]string{"X-Kind": "k1"}, wantID: "evt_1", wantTyp: "k1"},
				{name: "type json", adjust: func(c *Config) { c.EventTypeJSON = "data.kind"; c.EventIDJSON = "id" }, wantID: "evt_1", wantTyp: "created"},
				{name: "type json missing", adjust: func(c *Config) { c.EventTypeJSON = "data.nope"; c.EventIDJSON = "id" }, wantID: "evt_1"},
				{name: "type not UTF-8", adjust: func(c *Config) { c.EventTypeHeader = "X-Kind"; c.EventIDJSON = "id" }, header: map[string]string{"X-Kind": "\xfe"}, wantErr: ErrMalformedPayload},
			}
			for _, tt := range tests {
				cfg := base
				tt.adjust(&cfg)
				body := body
				if typ == "hubspot" { // HubSpot sends a batch: the event is its first element
					body = append(append([]byte("["), body...), ']')
					for _, p := range []*string{&cfg.EventIDJSON, &cfg.EventTypeJSON} {
						if *p != "" {
							*p = "0." + *p
						}
					}
				}
				b := testBody(t, cfg, "evt_1", body)
				if tt.body != nil {
					if bodyTokenType(typ) {
						continue // no notification to carry the token
					}
					b = tt.body
					if p := presets[typ]; p != nil && p.hmac.TimestampJSON != "" {
						continue // a body that is not JSON cannot carry the signed timestamp
					}
				}
				u := twilioPublicURL
				if cfg.Type == "twilio" {
					u, _ = SignTwilioJSON(cfg.Secrets[0], twilioPublicURL, b)
				}
				h, b, err := signTestAny(t, cfg, "evt_signtest", b, u, testNow)
				if err != nil && signsInBody(typ) && !jsonObject(b) {
					continue // Mailgun's signature goes into a JSON body
				}
				if err != nil {
					t.Fatalf("%s: SignTest: %v", tt.name, err)
				}
				for k, v := range tt.header {
					if h.Set(k, v); v == "" {
						h.Del(k)
					}
				}
				res, err := mustNew(t, cfg).Verify(&Request{Header: h, Body: b, URL: u, Now: testNow})
				if tt.wantErr != nil {
					if !errors.Is(err, tt.wantErr) {
						t.Errorf("%s: error = %v, want %v", tt.name, err, tt.wantErr)
					}
					checkErrorSafe(t, err, cfg.Secrets, &Request{Header: h, Body: b})
					continue
				}
				if err != nil {
					t.Errorf("%s: Verify: %v", tt.name, err)
					continue
				}
				if res.EventID != tt.wantID {
					t.Errorf("%s: EventID = %q, want %q", tt.name, res.EventID, tt.wantID)
				}
				if tt.wantTyp != "" && res.EventType != tt.wantTyp {
					t.Errorf("%s: EventType = %q, want %q", tt.name, res.EventType, tt.wantTyp)
				}
			}
		})
	}
}

func TestLookupJSON(t *testing.T) {
	t.Parallel()
	doc := []byte(` {"a":{"b":"x","n":-1.5e3,"t":true,"z":null,"arr":[1,{"c":"deep"}],"esc":"\u00e9\n"},"dup":"1","dup":"2"}`)
	tests := []struct {
		path string
		want string
		ok   bool
	}{
		{"a.b", "x", true},
		{"a.n", "-1.5e3", true},
		{"a.arr.1.c", "deep", true},
		{"a.arr.0", "1", true},
		{"a.esc", "é\n", true},
		{"dup", "2", true},
		{"a.t", "", false},
		{"a.z", "", false},
		{"a", "", false},
		{"a.arr.2", "", false},
		{"a.arr.-1", "", false},
		{"a.arr.x", "", false},
		{"a.b.c", "", false},
		{"missing", "", false},
	}
	for _, tt := range tests {
		got, ok := lookupJSON(doc, strings.Split(tt.path, "."))
		if got != tt.want || ok != tt.ok {
			t.Errorf("lookupJSON(%s) = %q, %v; want %q, %v", tt.path, got, ok, tt.want, tt.ok)
		}
	}
	for _, bad := range []string{"", "{", `{"a":}`, `{"a":"x"} trailing`, "[]", `"str"`} {
		if got, ok := lookupJSON([]byte(bad), []string{"a"}); ok {
			t.Errorf("lookupJSON(%q) = %q, want not found", bad, got)
		}
	}
}

func FuzzLookupJSON(f *testing.F) {
	f.Add([]byte(`{"data":{"id":"x"}}`), "data.id")
	f.Add([]byte(`{"a":[{"b":1}]}`), "a.0.b")
	f.Add([]byte(`[`), "0")
	f.Fuzz(func(t *testing.T, doc []byte, path string) {
		got, ok := lookupJSON(doc, strings.Split(path, "."))
		if !ok {
			return
		}
		// Whatever is found is what encoding/json finds on the same path.
		var v any
		d := json.NewDecoder(bytes.NewReader(doc))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			t.Fatalf("found %q in invalid JSON %q", got, doc)
		}
		for _, seg := range strings.Split(path, ".") {
			switch x := v.(type) {
			case map[string]any:
				v = x[seg]
			case []any:
				i, err := strconv.Atoi(seg)
				if err != nil || i < 0 || i >= len(x) {
					t.Fatalf("found %q at bad index %q", got, seg)
				}
				v = x[i]
			default:
				t.Fatalf("found %q through a %T", got, v)
			}
		}
		switch x := v.(type) {
		case string:
			if x != got {
				t.Fatalf("lookupJSON = %q, encoding/json = %q", got, x)
			}
		case json.Number:
			if x.String() != got {
				t.Fatalf("lookupJSON = %q, encoding/json = %q", got, x)
			}
		default:
			t.Fatalf("lookupJSON found %q where encoding/json has %T", got, v)
		}
	})
}

// asBodyHash gives a per-delivery id (PerDeliveryID: Dropbox, Graph) the
// body hash that fixtures written for ids of the body name: the random id
// itself is checked by TestPerDeliveryIDs.
func asBodyHash(res Result, body []byte) Result {
	if rest, ok := strings.CutPrefix(res.EventID, deliveryIDPrefix); ok && len(rest) == 32 {
		res.EventID = syntheticID(body)
	}
	return res
}

// TestPerDeliveryIDs: a provider that sends no id and may send the same
// bytes for two events gets a new id per delivery, so the second is not
// dropped as a duplicate; a source that names its own id keeps it; and
// re-verification, whose id cannot match, says so through PerDeliveryID.
func TestPerDeliveryIDs(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"dropbox", "microsoft-graph"} {
		cfg := signTestConfig(typ)
		if !PerDeliveryID(cfg) {
			t.Fatalf("%s: PerDeliveryID false", typ)
		}
		h, body, err := SignTest(cfg, "unused", nil, "", testNow)
		if err != nil {
			t.Fatal(err)
		}
		v := mustNew(t, cfg)
		ids := map[string]bool{}
		for range 3 {
			res, err := v.Verify(&Request{Header: h, Body: body, Now: testNow})
			if err != nil || !strings.HasPrefix(res.EventID, deliveryIDPrefix) || len(res.EventID) != len(deliveryIDPrefix)+32 {
				t.Fatalf("%s: %+v %v", typ, res, err)
			}
			ids[res.EventID] = true
		}
		if len(ids) != 3 {
			t.Errorf("%s: the same bytes delivered three times got %d ids", typ, len(ids))
		}
		own := cfg
		own.EventIDHeader = "X-Delivery"
		h.Set("X-Delivery", "d-1")
		if res, err := mustNew(t, own).Verify(&Request{Header: h, Body: body, Now: testNow}); err != nil || res.EventID != "d-1" || PerDeliveryID(own) {
			t.Errorf("%s with event_id_header: %+v %v", typ, res, err)
		}
	}
	if PerDeliveryID(signTestConfig("github")) || PerDeliveryID(signTestConfig("meta")) {
		t.Error("PerDeliveryID true for a provider with ids (or whose bodies differ)")
	}
}
