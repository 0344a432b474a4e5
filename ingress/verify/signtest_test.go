package verify

import (
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"sync"
	"testing"
)

// signTestConfig is a valid source configuration of each type, with a
// rotated-out secret first where the scheme allows one to sign.
func signTestConfig(typ string) Config {
	if p := presets[typ]; p != nil {
		c := Config{Type: typ, Secrets: []string{"test-secret-for-" + typ}}
		if p.needsVerifyToken {
			c.VerifyToken = "test-verify-token"
		}
		return presetTestConfig(p, c)
	}
	switch typ {
	case "standard-webhooks":
		return Config{Type: typ, Secrets: []string{standardSecret, standardOldSecret}}
	case "hmac":
		return Config{Type: typ, Secrets: []string{hmacSecret}, HMAC: HMACConfig{Header: "X-Acme-Signature", Prefix: "sha256=", TimestampHeader: "X-Acme-Timestamp"}}
	case "twilio":
		return Config{Type: typ, Secrets: []string{twilioToken}}
	default:
		return Config{Type: typ, Secrets: []string{"test-secret-for-" + typ}}
	}
}

// signsInBody reports whether typ's signature travels in the body
// (Mailgun), so that signing changes a given body.
func signsInBody(typ string) bool {
	p := presets[typ]
	return p != nil && p.hmac.SignatureJSON != ""
}

// bodyUnsigned reports whether typ's signature leaves the body unsigned
// (Mailgun's event-data), so that a changed body may still verify.
func bodyUnsigned(typ string) bool {
	p := presets[typ]
	return p != nil && p.hmac.bodyUnsigned
}

// TestSignTest checks that every scheme's SignTest output passes its own
// verifier with the given id, with a sample body and with a given one.
func TestSignTest(t *testing.T) {
	t.Parallel()
	for _, typ := range append(Types(), "svix") {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			cfg := signTestConfig(typ)
			if typ == "svix" {
				cfg = signTestConfig("standard-webhooks")
				cfg.Type = "svix"
			}
			v := mustNew(t, cfg)
			h, body, err := signTestAny(t, cfg, "evt_test_42", nil, twilioPublicURL, testNow)
			if err != nil {
				t.Fatalf("SignTest: %v", err)
			}
			if len(body) == 0 || h.Get("Content-Type") == "" {
				t.Fatalf("SignTest body %q, headers %q", body, h)
			}
			res, err := v.Verify(&Request{Header: h, Body: body, URL: twilioPublicURL, Now: testNow})
			if err != nil {
				t.Fatalf("Verify(SignTest): %v", err)
			}
			wantID := "evt_test_42"
			if p := presets[typ]; typ == "hmac" || (p != nil && p.idHeader == "" && p.idJSON == "") {
				wantID = syntheticID(body) // no id of the provider's own
			}
			if typ == "hubspot" {
				wantID = hubspotBatchID(body) // the batch's events' ids
			}
			if res = asBodyHash(res, body); res.EventID != wantID || res.SecretIndex != 0 {
				t.Errorf("Verify(SignTest) = %+v, want id %s, secret 0", res, wantID)
			}

			// A configured id location gets the id too.
			idPath := "meta.trace.id"
			if p := presets[typ]; p != nil && p.sample != nil {
				if _, b := p.sample("x", testNow); len(b) > 0 && b[0] == '[' {
					idPath = "0." + idPath // a batch (HubSpot's)
				}
			}
			for _, adjust := range []func(*Config){
				func(c *Config) { c.EventIDHeader = "X-Test-Id" },
				func(c *Config) { c.EventIDJSON = idPath },
			} {
				c := cfg
				adjust(&c)
				h, body, err := signTestAny(t, c, "evt_custom", nil, twilioPublicURL, testNow)
				if err != nil {
					t.Fatalf("SignTest custom id: %v", err)
				}
				res, err := mustNew(t, c).Verify(&Request{Header: h, Body: body, URL: twilioPublicURL, Now: testNow})
				if err != nil || res.EventID != "evt_custom" {
					t.Errorf("custom id %+v: Verify = %+v, %v", c, res, err)
				}
			}

			// A given body is signed as is. It carries what a scheme needs
			// in the body: the id where a preset reads it, Linear's signed
			// webhookTimestamp (testNow in ms), Graph's clientState items.
			given := testBody(t, cfg, "evt_given", []byte(`{"id":"evt_given","event_id":"evt_given","type":"x","webhookTimestamp":1700000000000}`))
			u := twilioPublicURL
			switch typ {
			case "twilio":
				given = []byte("MessageSid=SM1&MessageStatus=sent")
			case "hubspot": // a batch
				given = []byte(`[{"eventId":1,"subscriptionType":"x"}]`)
			}
			h, body, err = signTestAny(t, cfg, "evt_given", given, u, testNow)
			if err != nil {
				t.Fatalf("SignTest given body: %v", err)
			}
			if string(body) != string(given) && !signsInBody(typ) {
				t.Errorf("SignTest changed the given body to %q", body)
			}
			if _, err := v.Verify(&Request{Header: h, Body: body, URL: u, Now: testNow}); err != nil {
				t.Errorf("Verify(SignTest given body): %v", err)
			}
		})
	}
}

func TestSignTestErrors(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	whpk := "whpk_" + base64.StdEncoding.EncodeToString(pub)
	tests := []struct {
		name string
		cfg  Config
		id   string
		body []byte
		url  string
		want string
	}{
		{"bad config", Config{Type: "nope", Secrets: []string{"s3cret-value"}}, "e", nil, "", `type "nope": unknown`},
		{"empty id", signTestConfig("stripe"), "", nil, "", "id: must not be empty"},
		{"only public keys", Config{Type: "standard-webhooks", Secrets: []string{whpk}}, "e", nil, "", "secrets: only \"whpk_\" public keys"},
		{"twilio without URL", signTestConfig("twilio"), "e", nil, "", "url: required for twilio"},
		{"twilio JSON without bodySHA256", signTestConfig("twilio"), "e", []byte(`{"a":1}`), twilioPublicURL, "url: a JSON body for twilio needs the bodySHA256"},
		{"id path into a non-object body", func() Config { c := signTestConfig("stripe"); c.EventIDJSON = "a"; return c }(), "e", nil, "", ""},
	}
	for _, tt := range tests {
		_, _, err := SignTest(tt.cfg, tt.id, tt.body, tt.url, testNow)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: SignTest error %v, want %q", tt.name, err, tt.want)
		}
		checkErrorSafe(t, err, tt.cfg.Secrets, nil)
	}
	// With public keys listed first, SignTest signs with the whsec_ secret
	// and the verifier reports its index.
	cfg := Config{Type: "standard-webhooks", Secrets: []string{whpk, standardSecret}}
	h, body, err := SignTest(cfg, "msg_x", nil, "", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := mustNew(t, cfg).Verify(&Request{Header: h, Body: body, Now: testNow}); err != nil || res.SecretIndex != 1 {
		t.Errorf("Verify = %+v, %v; want secret 1", res, err)
	}
}

// TestConcurrentVerifyAll shares one Verifier of every scheme across
// goroutines; run under -race it checks the pooled MAC states.
func TestConcurrentVerifyAll(t *testing.T) {
	t.Parallel()
	for _, typ := range Types() {
		cfg := signTestConfig(typ)
		h, body, err := signTestAny(t, cfg, "evt_concurrent", nil, twilioPublicURL, testNow)
		if err != nil {
			t.Fatal(err)
		}
		v := mustNew(t, cfg)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for i := range 100 {
					req := &Request{Header: h, Body: body, URL: twilioPublicURL, Now: testNow}
					if i%2 == 1 {
						req.Body = flipBit(body, uint(i))
					}
					_, err := v.Verify(req)
					if (err == nil) != (i%2 == 0) && signsBody(typ) && !bodyUnsigned(typ) {
						t.Errorf("%s: Verify #%d: %v", typ, i, err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
}
