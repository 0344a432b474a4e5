package ingress_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// metaSource is a Meta source with the verify token its handshake needs.
var metaSource = verify.Config{Type: "meta", Secrets: []string{"meta-app-secret"}, VerifyToken: "meta-verify-token"}

// A provider's endpoint check is answered before anything is stored, is
// counted by source and kind, and a check with a bad token is refused like
// a bad signature. GET reaches only the sources whose provider checks with
// a GET.
func TestHandshakesAreAnsweredNotStored(t *testing.T) {
	t.Parallel()
	b := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Sources = append(c.Sources, sources.Source{Name: "meta", Config: metaSource})
	})
	probe, err := verify.HandshakeTest(metaSource, b.url+"/webhooks/meta", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	code, answer, header := sendProbe(t, probe)
	if err := probe.Check(code, header, []byte(answer)); err != nil {
		t.Fatal(err)
	}
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") || header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("answer headers %v, want text/plain and nosniff", header)
	}
	var n int
	if err := b.admin.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'meta'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("events stored by the handshake: %d, %v", n, err)
	}
	handshakes, err := testutil.GatherAndCount(b.reg, "inlet_ingress_handshakes_total")
	if err != nil || handshakes == 0 {
		t.Fatalf("inlet_ingress_handshakes_total series: %d, %v", handshakes, err)
	}
	if got := counterValue(t, b, "inlet_ingress_handshakes_total", map[string]string{"source": "meta", "kind": "subscribe"}); got != 1 {
		t.Errorf("handshakes_total{meta,subscribe} = %v, want 1", got)
	}

	// A wrong verify token: refused as a bad signature would be.
	bad := strings.Replace(probe.URL, "meta-verify-token", "guessed-token", 1)
	req, _ := http.NewRequest(http.MethodGet, bad, nil)
	if code, answer, _ := do(t, req); code != http.StatusUnauthorized || !strings.Contains(answer, `"signature_mismatch"`) {
		t.Errorf("bad verify token: %d %s", code, answer)
	}
	// A GET that is no handshake, to a source that takes GET handshakes.
	req, _ = http.NewRequest(http.MethodGet, b.url+"/webhooks/meta", nil)
	if code, answer, _ := do(t, req); code != http.StatusUnauthorized || !strings.Contains(answer, `"signature_missing"`) {
		t.Errorf("plain GET to meta: %d %s", code, answer)
	}
	// GET to a provider that never sends one.
	req, _ = http.NewRequest(http.MethodGet, b.url+"/webhooks/github?hub.challenge=1", nil)
	if code, answer, header := do(t, req); code != http.StatusMethodNotAllowed || header.Get("Allow") != "POST" || !strings.Contains(answer, "method_not_allowed") {
		t.Errorf("GET to github: %d %s %v", code, answer, header)
	}

	// The provider's events still arrive by POST and are stored.
	h, body, err := verify.SignTest(metaSource, "wamid.test-1", nil, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequest(http.MethodPost, b.url+"/webhooks/meta", bytes.NewReader(body))
	req.Header = h
	if code, answer, _ := do(t, req); code != http.StatusOK || !strings.Contains(answer, `"stored"`) {
		t.Fatalf("meta event: %d %s", code, answer)
	}
}

// Dropbox checks the endpoint with an unsigned GET ?challenge=, echoed as
// text; WooCommerce pings a new webhook with an unsigned POST webhook_id=N,
// answered 200. Neither is stored, and each is counted by its kind.
func TestUnsignedHandshakesAreAnsweredNotStored(t *testing.T) {
	t.Parallel()
	dropbox := verify.Config{Type: "dropbox", Secrets: []string{"dropbox-app-secret"}}
	woo := verify.Config{Type: "woocommerce", Secrets: []string{"woo-webhook-secret"}}
	b := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Sources = append(c.Sources, sources.Source{Name: "dropbox", Config: dropbox}, sources.Source{Name: "woo", Config: woo})
	})
	for _, tc := range []struct {
		source, kind string
		cfg          verify.Config
	}{{"dropbox", "challenge", dropbox}, {"woo", "ping", woo}} {
		probe, err := verify.HandshakeTest(tc.cfg, b.url+"/webhooks/"+tc.source, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		code, answer, header := sendProbe(t, probe)
		if err := probe.Check(code, header, []byte(answer)); err != nil {
			t.Fatalf("%s: %v", tc.source, err)
		}
		if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") || header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: answer headers %v, want text/plain and nosniff", tc.source, header)
		}
		if got := counterValue(t, b, "inlet_ingress_handshakes_total", map[string]string{"source": tc.source, "kind": tc.kind}); got != 1 {
			t.Errorf("handshakes_total{%s,%s} = %v, want 1", tc.source, tc.kind, got)
		}
	}
	var n int
	if err := b.admin.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.events WHERE provider IN ('dropbox', 'woo')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("events stored by the handshakes: %d, %v", n, err)
	}
	// GET reaches Dropbox, not WooCommerce.
	req, _ := http.NewRequest(http.MethodGet, b.url+"/webhooks/woo?challenge=1", nil)
	if code, _, header := do(t, req); code != http.StatusMethodNotAllowed || header.Get("Allow") != "POST" {
		t.Errorf("GET to woocommerce: %d %v", code, header)
	}

	// Their events still arrive by POST and are stored.
	for _, tc := range []struct {
		source string
		cfg    verify.Config
	}{{"dropbox", dropbox}, {"woo", woo}} {
		h, body, err := verify.SignTest(tc.cfg, "evt-e2e-1", nil, "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, b.url+"/webhooks/"+tc.source, bytes.NewReader(body))
		req.Header = h
		if code, answer, _ := do(t, req); code != http.StatusOK || !strings.Contains(answer, `"stored"`) {
			t.Fatalf("%s event: %d %s", tc.source, code, answer)
		}
	}
}

// counterValue reads one series of a counter from the bundle's registry.
func counterValue(t *testing.T, b *testBundle, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// timedSources are the timed providers whose endpoint check ingress answers:
// Zoom's and Twitch's signed POSTs and X's CRC GET.
var timedSources = []sources.Source{
	{Name: "zoom", Config: verify.Config{Type: "zoom", Secrets: []string{"zoom-secret-token"}}},
	{Name: "twitch", Config: verify.Config{Type: "twitch", Secrets: []string{"twitch-eventsub-secret"}}},
	{Name: "x", Config: verify.Config{Type: "x", Secrets: []string{"x-consumer-secret"}}},
}

// Zoom's url_validation, Twitch's callback verification and X's CRC are
// answered over real HTTP, counted by source and kind, and store nothing; a
// forged one is refused as a bad signature. A Twitch revocation is an
// event, stored under "revocation.<subscription type>".
func TestTimedProviderHandshakes(t *testing.T) {
	t.Parallel()
	b := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Sources = append(c.Sources, timedSources...)
	})
	for i, tt := range []struct{ kind, contentType, forged string }{
		{"url_validation", "application/json", `"signature_mismatch"`},  // zoom
		{"callback_verification", "text/plain", `"signature_mismatch"`}, // twitch
		{"crc", "application/json", `"signature_malformed"`},            // x
	} {
		src := timedSources[i]
		t.Run(src.Name, func(t *testing.T) {
			probe, err := verify.HandshakeTest(src.Config, b.url+"/webhooks/"+src.Name, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			code, answer, header := sendProbe(t, probe)
			if err := probe.Check(code, header, []byte(answer)); err != nil {
				t.Fatal(err)
			}
			if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, tt.contentType) {
				t.Errorf("answer Content-Type %q, want %s", ct, tt.contentType)
			}
			if got := counterValue(t, b, "inlet_ingress_handshakes_total", map[string]string{"source": src.Name, "kind": tt.kind}); got != 1 {
				t.Errorf("handshakes_total{%s,%s} = %v, want 1", src.Name, tt.kind, got)
			}

			// Forged: Zoom's and Twitch's signed with a guessed secret;
			// X's CRC asked to sign an event body.
			forged := src.Config
			forged.Secrets = []string{"guessed-secret"}
			fp, err := verify.HandshakeTest(forged, b.url+"/webhooks/"+src.Name, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if src.Config.Type == "x" {
				fp.URL = b.url + "/webhooks/x?crc_token=" + url.QueryEscape(`{"for_user_id":"1","tweet_create_events":[]}`)
			}
			if code, answer, _ := sendProbe(t, fp); code != http.StatusUnauthorized || !strings.Contains(answer, tt.forged) {
				t.Errorf("forged %s: %d %s", tt.kind, code, answer)
			}
			if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events WHERE provider = $1`, src.Name); n != 0 {
				t.Errorf("%d events stored by %s handshakes", n, src.Name)
			}
		})
	}

	// A Twitch revocation is stored, typed apart from notifications.
	twitch := timedSources[1].Config
	revoked := []byte(`{"subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","status":"authorization_revoked","type":"channel.follow","cost":1,"version":"2","condition":{"broadcaster_user_id":"12826"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},"created_at":"2019-11-16T10:11:12.634234626Z"}}`)
	for _, m := range []struct {
		id, msgType string
		body        []byte
		wantType    string
	}{
		{"twitch-msg-notification", "notification", nil, "channel.follow"},
		{"twitch-msg-revocation", "revocation", revoked, "revocation.channel.follow"},
	} {
		h, body, err := verify.SignTest(twitch, m.id, m.body, "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		h.Set("Twitch-Eventsub-Message-Type", m.msgType) // not signed by Twitch
		req, _ := http.NewRequest(http.MethodPost, b.url+"/webhooks/twitch", bytes.NewReader(body))
		req.Header = h
		if code, answer, _ := do(t, req); code != http.StatusOK || !strings.Contains(answer, `"stored"`) {
			t.Fatalf("twitch %s: %d %s", m.msgType, code, answer)
		}
		var typ string
		if err := b.admin.QueryRow(context.Background(), `SELECT event_type FROM webhook_ingress.events WHERE provider = 'twitch' AND external_event_id = $1`, m.id).Scan(&typ); err != nil || typ != m.wantType {
			t.Errorf("twitch %s stored with type %q (%v), want %q", m.msgType, typ, err, m.wantType)
		}
	}
}

// The handshakes of the presets over the key and token schemes, end to
// end: Discord's signed PING (answered with the private key's probe),
// Okta's verification GET (only with the hook's Authorization) and
// Microsoft Graph's validationToken POST, none of them stored; their
// events are stored, Okta's Authorization as its digest.
func TestKeyPresetHandshakes(t *testing.T) {
	t.Parallel()
	discordKey := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	discord := verify.Config{Type: "discord", Secrets: []string{hex.EncodeToString(discordKey.Public().(ed25519.PublicKey))}}
	discordPrivate := hex.EncodeToString(discordKey.Seed())
	okta := verify.Config{Type: "okta", Secrets: []string{"Bearer okta-hook-secret-e2e"}}
	graph := verify.Config{Type: "microsoft-graph", Secrets: []string{"graph-client-state-e2e"}}
	b := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Sources = append(c.Sources,
			sources.Source{Name: "discord", Config: discord},
			sources.Source{Name: "okta", Config: okta},
			sources.Source{Name: "graph", Config: graph})
	})
	send := func(method, url string, h http.Header, body []byte) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = h.Clone()
		return do(t, req)
	}
	probes := map[string]*verify.HandshakeProbe{}
	var err error
	if probes["discord"], err = verify.HandshakeTestKey(discord, discordPrivate, b.url+"/webhooks/discord", time.Now()); err != nil {
		t.Fatal(err)
	}
	if probes["okta"], err = verify.HandshakeTest(okta, b.url+"/webhooks/okta", time.Now()); err != nil {
		t.Fatal(err)
	}
	if probes["graph"], err = verify.HandshakeTest(graph, b.url+"/webhooks/graph", time.Now()); err != nil {
		t.Fatal(err)
	}
	for source, probe := range probes {
		code, answer, header := send(probe.Method, probe.URL, probe.Header, probe.Body)
		if err := probe.Check(code, header, []byte(answer)); err != nil {
			t.Errorf("%s: %v", source, err)
		}
		if got := counterValue(t, b, "inlet_ingress_handshakes_total", map[string]string{"source": source, "kind": probe.Kind}); got != 1 {
			t.Errorf("handshakes_total{%s,%s} = %v, want 1", source, probe.Kind, got)
		}
	}

	// Refused like a bad signature: a PING signed with another key, the
	// verification with a wrong Authorization.
	ping := probes["discord"]
	forged := ping.Header.Clone()
	forged.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32)), append([]byte(forged.Get("X-Signature-Timestamp")), ping.Body...))))
	if code, answer, _ := send(http.MethodPost, ping.URL, forged, ping.Body); code != http.StatusUnauthorized || !strings.Contains(answer, `"signature_mismatch"`) {
		t.Errorf("forged PING: %d %s", code, answer)
	}
	verification := probes["okta"]
	wrong := verification.Header.Clone()
	wrong.Set("Authorization", "Bearer guessed")
	if code, answer, _ := send(http.MethodGet, verification.URL, wrong, nil); code != http.StatusUnauthorized || !strings.Contains(answer, `"signature_mismatch"`) {
		t.Errorf("verification with a wrong Authorization: %d %s", code, answer)
	}
	wrong.Del("Authorization")
	if code, answer, _ := send(http.MethodGet, verification.URL, wrong, nil); code != http.StatusUnauthorized || !strings.Contains(answer, `"signature_missing"`) {
		t.Errorf("verification without Authorization: %d %s", code, answer)
	}
	// Graph validates by POST: a GET is not allowed.
	if code, _, _ := send(http.MethodGet, probes["graph"].URL, http.Header{}, nil); code != http.StatusMethodNotAllowed {
		t.Errorf("GET validationToken to graph: %d", code)
	}
	if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events WHERE provider IN ('discord', 'okta', 'graph')`); n != 0 {
		t.Fatalf("handshakes stored %d events", n)
	}

	// Their events are stored. A Discord interaction is answered with the
	// deferred interaction response Discord needs (not Inlet's status), the
	// same again for its duplicate; Graph's second delivery of the same
	// bytes is a new event (per-delivery ids).
	for source, sign := range map[string]func() (http.Header, []byte, error){
		"discord": func() (http.Header, []byte, error) {
			return verify.SignTestKey(discord, discordPrivate, "1181112222333344777", nil, "", time.Now())
		},
		"okta": func() (http.Header, []byte, error) {
			return verify.SignTest(okta, "okta-event-e2e", nil, "", time.Now())
		},
		"graph": func() (http.Header, []byte, error) {
			return verify.SignTest(graph, "graph-event-e2e", nil, "", time.Now())
		},
	} {
		h, body, err := sign()
		if err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		want := `"stored"`
		if source == "discord" {
			want = `{"type":5}`
		}
		for range 2 {
			if code, answer, _ := send(http.MethodPost, b.url+"/webhooks/"+source, h, body); code != http.StatusOK || !strings.Contains(answer, want) {
				t.Errorf("%s event: %d %s, want %s", source, code, answer, want)
			}
			if source != "graph" { // Graph's deliveries have ids of their own: stored again
				want = strings.Replace(want, `"stored"`, `"duplicate"`, 1)
			}
		}
	}
	var id, typ string
	var headers map[string][]string
	if err := b.admin.QueryRow(context.Background(), `SELECT external_event_id, event_type, headers FROM webhook_ingress.events WHERE provider = 'okta'`).Scan(&id, &typ, &headers); err != nil {
		t.Fatal(err)
	}
	if auth := headers["Authorization"]; id != "okta-event-e2e" || typ != "user.lifecycle.activate" || len(auth) != 1 || !strings.HasPrefix(auth[0], "sha256:") || strings.Contains(auth[0], "okta-hook-secret") {
		t.Errorf("stored okta event %s %s, Authorization %q", id, typ, headers["Authorization"])
	}
	if err := b.admin.QueryRow(context.Background(), `SELECT external_event_id, event_type FROM webhook_ingress.events WHERE provider = 'discord'`).Scan(&id, &typ); err != nil || id != "1181112222333344777" || typ != "2" {
		t.Errorf("stored discord event %s %s, %v", id, typ, err)
	}
}

// sendProbe sends a handshake probe as its provider would and returns the
// answer's status, body and header.
func sendProbe(t *testing.T, probe *verify.HandshakeProbe) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(probe.Method, probe.URL, bytes.NewReader(probe.Body))
	req.Header = probe.Header
	return do(t, req)
}
