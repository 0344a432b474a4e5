//go:build !fuzzonly

package verify

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
)

// discordBody is an application command interaction as Discord documents
// it (https://discord.com/developers/docs/interactions/receiving-and-responding#interaction-object).
var discordBody = []byte(`{"app_permissions":"442368","application_id":"1181112222333344440","channel_id":"1181112222333344442","data":{"id":"1181112222333344441","name":"hello","type":1},"guild_id":"1181112222333344443","id":"1181112222333344445","locale":"en-US","member":{"user":{"id":"1181112222333344444","username":"tester"}},"token":"aW50ZXJhY3Rpb24tdG9rZW4","type":2,"version":1}`)

// discordSigned signs an interaction the way Discord documents it, with
// the standard library, not Inlet's signer: hex(Ed25519(timestamp + body)).
func discordSigned(key ed25519.PrivateKey, ts time.Time, body []byte) http.Header {
	t := strconv.FormatInt(ts.Unix(), 10)
	sig := ed25519.Sign(key, append([]byte(t), body...))
	return http.Header{"X-Signature-Ed25519": {hex.EncodeToString(sig)}, "X-Signature-Timestamp": {t}}
}

// discordgoAccepts is the oracle: discordgo v0.28.1's VerifyInteraction,
// which checks the signature but no time window.
func discordgoAccepts(h http.Header, body []byte, pub ed25519.PublicKey) bool {
	r := httptest.NewRequest(http.MethodPost, "http://localhost/interactions", bytes.NewReader(body))
	r.Header = h.Clone()
	return discordgo.VerifyInteraction(r, pub)
}

func discordConfig(keys ...ed25519.PrivateKey) Config {
	c := Config{Type: "discord"}
	for _, k := range keys {
		c.Secrets = append(c.Secrets, ed25519PublicHex(k))
	}
	return c
}

func TestDiscordVerify(t *testing.T) {
	t.Parallel()
	cfg := discordConfig(discordOldTestKey, discordTestKey) // rotation: old key first
	v := mustNew(t, cfg)
	valid := discordSigned(discordTestKey, testNow, discordBody)
	with := func(name, value string) http.Header {
		h := valid.Clone()
		if value == "" {
			h.Del(name)
		} else {
			h.Set(name, value)
		}
		return h
	}
	sig := valid.Get("X-Signature-Ed25519")
	other := discordSigned(ed25519.NewKeyFromSeed(testSeed("not configured")), testNow, discordBody)
	tests := []struct {
		name   string
		header http.Header
		body   []byte
		want   error
		index  int
	}{
		{"valid, new key", valid, discordBody, nil, 1},
		{"valid, old key", discordSigned(discordOldTestKey, testNow, discordBody), discordBody, nil, 0},
		{"upper-case hex", with("X-Signature-Ed25519", strings.ToUpper(sig)), discordBody, nil, 1},
		{"tampered body", valid, append(slices.Clone(discordBody[:len(discordBody)-1]), ' ', '}'), ErrSignatureMismatch, 0},
		{"timestamp changed", with("X-Signature-Timestamp", unixString(testNow.Add(time.Second))), discordBody, ErrSignatureMismatch, 0},
		{"stale", discordSigned(discordTestKey, testNow.Add(-6*time.Minute), discordBody), discordBody, ErrTimestampOutsideTolerance, 0},
		{"future", discordSigned(discordTestKey, testNow.Add(6*time.Minute), discordBody), discordBody, ErrTimestampOutsideTolerance, 0},
		{"wrong key", other, discordBody, ErrSignatureMismatch, 0},
		{"no signature", with("X-Signature-Ed25519", ""), discordBody, ErrSignatureMissing, 0},
		{"no timestamp", with("X-Signature-Timestamp", ""), discordBody, ErrSignatureMissing, 0},
		{"signature not hex", with("X-Signature-Ed25519", "zz"+sig[2:]), discordBody, ErrSignatureMalformed, 0},
		{"signature short", with("X-Signature-Ed25519", sig[:126]), discordBody, ErrSignatureMalformed, 0},
		{"signature long", with("X-Signature-Ed25519", sig+"00"), discordBody, ErrSignatureMalformed, 0},
		{"signature base64", with("X-Signature-Ed25519", base64.StdEncoding.EncodeToString([]byte(sig[:64]))), discordBody, ErrSignatureMalformed, 0},
		{"timestamp not a number", with("X-Signature-Timestamp", "17e8"), discordBody, ErrSignatureMalformed, 0},
		{"timestamp with sign", with("X-Signature-Timestamp", "+"+unixString(testNow)), discordBody, ErrSignatureMalformed, 0},
	}
	for _, tt := range tests {
		req := &Request{Header: tt.header, Body: tt.body, Now: testNow}
		res, err := v.Verify(req)
		if tt.want != nil {
			checkErr(t, err, tt.want, cfg.Secrets, req)
		} else if err != nil {
			t.Errorf("%s: %v", tt.name, err)
		} else if res.EventID != "1181112222333344445" || res.EventType != "2" || res.SecretIndex != tt.index {
			t.Errorf("%s: %+v", tt.name, res)
		}
		// The oracle agrees wherever it looks (it checks no time window,
		// and takes either case of hex).
		if tt.want != ErrTimestampOutsideTolerance {
			pub := discordTestKey.Public().(ed25519.PublicKey)
			if tt.index == 0 && tt.want == nil {
				pub = discordOldTestKey.Public().(ed25519.PublicKey)
			}
			if got := discordgoAccepts(tt.header, tt.body, pub); got != (tt.want == nil) {
				t.Errorf("%s: discordgo.VerifyInteraction = %v, Inlet's error %v", tt.name, got, err)
			}
		}
	}
	// A stored event re-verifies without the time window.
	old := discordSigned(discordTestKey, testNow.Add(-48*time.Hour), discordBody)
	if res, err := Reverify(cfg, old, discordBody, ""); err != nil || res.EventID != "1181112222333344445" {
		t.Errorf("Reverify = %+v, %v", res, err)
	}
	// occurred_at is the signed timestamp.
	if got := NewOccurredAt(cfg)(valid, discordBody); !got.Equal(testNow) {
		t.Errorf("occurred_at = %v", got)
	}
}

// TestDiscordOracle: what Inlet's signer (SignTestKey, as `inlet send
// --private-key` uses it) produces is accepted by discordgo, and what
// discordgo's documented scheme produces with the standard library is
// accepted by Inlet, for bodies of every shape.
func TestDiscordOracle(t *testing.T) {
	t.Parallel()
	cfg := discordConfig(discordTestKey)
	v := mustNew(t, cfg)
	pub := discordTestKey.Public().(ed25519.PublicKey)
	now := time.Now()
	seed := hex.EncodeToString(discordTestKey.Seed())
	for _, body := range [][]byte{nil, discordBody, []byte(`{"id":"1","type":3}`), []byte("{\"id\":\"x\",\"type\":2,\"data\":\"\u00e9\\u0000\"}")} {
		h, b, err := SignTestKey(cfg, seed, "1181112222333344999", body, "", now)
		if err != nil {
			t.Fatal(err)
		}
		if !discordgoAccepts(h, b, pub) {
			t.Errorf("discordgo rejects Inlet's signature of %q", b)
		}
		if _, err := v.Verify(&Request{Header: h, Body: b, Now: now}); err != nil {
			t.Errorf("Verify(SignTestKey): %v", err)
		}
		ours := discordSigned(discordTestKey, now, b)
		if !discordgoAccepts(ours, b, pub) {
			t.Errorf("discordgo rejects the documented signature of %q", b)
		}
		if _, err := v.Verify(&Request{Header: ours, Body: b, Now: now}); err != nil {
			t.Errorf("Verify(documented signature): %v", err)
		}
	}
}

// TestDiscordPing: Discord's signed PING (type 1) is answered {"type":1}
// and never stored; a PING with a bad signature is refused like any
// request, as Discord's endpoint check demands.
func TestDiscordPing(t *testing.T) {
	t.Parallel()
	cfg := discordConfig(discordOldTestKey, discordTestKey)
	v := mustNew(t, cfg)
	ping := []byte(`{"application_id":"1181112222333344440","id":"1181112222333344446","token":"cGluZy10b2tlbg","type":1,"user":{"id":"1181112222333344444","username":"tester"},"version":1}`)
	res, err := v.Verify(&Request{Header: discordSigned(discordTestKey, testNow, ping), Body: ping, Now: testNow})
	if err != nil || res.Handshake == nil || res.Handshake.Kind != "ping" || string(res.Handshake.Body) != `{"type":1}` ||
		res.Handshake.ContentType != "application/json" || res.EventID != "" || res.SecretIndex != 1 {
		t.Fatalf("PING: %+v (%+v), %v", res, res.Handshake, err)
	}
	for name, h := range map[string]http.Header{
		"unsigned":  {},
		"wrong key": discordSigned(ed25519.NewKeyFromSeed(testSeed("attacker")), testNow, ping),
		"stale":     discordSigned(discordTestKey, testNow.Add(-time.Hour), ping),
		"other body": discordSigned(discordTestKey, testNow,
			[]byte(`{"type":1}`)),
	} {
		req := &Request{Header: h, Body: ping, Now: testNow}
		res, err := v.Verify(req)
		if err == nil || res.Handshake != nil {
			t.Errorf("%s PING: %+v, %v", name, res, err)
		}
		checkErrorSafe(t, err, cfg.Secrets, req)
	}

	// The probe of `inlet send --handshake`, signed with the private key.
	if _, err := HandshakeTest(cfg, "http://localhost/webhooks/discord", testNow); err == nil || !strings.Contains(err.Error(), "--private-key") {
		t.Errorf("HandshakeTest without a key: %v", err)
	}
	probe, err := HandshakeTestKey(cfg, base64.StdEncoding.EncodeToString(discordTestKey), "http://localhost/webhooks/discord", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if !discordgoAccepts(probe.Header, probe.Body, discordTestKey.Public().(ed25519.PublicKey)) {
		t.Error("discordgo rejects the probe")
	}
	res, err = v.Verify(&Request{Method: probe.Method, Header: probe.Header, Body: probe.Body, URL: probe.URL, Now: testNow})
	if err != nil || res.Handshake == nil {
		t.Fatalf("probe: %+v, %v", res, err)
	}
	if err := probe.Check(http.StatusOK, nil, res.Handshake.Body); err != nil || probe.Kind != "ping" {
		t.Errorf("probe check %s: %v", probe.Kind, err)
	}
	if err := probe.Check(http.StatusOK, nil, []byte(`{"type":4}`)); err == nil {
		t.Error("probe check accepts a wrong answer")
	}
	if _, err := HandshakeTestKey(cfg, hex.EncodeToString(ed25519.NewKeyFromSeed(testSeed("x")).Seed()), "http://localhost/webhooks/discord", testNow); err == nil {
		t.Error("HandshakeTestKey with an unconfigured key succeeded")
	}
}

func TestDiscordKeys(t *testing.T) {
	t.Parallel()
	pub := discordTestKey.Public().(ed25519.PublicKey)
	tests := []struct {
		name   string
		secret string
		want   string // "" for success
	}{
		{"hex", hex.EncodeToString(pub), ""},
		{"upper hex", strings.ToUpper(hex.EncodeToString(pub)), ""},
		{"base64", base64.StdEncoding.EncodeToString(pub), ""},
		{"short", hex.EncodeToString(pub[:31]), "secrets[0]: decodes to 31 bytes, an Ed25519 public key has 32"},
		{"private key", hex.EncodeToString(discordTestKey), "secrets[0]: is 64 bytes, the size of an Ed25519 private key"},
		{"garbage", "not-a-key-at-all!", "secrets[0]: not an Ed25519 public key: neither hex nor base64"},
	}
	for _, tt := range tests {
		checkKeySecret(t, "discord", tt.name, tt.secret, tt.want)
	}
	// The second key is checked too, and named.
	_, err := New(Config{Type: "discord", Secrets: []string{hex.EncodeToString(pub), "zz"}})
	if err == nil || !strings.HasPrefix(err.Error(), "secrets[1]: ") {
		t.Errorf("bad second key: %v", err)
	}
}

// TestDiscordIdentity: the interaction id and type, or the source's own.
func TestDiscordIdentity(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		adjust           func(*Config)
		body             []byte
		wantID, wantType string
		wantErr          error
	}{
		{nil, discordBody, "1181112222333344445", "2", nil},
		{func(c *Config) { c.EventTypeJSON = "data.name" }, discordBody, "1181112222333344445", "hello", nil},
		{nil, []byte(`{"type":2}`), "", "", ErrMalformedPayload},
		{nil, []byte(`{"id":"","type":2}`), "", "", ErrMalformedPayload},
		{func(c *Config) { c.EventIDJSON = "data.id" }, discordBody, "1181112222333344441", "2", nil},
	} {
		cfg := discordConfig(discordTestKey)
		if tt.adjust != nil {
			tt.adjust(&cfg)
		}
		req := &Request{Header: discordSigned(discordTestKey, testNow, tt.body), Body: tt.body, Now: testNow}
		res, err := mustNew(t, cfg).Verify(req)
		if tt.wantErr != nil {
			checkErr(t, err, tt.wantErr, cfg.Secrets, req)
			continue
		}
		if err != nil || res.EventID != tt.wantID || res.EventType != tt.wantType {
			t.Errorf("%s: %+v, %v", tt.body, res, err)
		}
	}
}

// FuzzDiscord: no input panics, every error carries a sentinel and no
// secret, anything accepted is what discordgo accepts, and a genuine
// request with a flipped body bit is refused.
func FuzzDiscord(f *testing.F) {
	valid := discordSigned(discordTestKey, testNow, discordBody)
	f.Add(valid.Get("X-Signature-Ed25519"), valid.Get("X-Signature-Timestamp"), discordBody, uint(0))
	f.Add(strings.Repeat("0", 128), "1", []byte(`{"type":1}`), uint(3))
	f.Add("", "", []byte(nil), uint(1<<20))
	f.Add(strings.Repeat("f", 127), "01", []byte("{"), uint(9))
	cfg := discordConfig(discordOldTestKey, discordTestKey)
	v := mustNew(f, cfg)
	f.Fuzz(func(t *testing.T, sig, ts string, body []byte, flip uint) {
		h := http.Header{"X-Signature-Ed25519": {sig}, "X-Signature-Timestamp": {ts}}
		req := &Request{Header: h, Body: body, IgnoreTolerance: true}
		res, err := v.Verify(req)
		if err == nil {
			pub := []ed25519.PrivateKey{discordOldTestKey, discordTestKey}[res.SecretIndex].Public().(ed25519.PublicKey)
			if !discordgoAccepts(h, body, pub) {
				t.Fatalf("accepted what discordgo rejects: %q %q %q", sig, ts, body)
			}
		} else {
			if Reason(err) == "unknown" {
				t.Fatalf("error without sentinel: %v", err)
			}
			checkErrorSafe(t, err, cfg.Secrets, req)
		}
		genuine := discordSigned(discordTestKey, testNow, body)
		if len(body) > 0 {
			_, err := v.Verify(&Request{Header: genuine, Body: flipBit(body, flip), Now: testNow})
			if !errors.Is(err, ErrSignatureMismatch) {
				t.Fatalf("flipped body: %v", err)
			}
		}
	})
}
