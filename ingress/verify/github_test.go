//go:build !fuzzonly

package verify

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"
)

const (
	githubSecret    = "gh-webhook-secret-9f8e7d6c"
	githubOldSecret = "gh-webhook-secret-old-0000"
	githubDelivery  = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
)

var githubBody = []byte(`{"zen":"Keep it logically awesome.","hook_id":12345678,"hook":{"type":"Repository","id":12345678,"events":["push"]}}`)

// githubOracle computes the documented GitHub signature independently of the
// package: "sha256=" + hex(HMAC-SHA256(secret, body)).
func githubOracle(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

func githubHeaders(sig, delivery, event string) http.Header {
	h := http.Header{}
	if sig != "" {
		h.Set("X-Hub-Signature-256", sig)
	}
	if delivery != "" {
		h.Set("X-GitHub-Delivery", delivery)
	}
	if event != "" {
		h.Set("X-GitHub-Event", event)
	}
	return h
}

// TestGitHubDocumentedVector uses the test vector from GitHub's "Validating
// webhook deliveries" documentation.
func TestGitHubDocumentedVector(t *testing.T) {
	t.Parallel()
	const (
		secret  = "It's a Secret to Everybody"
		payload = "Hello, World!"
		want    = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	)
	if got := githubOracle(secret, []byte(payload)); got != want {
		t.Fatalf("test oracle = %s, want the documented %s", got, want)
	}
	if got := SignGitHub(secret, "", "", []byte(payload)).Get("X-Hub-Signature-256"); got != want {
		t.Errorf("SignGitHub = %s, want %s", got, want)
	}
	v := mustNew(t, Config{Type: "github", Secrets: []string{secret}})
	res, err := v.Verify(&Request{Header: githubHeaders(want, githubDelivery, "ping"), Body: []byte(payload)})
	if err != nil {
		t.Fatalf("Verify documented vector: %v", err)
	}
	if want := (Result{EventID: githubDelivery, EventType: "ping"}); res != want {
		t.Errorf("Verify = %+v, want %+v", res, want)
	}
}

func TestGitHubVerify(t *testing.T) {
	t.Parallel()

	valid := githubOracle(githubSecret, githubBody)
	sha1Sig := func() string {
		mac := hmac.New(sha1.New, []byte(githubSecret))
		mac.Write(githubBody)
		return "sha1=" + hex.EncodeToString(mac.Sum(nil))
	}()

	tests := []struct {
		name      string
		secrets   []string
		header    http.Header
		body      []byte
		now       time.Time
		wantErr   error
		wantRes   Result
		wantInErr string
	}{
		{name: "valid", header: githubHeaders(valid, githubDelivery, "push"), wantRes: Result{EventID: githubDelivery, EventType: "push"}},
		{name: "our signer", header: SignGitHub(githubSecret, githubDelivery, "push", githubBody), wantRes: Result{EventID: githubDelivery, EventType: "push"}},
		{name: "no event header", header: githubHeaders(valid, githubDelivery, ""), wantRes: Result{EventID: githubDelivery}},
		{name: "no timestamp window", now: testNow.Add(10 * 365 * 24 * time.Hour), header: githubHeaders(valid, githubDelivery, "push"), wantRes: Result{EventID: githubDelivery, EventType: "push"}},
		{name: "uppercase hex accepted", header: githubHeaders("sha256="+strings.ToUpper(valid[7:]), githubDelivery, "push"), wantRes: Result{EventID: githubDelivery, EventType: "push"}},
		{name: "rotation new secret", secrets: []string{githubOldSecret, githubSecret}, header: githubHeaders(valid, githubDelivery, "push"), wantRes: Result{EventID: githubDelivery, EventType: "push", SecretIndex: 1}},
		{name: "rotation old secret", secrets: []string{githubOldSecret, githubSecret}, header: githubHeaders(githubOracle(githubOldSecret, githubBody), githubDelivery, "push"), wantRes: Result{EventID: githubDelivery, EventType: "push"}},

		{name: "body byte changed", header: githubHeaders(valid, githubDelivery, "push"), body: bytes.Replace(githubBody, []byte("awesome"), []byte("awesomE"), 1), wantErr: ErrSignatureMismatch},
		{name: "body truncated", header: githubHeaders(valid, githubDelivery, "push"), body: githubBody[:len(githubBody)-1], wantErr: ErrSignatureMismatch},
		{name: "one hex digit changed", header: githubHeaders(changeHexAt(valid, 7), githubDelivery, "push"), wantErr: ErrSignatureMismatch},
		{name: "last hex digit changed", header: githubHeaders(changeHexAt(valid, len(valid)-1), githubDelivery, "push"), wantErr: ErrSignatureMismatch},
		{name: "wrong secret", secrets: []string{githubOldSecret}, header: githubHeaders(valid, githubDelivery, "push"), wantErr: ErrSignatureMismatch},
		{name: "mismatch before missing delivery", secrets: []string{githubOldSecret}, header: githubHeaders(valid, "", "push"), wantErr: ErrSignatureMismatch},

		{name: "no signature", header: githubHeaders("", githubDelivery, "push"), wantErr: ErrSignatureMissing},
		{name: "only SHA-1 never falls back", header: func() http.Header {
			h := githubHeaders("", githubDelivery, "push")
			h.Set("X-Hub-Signature", sha1Sig)
			return h
		}(), wantErr: ErrSignatureMissing, wantInErr: "SHA-1"},
		{name: "nil header", header: nil, wantErr: ErrSignatureMissing},
		{name: "no prefix", header: githubHeaders(valid[7:], githubDelivery, "push"), wantErr: ErrSignatureMalformed},
		{name: "sha1 prefix", header: githubHeaders("sha1="+valid[7:], githubDelivery, "push"), wantErr: ErrSignatureMalformed},
		{name: "SHA256 prefix case", header: githubHeaders("SHA256="+valid[7:], githubDelivery, "push"), wantErr: ErrSignatureMalformed},
		{name: "non-hex", header: githubHeaders(valid[:len(valid)-1]+"x", githubDelivery, "push"), wantErr: ErrSignatureMalformed},
		{name: "short", header: githubHeaders(valid[:len(valid)-2], githubDelivery, "push"), wantErr: ErrSignatureMalformed},
		{name: "long", header: githubHeaders(valid+"00", githubDelivery, "push"), wantErr: ErrSignatureMalformed},
		{name: "prefix only", header: githubHeaders("sha256=", githubDelivery, "push"), wantErr: ErrSignatureMalformed},

		{name: "no delivery", header: githubHeaders(valid, "", "push"), wantErr: ErrMalformedPayload},
		{name: "delivery not UTF-8", header: githubHeaders(valid, "\xff\xfe-delivery", "push"), wantErr: ErrMalformedPayload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			secrets := tt.secrets
			if secrets == nil {
				secrets = []string{githubSecret}
			}
			v := mustNew(t, Config{Type: "github", Secrets: secrets, Tolerance: time.Second})
			body := tt.body
			if body == nil {
				body = githubBody
			}
			now := tt.now
			if now.IsZero() {
				now = testNow
			}
			req := &Request{Header: tt.header, Body: body, Now: now}
			res, err := v.Verify(req)
			checkErr(t, err, tt.wantErr, secrets, req)
			if tt.wantInErr != "" && !strings.Contains(err.Error(), tt.wantInErr) {
				t.Errorf("error %q does not mention %q", err, tt.wantInErr)
			}
			if res != tt.wantRes {
				t.Errorf("Verify = %+v, want %+v", res, tt.wantRes)
			}
		})
	}
}

func TestSignGitHubHeaders(t *testing.T) {
	t.Parallel()
	h := SignGitHub(githubSecret, githubDelivery, "push", githubBody)
	if got := h.Get("X-Hub-Signature-256"); got != githubOracle(githubSecret, githubBody) {
		t.Errorf("X-Hub-Signature-256 = %q", got)
	}
	if h.Get("X-GitHub-Delivery") != githubDelivery || h.Get("X-GitHub-Event") != "push" {
		t.Errorf("delivery/event headers = %q", h)
	}
	if h.Get("X-Hub-Signature") != "" {
		t.Error("SignGitHub sets the SHA-1 header")
	}
	if h := SignGitHub(githubSecret, "", "", githubBody); len(h) != 1 {
		t.Errorf("SignGitHub without delivery and event = %q, want only the signature", h)
	}
}

func FuzzGitHub(f *testing.F) {
	f.Add(githubOracle(githubSecret, githubBody), githubDelivery, githubBody, uint(0))
	f.Add("sha256="+strings.Repeat("A", 64), "", []byte{}, uint(3))
	f.Add("sha256=", "d", []byte("x"), uint(1<<33))
	f.Add("sha1=0", "\x00", []byte(nil), uint(8))

	secrets := []string{githubOldSecret, githubSecret}
	v := mustNew(f, Config{Type: "github", Secrets: secrets})

	f.Fuzz(func(t *testing.T, sig, delivery string, body []byte, flip uint) {
		h := http.Header{"X-Hub-Signature-256": {sig}, "X-Github-Delivery": {delivery}}
		req := &Request{Header: h, Body: body}
		res, err := v.Verify(req)
		if err == nil {
			if !strings.EqualFold(sig, githubOracle(secrets[res.SecretIndex], body)) || !strings.HasPrefix(sig, "sha256=") {
				t.Fatalf("accepted signature %q for body %q that is not genuine", sig, body)
			}
			if res.EventID != delivery || delivery == "" {
				t.Fatalf("EventID = %q, delivery header %q", res.EventID, delivery)
			}
		} else {
			if Reason(err) == "unknown" {
				t.Fatalf("error without sentinel: %v", err)
			}
			checkErrorSafe(t, err, secrets, req)
		}

		// Genuine signature: accepted unless the delivery id is unusable;
		// any one-bit change of the body or digit of the signature fails.
		good := githubOracle(githubSecret, body)
		req = &Request{Header: githubHeaders(good, "d-1", "push"), Body: body}
		if res, err := v.Verify(req); err != nil || res.SecretIndex != 1 {
			t.Fatalf("genuine signature: %+v, %v", res, err)
		}
		if len(body) > 0 {
			bad := bytes.Clone(body)
			bad[flip%uint(len(bad))] ^= 1 << (flip / uint(len(bad)) % 8)
			if _, err := v.Verify(&Request{Header: req.Header, Body: bad}); !errors.Is(err, ErrSignatureMismatch) {
				t.Fatalf("flipped body bit: error = %v, want mismatch", err)
			}
		}
		changed := changeHexAt(good, 7+int(flip%64))
		if _, err := v.Verify(&Request{Header: githubHeaders(changed, "d-1", "push"), Body: body}); !errors.Is(err, ErrSignatureMismatch) {
			t.Fatalf("changed signature digit: error = %v, want mismatch", err)
		}
	})
}

func BenchmarkGitHubVerify(b *testing.B) {
	body := benchBody()
	v := mustNew(b, Config{Type: "github", Secrets: []string{githubSecret}})
	req := &Request{Header: SignGitHub(githubSecret, githubDelivery, "push", body), Body: body}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := v.Verify(req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestGitHubMatchesGoGitHub uses go-github's ValidatePayloadFromBody and
// ValidateSignature as the oracle both ways, and pins its traps that the
// verifier must not share.
func TestGitHubMatchesGoGitHub(t *testing.T) {
	t.Parallel()
	v := mustNew(t, Config{Type: "github", Secrets: []string{githubSecret}})
	for _, body := range [][]byte{githubBody, {}, []byte("\x00\xff")} {
		h := SignGitHub(githubSecret, githubDelivery, "push", body)
		sig := h.Get("X-Hub-Signature-256")
		if err := github.ValidateSignature(sig, body, []byte(githubSecret)); err != nil {
			t.Errorf("go-github rejects SignGitHub output: %v", err)
		}
		got, err := github.ValidatePayloadFromBody("application/json", bytes.NewReader(body), sig, []byte(githubSecret))
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("go-github ValidatePayloadFromBody = %q, %v", got, err)
		}
		if err := github.ValidateSignature(sig, body, []byte(githubOldSecret)); err == nil {
			t.Error("go-github accepts a wrong secret")
		}
		if _, err := v.Verify(&Request{Header: h, Body: body}); err != nil {
			t.Errorf("Verify: %v", err)
		}
	}

	// Trap 1: go-github accepts an empty signature with an empty secret;
	// an empty secret cannot even be configured here.
	if _, err := github.ValidatePayloadFromBody("application/json", bytes.NewReader(githubBody), "", nil); err != nil {
		t.Logf("go-github no longer accepts empty secret and signature: %v", err)
	}
	if _, err := New(Config{Type: "github", Secrets: []string{""}}); err == nil {
		t.Error("New accepts an empty GitHub secret")
	}
	// Trap 2: go-github falls back to SHA-1 signatures; we never do.
	sha1Sig := "sha1=" + hex.EncodeToString(hmacOf(sha1.New, githubSecret, string(githubBody)))
	if err := github.ValidateSignature(sha1Sig, githubBody, []byte(githubSecret)); err != nil {
		t.Logf("go-github no longer accepts SHA-1: %v", err)
	}
	if _, err := v.Verify(&Request{Header: githubHeaders(sha1Sig, githubDelivery, "push"), Body: githubBody}); !errors.Is(err, ErrSignatureMalformed) {
		t.Errorf("Verify SHA-1 in the SHA-256 header: %v, want malformed", err)
	}
}
