package verify

// Test keys, secrets and helpers shared by the fuzz targets and the
// provider tests. They are kept apart from the tests that use official SDKs
// as oracles (those files carry //go:build !fuzzonly), so that the short CI
// fuzz (go test -tags fuzzonly -fuzz ...) builds its instrumented binary
// without the SDKs.

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

const (
	hmacSecret        = "acme-signing-secret-3b9f"
	hmacOldSecret     = "acme-signing-secret-old-0"
	standardSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	standardOldSecret = "whsec_b2xkLXNlY3JldC1rZXktMDEyMzQ1Njc4OQ=="
	stripeSecret      = "whsec_test_5Hc9W0rZ3kQ2mB8xYp1LsT6v"
	twilioToken       = "tw-auth-token-7c1e9a0b5d3f2468"
	twilioPublicURL   = "https://hooks.example.com/twilio/sms?tenant=acme"
)

// Test key pairs of the presets whose secrets are public keys: the public
// halves go in presetTestConfig's secrets, the private halves sign through
// SignTestKey.
var (
	discordTestKey    = ed25519.NewKeyFromSeed(testSeed("discord test key"))
	discordOldTestKey = ed25519.NewKeyFromSeed(testSeed("discord old test key"))
	sendgridTestKey   = mustECDSAKey()
	sendgridOldKey    = mustECDSAKey()
)

func testSeed(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

func mustECDSAKey() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

func ed25519PublicHex(k ed25519.PrivateKey) string {
	return hex.EncodeToString(k.Public().(ed25519.PublicKey))
}

func ecdsaPublicB64(k *ecdsa.PrivateKey) string {
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(der)
}

func ecdsaPrivateB64(t testing.TB, k *ecdsa.PrivateKey) string {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(der)
}

// presetTestConfig completes c, a test configuration of preset p with a
// test secret, where the preset's scheme needs more (a public key).
func presetTestConfig(p *preset, c Config) Config {
	switch p.scheme {
	case schemeEd25519:
		c.Secrets = []string{ed25519PublicHex(discordTestKey)}
	case schemeECDSA:
		c.Secrets = []string{ecdsaPublicB64(sendgridTestKey)}
	case typeStandardWebhooks:
		c.Secrets = []string{standardSecret}
	}
	return c
}

// testPrivateKey is the private key that signs test requests of a type
// whose secrets are public keys, "" for the others.
func testPrivateKey(t testing.TB, typ string) string {
	switch p := presets[typ]; {
	case p == nil:
		return ""
	case p.scheme == schemeEd25519:
		return hex.EncodeToString(discordTestKey.Seed())
	case p.scheme == schemeECDSA:
		return ecdsaPrivateB64(t, sendgridTestKey)
	}
	return ""
}

// signTestAny is SignTest for every type: the types whose secrets are
// public keys sign with their test private key through SignTestKey.
func signTestAny(t testing.TB, cfg Config, id string, body []byte, url string, now time.Time) (http.Header, []byte, error) {
	if UsesPublicKeys(cfg.Type) {
		return SignTestKey(cfg, testPrivateKey(t, cfg.Type), id, body, url, now)
	}
	return SignTest(cfg, id, body, url, now)
}

// bodyTokenType reports whether typ's token travels in the body
// (Microsoft Graph's clientState): a test body must carry its items.
func bodyTokenType(typ string) bool {
	p := presets[typ]
	return p != nil && p.scheme == schemeToken && p.token.items != ""
}

// signsBody reports whether a changed body fails typ's verification: not
// for the schemes that send a token and sign nothing.
func signsBody(typ string) bool {
	p := presets[typ]
	return typ != "gitlab" && (p == nil || p.scheme != schemeToken)
}

// testBody returns a JSON object body given to a test with what a preset
// needs of it: the event id at the preset's id path (Okta's eventId) when
// missing, and the notification items carrying the first secret of a
// body-token type (Microsoft Graph's value[].clientState).
func testBody(t testing.TB, cfg Config, id string, body []byte) []byte {
	t.Helper()
	p := presets[cfg.Type]
	if p == nil || !jsonObject(body) {
		return body
	}
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	if p.idJSON != "" {
		if _, ok := lookupJSON(body, strings.Split(p.idJSON, ".")); !ok {
			if err := setPath(doc, strings.Split(p.idJSON, "."), id); err != nil {
				t.Fatal(err)
			}
		}
	}
	if bodyTokenType(cfg.Type) {
		doc[p.token.items] = []any{map[string]any{p.token.field: cfg.Secrets[0], "changeType": "updated"}}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// testIDPath is a configured event id path into the sample of typ: into
// the first event of a batch (SendGrid's array).
func testIDPath(typ string) string {
	if typ == "sendgrid" {
		return "0.meta.trace.id"
	}
	return "meta.trace.id"
}

// changeBase64At replaces the base64 character at index i of s with a
// different one that keeps the encoding canonical.
func changeBase64At(s string, i int) string {
	c := byte('A')
	if s[i] == 'A' {
		c = 'Q' // differs in the high bits, so it stays canonical before '='
	}
	return s[:i] + string(c) + s[i+1:]
}

// checkKeySecret checks New with secret as the one public key of a source
// of type typ: accepted when want is "", else refused with an error holding
// want and neither the secret nor a header value.
func checkKeySecret(t *testing.T, typ, name, secret, want string) {
	t.Helper()
	_, err := New(Config{Type: typ, Secrets: []string{secret}})
	if want == "" {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: New error %v, want %q", name, err, want)
	}
	checkErrorSafe(t, err, []string{secret}, nil)
}
