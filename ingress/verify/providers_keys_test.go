//go:build !fuzzonly

package verify

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	svix "github.com/svix/svix-webhooks/go"
)

// TestKeyPresetsSignTestNeedsPrivateKey: a source whose secrets are public
// keys cannot make a test request without the private key, and says so;
// SignTestKey refuses a key of no configured public key, a type that signs
// with its secrets, and never quotes a key.
func TestKeyPresetsSignTestNeedsPrivateKey(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"discord", "sendgrid"} {
		cfg := signTestConfig(typ)
		_, _, err := SignTest(cfg, "evt_1", nil, "", testNow)
		if err == nil || !strings.Contains(err.Error(), "needs a matching private key (inlet send --private-key)") {
			t.Errorf("%s: SignTest error %v", typ, err)
		}
		if _, err := HandshakeTest(cfg, "http://localhost/webhooks/"+typ, testNow); err == nil && typ == "discord" {
			t.Errorf("discord: HandshakeTest without a private key succeeded")
		}
		if !UsesPublicKeys(typ) {
			t.Errorf("UsesPublicKeys(%s) = false", typ)
		}
		other := map[string]string{
			"discord":  hex.EncodeToString(discordOldTestKey.Seed()),
			"sendgrid": ecdsaPrivateB64(t, sendgridOldKey),
		}[typ]
		_, _, err = SignTestKey(cfg, other, "evt_1", nil, "", testNow)
		if err == nil || !strings.Contains(err.Error(), "private key: not the private half of any public key in secrets") {
			t.Errorf("%s: SignTestKey with another key: %v", typ, err)
		}
		checkErrorSafe(t, err, append(slices.Clone(cfg.Secrets), other), nil)
		for _, bad := range []string{"", "not a key at all!", strings.Repeat("ab", 20), base64.StdEncoding.EncodeToString([]byte("short"))} {
			_, _, err := SignTestKey(cfg, bad, "evt_1", nil, "", testNow)
			if err == nil {
				t.Errorf("%s: SignTestKey(%q) succeeded", typ, bad)
			}
			if len(bad) >= 8 && strings.Contains(err.Error(), bad) {
				t.Errorf("%s: error quotes the key: %v", typ, err)
			}
		}
		// The other kind's key.
		wrongKind := map[string]string{"discord": ecdsaPrivateB64(t, sendgridTestKey), "sendgrid": hex.EncodeToString(discordTestKey.Seed())}[typ]
		if _, _, err := SignTestKey(cfg, wrongKind, "evt_1", nil, "", testNow); err == nil {
			t.Errorf("%s: SignTestKey with the other scheme's key succeeded", typ)
		} else {
			checkErrorSafe(t, err, []string{wrongKind}, nil)
		}
	}
	for _, typ := range []string{"okta", "clerk", "github", "meta"} {
		cfg := signTestConfig(typ)
		if UsesPublicKeys(typ) {
			t.Errorf("UsesPublicKeys(%s) = true", typ)
		}
		_, _, err := SignTestKey(cfg, hex.EncodeToString(discordTestKey.Seed()), "evt_1", nil, "", testNow)
		if err == nil || !strings.Contains(err.Error(), "signs with its secrets") {
			t.Errorf("%s: SignTestKey = %v, want a refusal", typ, err)
		}
	}
	if _, err := HandshakeTestKey(signTestConfig("okta"), hex.EncodeToString(discordTestKey.Seed()), "http://localhost/x", testNow); err == nil {
		t.Error("HandshakeTestKey for okta succeeded")
	}
	if _, _, err := SignTestKey(signTestConfig("discord"), hex.EncodeToString(discordTestKey.Seed()), "", nil, "", testNow); err == nil {
		t.Error("SignTestKey with an empty id succeeded")
	}
}

// TestKeyPresetDocs: every preset of this file documents itself, and its
// copy-ready source builds a verifier once its variables are filled in.
func TestKeyPresetDocs(t *testing.T) {
	t.Parallel()
	for _, p := range keyProviders {
		d := p.doc
		if d.Provider == "" || d.Headers == "" || d.Signed == "" || d.ID == "" || d.Type == "" || d.Occurred == "" || d.Docs == "" || d.Source == "" {
			t.Errorf("%s: PresetDoc has an empty field: %+v", p.name, d)
		}
		if (len(p.handshakes) > 0) != (d.Handshake != "") {
			t.Errorf("%s: Handshake %q with %d handshakes", p.name, d.Handshake, len(p.handshakes))
		}
		if !strings.HasPrefix(d.Source, "type: "+p.name+"\n") || !strings.HasPrefix(d.Docs, "https://") {
			t.Errorf("%s: Source %q, Docs %q", p.name, d.Source, d.Docs)
		}
		if p.sample == nil {
			t.Errorf("%s: no sample", p.name)
		}
	}
}

// TestKeyPresetsSignTestKeyForms: the private key forms SignTestKey takes.
func TestKeyPresetsSignTestKeyForms(t *testing.T) {
	t.Parallel()
	seed := discordTestKey.Seed()
	pkcs8, err := x509.MarshalPKCS8PrivateKey(discordTestKey)
	if err != nil {
		t.Fatal(err)
	}
	ecPKCS8, _ := x509.MarshalPKCS8PrivateKey(sendgridTestKey)
	ecSEC1, err := x509.MarshalECPrivateKey(sendgridTestKey)
	if err != nil {
		t.Fatal(err)
	}
	pemOf := func(typ string, der []byte) string {
		return "-----BEGIN " + typ + "-----\n" + base64.StdEncoding.EncodeToString(der) + "\n-----END " + typ + "-----\n"
	}
	tests := []struct {
		typ, key string
	}{
		{"discord", hex.EncodeToString(seed)},
		{"discord", strings.ToUpper(hex.EncodeToString(seed))},
		{"discord", hex.EncodeToString(discordTestKey)},
		{"discord", base64.StdEncoding.EncodeToString(seed)},
		{"discord", base64.StdEncoding.EncodeToString(discordTestKey)},
		{"discord", pemOf("PRIVATE KEY", pkcs8)},
		{"sendgrid", base64.StdEncoding.EncodeToString(ecPKCS8)},
		{"sendgrid", base64.StdEncoding.EncodeToString(ecSEC1)},
		{"sendgrid", pemOf("PRIVATE KEY", ecPKCS8)},
		{"sendgrid", pemOf("EC PRIVATE KEY", ecSEC1)},
	}
	for i, tt := range tests {
		cfg := signTestConfig(tt.typ)
		h, body, err := SignTestKey(cfg, tt.key, "evt_form", nil, "", testNow)
		if err != nil {
			t.Errorf("#%d %s: SignTestKey: %v", i, tt.typ, err)
			continue
		}
		if _, err := mustNew(t, cfg).Verify(&Request{Header: h, Body: body, Now: testNow}); err != nil {
			t.Errorf("#%d %s: Verify: %v", i, tt.typ, err)
		}
	}
	// A 64-byte key whose public half is not its seed's.
	bad := slices.Clone([]byte(discordTestKey))
	copy(bad[32:], discordOldTestKey[32:])
	if _, _, err := SignTestKey(signTestConfig("discord"), hex.EncodeToString(bad), "e", nil, "", testNow); err == nil || !strings.Contains(err.Error(), "public half") {
		t.Errorf("inconsistent Ed25519 private key: %v", err)
	}
}

// svixOracle is the svix-signature value svix's own Go library
// (github.com/svix/svix-webhooks/go v1.44.0) signs.
func svixOracle(t testing.TB, secret, msgID string, ts time.Time, body []byte) string {
	t.Helper()
	wh, err := svix.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign(msgID, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// TestSvixPresets: Clerk and Resend are Standard Webhooks as Svix sends
// them (svix-* headers), checked against Svix's library both ways and
// against Svix's documented example.
func TestSvixPresets(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"clerk", "resend"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			p := presets[typ]
			_, body := p.sample("", testNow)
			cfg := Config{Type: typ, Secrets: []string{standardOldSecret, standardSecret}}
			v := mustNew(t, cfg)
			ts := unixString(testNow)
			hdr := func(id, ts, sig string) http.Header { return standardHeadersOf("svix", id, ts, sig) }
			valid := svixOracle(t, standardSecret, standardMsgID, testNow, body)
			at := func(d time.Duration) http.Header {
				return hdr(standardMsgID, unixString(testNow.Add(d)), svixOracle(t, standardSecret, standardMsgID, testNow.Add(d), body))
			}
			wantType := map[string]string{"clerk": "user.created", "resend": "email.sent"}[typ]
			cases := []struct {
				name   string
				header http.Header
				body   []byte
				want   error
			}{
				{"valid, rotated secret second", hdr(standardMsgID, ts, valid), body, nil},
				{"tampered body", hdr(standardMsgID, ts, valid), append(slices.Clone(body), ' '), ErrSignatureMismatch},
				{"stale", at(-6 * time.Minute), body, ErrTimestampOutsideTolerance},
				{"future", at(6 * time.Minute), body, ErrTimestampOutsideTolerance},
				{"wrong secret", hdr(standardMsgID, ts, svixOracle(t, "whsec_"+base64.StdEncoding.EncodeToString([]byte("another secret key")), standardMsgID, testNow, body)), body, ErrSignatureMismatch},
				{"other id", hdr("msg_other", ts, valid), body, ErrSignatureMismatch},
				{"no signature", hdr(standardMsgID, ts, ""), body, ErrSignatureMissing},
				{"no id", hdr("", ts, valid), body, ErrSignatureMissing},
				{"no timestamp", hdr(standardMsgID, "", valid), body, ErrSignatureMissing},
				{"malformed signature", hdr(standardMsgID, ts, "v1,not base64!"), body, ErrSignatureMalformed},
				{"malformed timestamp", hdr(standardMsgID, "17e8", valid), body, ErrSignatureMalformed},
			}
			for _, c := range cases {
				req := &Request{Header: c.header, Body: c.body, Now: testNow}
				res, err := v.Verify(req)
				if c.want != nil {
					checkErr(t, err, c.want, cfg.Secrets, req)
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if res.EventID != standardMsgID || res.EventType != wantType || res.SecretIndex != 1 {
					t.Errorf("%s: %+v", c.name, res)
				}
			}

			// Ours signs what Svix's library verifies, with svix-* headers.
			h, sbody, err := SignTest(Config{Type: typ, Secrets: []string{standardSecret}}, "msg_inlet_1", nil, "", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if h.Get("Svix-Id") != "msg_inlet_1" || h.Get("Webhook-Signature") != "" {
				t.Errorf("SignTest headers %v", h)
			}
			wh, _ := svix.NewWebhook(standardSecret)
			if err := wh.Verify(sbody, h); err != nil {
				t.Errorf("svix Verify(SignTest): %v", err)
			}

			// occurred_at from the body.
			want := map[string]time.Time{"clerk": time.UnixMilli(1654012591835).UTC(), "resend": testNow.UTC()}[typ]
			if got := NewOccurredAt(cfg)(nil, body); !got.Equal(want) {
				t.Errorf("occurred_at = %v, want %v", got, want)
			}
		})
	}

	// Svix's documented example (docs.svix.com/receiving/verifying-payloads/how-manual):
	// secret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, msg_p5jXN8AQM9LWM0D4loKWxJek,
	// timestamp 1614265330, body {"test": 2432232314}.
	cfg := Config{Type: "clerk", Secrets: []string{standardSecret}}
	h := standardHeadersOf("svix", "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	res, err := mustNew(t, cfg).Verify(&Request{Header: h, Body: []byte(`{"test": 2432232314}`), Now: time.Unix(1614265330, 0)})
	if err != nil || res.EventID != "msg_p5jXN8AQM9LWM0D4loKWxJek" {
		t.Errorf("Svix's documented example: %+v, %v", res, err)
	}
	// A whpk_ secret fails New with a clear error; a bad whsec_ too.
	if _, err := New(Config{Type: "resend", Secrets: []string{"whsec_not*base64"}}); err == nil || !strings.Contains(err.Error(), "secrets[0]: not valid base64") {
		t.Errorf("bad secret: %v", err)
	}
}

// TestKeyPresetsRefuseNonPost: a GET that is no handshake is refused like
// a missing signature; a GET handshake of a preset that has none too.
func TestKeyPresetsRefuseNonPost(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"discord", "sendgrid", "okta", "microsoft-graph", "clerk", "resend"} {
		cfg := signTestConfig(typ)
		v := mustNew(t, cfg)
		req := &Request{Method: http.MethodGet, Header: http.Header{}, Now: testNow, URL: "http://x/webhooks/" + typ}
		_, err := v.Verify(req)
		checkErr(t, err, ErrSignatureMissing, cfg.Secrets, req)
		if got, want := AnswersGET(v), typ == "okta"; got != want {
			t.Errorf("%s: AnswersGET = %v", typ, got)
		}
	}
}

// TestWithPathArrays: SignTest puts a configured id into arrays too
// (SendGrid's batch: 0.sg_event_id), as lookupJSON reads it.
func TestWithPathArrays(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body, path, want string
	}{
		{`[{"a":1}]`, "0.sg_event_id", `[{"a":1,"sg_event_id":"v"}]`},
		{`{"list":[{"x":1},{"x":2}]}`, "list.1.id", `{"list":[{"x":1},{"id":"v","x":2}]}`},
		{`{"list":[{"x":1}]}`, "list.id", `{"list":{"id":"v"}}`},
		{`{"list":[{"x":1}]}`, "list.3.id", `{"list":{"3":{"id":"v"}}}`},
		{`[1,2]`, "1", `[1,"v"]`},
		{`[1]`, "0.a", `[{"a":"v"}]`},
		{`[1]`, "2", ""},
		{`[1]`, "x", ""},
		{`"str"`, "a", ""},
	}
	for _, tt := range tests {
		got, err := withPath([]byte(tt.body), false, strings.Split(tt.path, "."), "v")
		if tt.want == "" {
			if err == nil {
				t.Errorf("withPath(%s, %s) = %s, want an error", tt.body, tt.path, got)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("withPath(%s, %s) = %s, %v; want %s", tt.body, tt.path, got, err, tt.want)
		}
		if v, ok := lookupJSON(got, strings.Split(tt.path, ".")); !ok || v != "v" {
			t.Errorf("lookupJSON(%s, %s) = %q, %v", got, tt.path, v, ok)
		}
	}
}

// TestDiscordInteractionReply: a verified interaction carries the deferred
// response Discord needs by interaction type; a PING is a handshake, not an
// event with a reply.
func TestDiscordInteractionReply(t *testing.T) {
	t.Parallel()
	cfg := signTestConfig("discord")
	v := mustNew(t, cfg)
	for _, tt := range []struct {
		typ  int
		want string
	}{{2, `{"type":5}`}, {3, `{"type":6}`}, {4, `{"data":{"choices":[]},"type":8}`}, {5, `{"type":5}`}} {
		body := fmt.Appendf(nil, `{"id":"1181112222333344%03d","type":%d,"token":"t","version":1}`, tt.typ, tt.typ)
		h, body, err := SignTestKey(cfg, testPrivateKey(t, "discord"), "unused", body, "", testNow)
		if err != nil {
			t.Fatal(err)
		}
		res, err := v.Verify(&Request{Header: h, Body: body, Now: testNow})
		if err != nil || res.Reply == nil || string(res.Reply.Body) != tt.want || res.Handshake != nil {
			t.Errorf("type %d: %+v %v, want reply %s", tt.typ, res, err, tt.want)
		}
	}
}
