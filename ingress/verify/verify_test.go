package verify

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
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

		{"unknown type", Config{Type: "foo", Secrets: []string{"s3cret-value"}}, `type "foo": unknown (known: github, standard-webhooks, stripe)`},
		{"type is case sensitive", Config{Type: "Stripe", Secrets: []string{"s3cret-value"}}, `type "Stripe": unknown`},
		{"empty type", Config{Secrets: []string{"s3cret-value"}}, "type: must be set (known: github, standard-webhooks, stripe)"},
		{"nil secrets", Config{Type: "stripe"}, "secrets: at least one secret is required"},
		{"empty secrets", Config{Type: "github", Secrets: []string{}}, "secrets: at least one secret is required"},
		{"empty secret stripe", Config{Type: "stripe", Secrets: []string{""}}, "secrets[0]: must not be empty"},
		{"empty secret github", Config{Type: "github", Secrets: []string{""}}, "secrets[0]: must not be empty"},
		{"second secret empty", Config{Type: "github", Secrets: []string{"old", ""}}, "secrets[1]: must not be empty"},
		{"empty secret standard", Config{Type: "standard-webhooks", Secrets: []string{""}}, "secrets[0]: must not be empty"},
		{"negative tolerance", Config{Type: "stripe", Secrets: []string{"s3cret-value"}, Tolerance: -time.Second}, "tolerance -1s: must not be negative"},
		{"standard bad base64", Config{Type: "standard-webhooks", Secrets: []string{goodStandard, "whsec_not*base64!"}}, "secrets[1]: not valid base64"},
		{"standard empty key", Config{Type: "svix", Secrets: []string{"whsec_"}}, "secrets[0]: decodes to an empty key"},
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
	want := []string{"github", "standard-webhooks", "stripe"}
	if !slices.Equal(got, want) {
		t.Fatalf("Types() = %q, want %q", got, want)
	}
	if !slices.IsSorted(got) {
		t.Errorf("Types() not sorted: %q", got)
	}
	got[0] = "mutated"
	if Types()[0] != "github" {
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
