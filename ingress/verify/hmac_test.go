//go:build !fuzzonly

package verify

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"
)

var hmacBody = []byte(`{"event":"order.created","order":{"id":991,"total":"42.00"}}`)

// hmacOracle encodes HMAC(secret, signed) as configured, computed with
// crypto/hmac directly.
func hmacOracle(h func() hash.Hash, enc, prefix, secret, signed string) string {
	mac := hmacOf(h, secret, signed)
	if enc == "base64" {
		return prefix + base64.StdEncoding.EncodeToString(mac)
	}
	return prefix + hex.EncodeToString(mac)
}

func TestHMACVerify(t *testing.T) {
	t.Parallel()
	ts := strconv.FormatInt(testNow.Unix(), 10)
	tsCfg := HMACConfig{Header: "X-Acme-Signature", Prefix: "v1=", TimestampHeader: "X-Acme-Timestamp"}
	withTS := func(c *Config) { c.HMAC = tsCfg }
	signedAt := func(tm time.Time) http.Header {
		s := strconv.FormatInt(tm.Unix(), 10)
		return http.Header{
			"X-Acme-Signature": {hmacOracle(sha256.New, "hex", "v1=", hmacSecret, s+"."+string(hmacBody))},
			"X-Acme-Timestamp": {s},
		}
	}
	plain := hmacOracle(sha256.New, "hex", "", hmacSecret, string(hmacBody))
	sig := func(v string) http.Header { return http.Header{"X-Signature": {v}} }
	synth := Result{EventID: syntheticID(hmacBody)}

	runVerifyCases(t, Config{Type: "hmac", Secrets: []string{hmacSecret}, HMAC: HMACConfig{Header: "X-Signature"}}, hmacBody, []verifyCase{
		{name: "defaults sha256 hex body", header: sig(plain), wantRes: synth},
		{name: "uppercase hex", header: sig(strings.ToUpper(plain)), wantRes: synth},
		{name: "sha1", cfg: func(c *Config) { c.HMAC.Algorithm = "sha1" }, header: sig(hmacOracle(sha1.New, "hex", "", hmacSecret, string(hmacBody))), wantRes: synth},
		{name: "sha512 base64", cfg: func(c *Config) { c.HMAC.Algorithm = "sha512"; c.HMAC.Encoding = "base64" }, header: sig(hmacOracle(sha512.New, "base64", "", hmacSecret, string(hmacBody))), wantRes: synth},
		{name: "sha1 base64", cfg: func(c *Config) { c.HMAC.Algorithm = "sha1"; c.HMAC.Encoding = "base64" }, header: sig(hmacOracle(sha1.New, "base64", "", hmacSecret, string(hmacBody))), wantRes: synth},
		{name: "prefix", cfg: func(c *Config) { c.HMAC.Prefix = "sha256=" }, header: sig("sha256=" + plain), wantRes: synth},
		{name: "prefix missing", cfg: func(c *Config) { c.HMAC.Prefix = "sha256=" }, header: sig(plain), wantErr: ErrSignatureMalformed},
		{name: "prefix case", cfg: func(c *Config) { c.HMAC.Prefix = "sha256=" }, header: sig("SHA256=" + plain), wantErr: ErrSignatureMalformed},
		{name: "rotation", secrets: []string{hmacOldSecret, hmacSecret}, header: sig(plain), wantRes: Result{EventID: synth.EventID, SecretIndex: 1}},
		{name: "body byte changed", header: sig(plain), body: flipBit(hmacBody, 17), wantErr: ErrSignatureMismatch},
		{name: "one hex digit changed", header: sig(changeHexAt(plain, 9)), wantErr: ErrSignatureMismatch},
		{name: "wrong secret", secrets: []string{hmacOldSecret}, header: sig(plain), wantErr: ErrSignatureMismatch},
		{name: "sha256 MAC for sha512 config", cfg: func(c *Config) { c.HMAC.Algorithm = "sha512" }, header: sig(plain), wantErr: ErrSignatureMalformed},
		{name: "base64 for hex config", header: sig(hmacOracle(sha256.New, "base64", "", hmacSecret, string(hmacBody))), wantErr: ErrSignatureMalformed},
		{name: "non-canonical base64", cfg: func(c *Config) { c.HMAC.Encoding = "base64" }, header: func() http.Header {
			s := hmacOracle(sha256.New, "base64", "", hmacSecret, string(hmacBody))
			return sig(s[:42] + string(s[42]+1) + "=")
		}(), wantErr: ErrSignatureMalformed},
		{name: "no signature", header: http.Header{}, wantErr: ErrSignatureMissing},
		{name: "custom template", cfg: func(c *Config) {
			c.HMAC = HMACConfig{Header: "X-Signature", TimestampHeader: "X-Ts", SignedPayload: "v0:{timestamp}:{body}:end"}
		}, header: http.Header{"X-Signature": {hmacOracle(sha256.New, "hex", "", hmacSecret, "v0:"+ts+":"+string(hmacBody)+":end")}, "X-Ts": {ts}}, wantRes: synth},
		{name: "template without timestamp", cfg: func(c *Config) { c.HMAC.SignedPayload = "pre|{body}|post" }, header: sig(hmacOracle(sha256.New, "hex", "", hmacSecret, "pre|"+string(hmacBody)+"|post")), wantRes: synth},
		{name: "id and type configured", cfg: func(c *Config) { c.EventIDJSON = "order.id"; c.EventTypeJSON = "event" }, header: sig(plain), wantRes: Result{EventID: "991", EventType: "order.created"}},

		{name: "timestamp signed", cfg: withTS, header: signedAt(testNow), wantRes: synth},
		{name: "timestamp plus one second", cfg: withTS, header: func() http.Header {
			h := signedAt(testNow)
			h.Set("X-Acme-Timestamp", strconv.FormatInt(testNow.Unix()+1, 10))
			return h
		}(), wantErr: ErrSignatureMismatch},
		{name: "stale", cfg: withTS, header: signedAt(testNow.Add(-5*time.Minute - time.Second)), wantErr: ErrTimestampOutsideTolerance},
		{name: "future", cfg: withTS, header: signedAt(testNow.Add(5*time.Minute + time.Second)), wantErr: ErrTimestampOutsideTolerance},
		{name: "stale at edge", cfg: withTS, header: signedAt(testNow.Add(-5 * time.Minute)), wantRes: synth},
		{name: "custom tolerance", cfg: func(c *Config) { c.HMAC = tsCfg; c.Tolerance = time.Hour }, header: signedAt(testNow.Add(50 * time.Minute)), wantRes: synth},
		{name: "stale ignored when re-verifying", cfg: withTS, header: signedAt(testNow.Add(-48 * time.Hour)), ignore: true, wantRes: synth},
		{name: "no timestamp", cfg: withTS, header: http.Header{"X-Acme-Signature": signedAt(testNow)["X-Acme-Signature"]}, wantErr: ErrSignatureMissing},
		{name: "bad timestamp", cfg: withTS, header: func() http.Header {
			h := signedAt(testNow)
			h.Set("X-Acme-Timestamp", "soon")
			return h
		}(), wantErr: ErrSignatureMalformed},
		{name: "no timestamp window without header", header: sig(plain), now: testNow.Add(1000 * time.Hour), wantRes: synth},
	})
}

// TestHMACAsGitHubMatchesGoGitHub configures the generic scheme the way
// GitHub signs and checks it against go-github's ValidateSignature.
func TestHMACAsGitHubMatchesGoGitHub(t *testing.T) {
	t.Parallel()
	cfg := Config{Type: "hmac", Secrets: []string{hmacSecret}, HMAC: HMACConfig{Header: "X-Hub-Signature-256", Prefix: "sha256="}}
	for _, body := range [][]byte{hmacBody, {}, []byte("\x00\xff")} {
		h, err := SignHMAC(cfg, hmacSecret, testNow, body)
		if err != nil {
			t.Fatal(err)
		}
		if err := github.ValidateSignature(h.Get("X-Hub-Signature-256"), body, []byte(hmacSecret)); err != nil {
			t.Errorf("go-github rejects SignHMAC output: %v", err)
		}
		if got, want := h.Get("X-Hub-Signature-256"), SignGitHub(hmacSecret, "", "", body).Get("X-Hub-Signature-256"); got != want {
			t.Errorf("SignHMAC = %s, SignGitHub = %s", got, want)
		}
		if _, err := mustNew(t, cfg).Verify(&Request{Header: h, Body: body}); err != nil {
			t.Errorf("Verify: %v", err)
		}
	}
}

func TestSignHMAC(t *testing.T) {
	t.Parallel()
	cfg := Config{Type: "hmac", HMAC: HMACConfig{Header: "x-sig", Algorithm: "sha512", Encoding: "base64", Prefix: "p:", TimestampHeader: "x-ts", SignedPayload: "{body}@{timestamp}"}}
	h, err := SignHMAC(cfg, hmacSecret, testNow, hmacBody)
	if err != nil {
		t.Fatal(err)
	}
	ts := strconv.FormatInt(testNow.Unix(), 10)
	if got, want := h.Get("X-Sig"), hmacOracle(sha512.New, "base64", "p:", hmacSecret, string(hmacBody)+"@"+ts); got != want {
		t.Errorf("signature = %s, want %s", got, want)
	}
	if h.Get("X-Ts") != ts {
		t.Errorf("timestamp header = %q", h.Get("X-Ts"))
	}
	if _, err := SignHMAC(Config{Type: "hmac", HMAC: HMACConfig{}}, hmacSecret, testNow, nil); err == nil || !strings.Contains(err.Error(), "hmac.header") {
		t.Errorf("SignHMAC without header: %v", err)
	}
	if _, err := SignHMAC(cfg, "", testNow, nil); err == nil || !strings.Contains(err.Error(), "secret") {
		t.Errorf("SignHMAC without secret: %v", err)
	}
}

func FuzzHMAC(f *testing.F) {
	ts := strconv.FormatInt(testNow.Unix(), 10)
	f.Add("v1="+hmacOracle(sha256.New, "hex", "", hmacSecret, ts+"."+string(hmacBody)), ts, hmacBody, uint8(0), uint(0))
	f.Add("v1="+strings.Repeat("0", 128), "1", []byte{}, uint8(5), uint(3))
	f.Add("v1="+strings.Repeat("A", 86)+"==", "", []byte("x"), uint8(3), uint(1<<30))
	f.Add("", "0", []byte(nil), uint8(1), uint(8))

	algs := []string{"sha1", "sha256", "sha512"}
	type variant struct {
		cfg Config
		v   Verifier
		h   func() hash.Hash
	}
	var variants []variant
	for _, alg := range algs {
		for _, enc := range []string{"hex", "base64"} {
			cfg := Config{Type: "hmac", Secrets: []string{hmacOldSecret, hmacSecret}, HMAC: HMACConfig{Header: "X-Sig", Algorithm: alg, Encoding: enc, Prefix: "v1=", TimestampHeader: "X-Ts"}}
			variants = append(variants, variant{cfg, mustNew(f, cfg), hmacAlgorithms[alg]})
		}
	}

	f.Fuzz(func(t *testing.T, sig, ts string, body []byte, which uint8, flip uint) {
		va := variants[int(which)%len(variants)]
		secrets := va.cfg.Secrets
		req := &Request{Header: http.Header{"X-Sig": {sig}, "X-Ts": {ts}}, Body: body, IgnoreTolerance: true}
		res, err := va.v.Verify(req)
		if err == nil {
			want := hmacOracle(va.h, va.cfg.HMAC.Encoding, "v1=", secrets[res.SecretIndex], ts+"."+string(body))
			if !strings.EqualFold(sig, want) || (va.cfg.HMAC.Encoding == "base64" && sig != want) {
				t.Fatalf("accepted %q for ts %q body %q: not genuine", sig, ts, body)
			}
		} else {
			if Reason(err) == "unknown" {
				t.Fatalf("error without sentinel: %v", err)
			}
			checkErrorSafe(t, err, secrets, req)
		}

		h, err := SignHMAC(va.cfg, hmacSecret, testNow, body)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := va.v.Verify(&Request{Header: h, Body: body, Now: testNow}); err != nil || res.SecretIndex != 1 {
			t.Fatalf("genuine: %+v, %v", res, err)
		}
		if len(body) > 0 {
			if _, err := va.v.Verify(&Request{Header: h, Body: flipBit(body, flip), Now: testNow}); !errors.Is(err, ErrSignatureMismatch) {
				t.Fatalf("flipped body: %v", err)
			}
		}
	})
}
