package relay_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testlog"
	"github.com/inlet-dev/inlet/relay"
	"github.com/inlet-dev/inlet/schema"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	stripeSecret = "whsec_relay_test_secret"
	slackSecret  = "slack-relay-test-secret"
	relaySecret  = "relay-secret-0123456789"
	// canary is in bodies and header values; no log line may hold it.
	canary = "CANARY-7f3a9c"
)

// bundle is a real ingress on a real database behind TLS, and a relay in
// front of it.
type bundle struct {
	admin      *pgxpool.Pool
	ingressURL string // https, the customer's ingress
	caFile     string // its certificate
	relayURL   string
	relayLogs  *testlog.Buffer
	ingestLogs *testlog.Buffer
	reg        *prometheus.Registry
	forwarded  atomic.Int64 // requests the relay sent
}

type options struct {
	// tamper changes each forwarded request in transit.
	tamper func(*http.Request)
	// target replaces the ingress's URL.
	target string
	now    func() time.Time
	// metrics receives the relay's metrics.
	metrics prometheus.Registerer
}

func testSources(relaySecrets ...string) []sources.Source {
	return []sources.Source{
		{Name: "stripe", Config: verify.Config{Type: "stripe", Secrets: []string{stripeSecret}}, RelaySecrets: relaySecrets},
		{Name: "slack", Config: verify.Config{Type: "slack", Secrets: []string{slackSecret}}, RelaySecrets: relaySecrets},
		{Name: "meta", Config: metaSource, RelaySecrets: relaySecrets},
	}
}

// metaSource is a Meta source, whose provider checks the endpoint with a GET.
var metaSource = verify.Config{Type: "meta", Secrets: []string{"meta-relay-app-secret"}, VerifyToken: "meta-relay-verify-token"}

func setup(t *testing.T, opt options) *bundle {
	t.Helper()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	b := &bundle{relayLogs: &testlog.Buffer{}, ingestLogs: &testlog.Buffer{}, reg: prometheus.NewRegistry()}
	admin, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	b.admin = admin
	pool, err := database.Open(ctx, dbURL, database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// The customer's ingress takes stripe and slack only from the relay; the
	// old relay secret is still listed, as during a rotation.
	ing, err := ingress.New(ingress.Config{
		Section: ingress.Section{MaxBodyBytes: 1 << 20, StoreTimeout: 10 * time.Second}, // not the tests' subject: room for a loaded machine
		Sources: testSources("relay-secret-old-0000000", relaySecret),
		Store:   ingress.NewPGStore(pool, nil),
		Logger:  slog.New(slog.NewJSONHandler(b.ingestLogs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics: b.reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewTLSServer(ing.Handler())
	t.Cleanup(hs.Close)
	b.ingressURL = hs.URL
	b.caFile = filepath.Join(t.TempDir(), "ca.pem")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw})
	if err := os.WriteFile(b.caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	target := b.ingressURL
	if opt.target != "" {
		target = opt.target
	}
	rs := b.startRelay(t, relay.Section{Target: target, Secrets: []string{relaySecret}, CAFile: b.caFile, Timeout: 3 * time.Second, MaxBodyBytes: 4 << 10}, opt)
	b.relayURL = rs.URL
	return b
}

func (b *bundle) startRelay(t *testing.T, rc relay.Section, opt options) *httptest.Server {
	t.Helper()
	// The relay's own transport, wrapped to count (and maybe tamper with)
	// what leaves it.
	base, err := relay.NewTransport(rc.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := relay.New(relay.Config{
		Section: rc,
		Sources: testSources(),
		Logger:  slog.New(slog.NewJSONHandler(b.relayLogs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:     opt.now,
		Metrics: opt.metrics,
		Transport: roundTripper(func(req *http.Request) (*http.Response, error) {
			b.forwarded.Add(1)
			if opt.tamper != nil {
				opt.tamper(req)
			}
			return base.RoundTrip(req)
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	rs := httptest.NewServer(srv.Handler())
	t.Cleanup(rs.Close)
	return rs
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// stripeRequest is a webhook signed by stripe-go, the provider's own SDK,
// with the canary in a header value.
func stripeRequest(t *testing.T, base string, body []byte, ts time.Time) *http.Request {
	t.Helper()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeSecret, Timestamp: ts})
	req, err := http.NewRequest(http.MethodPost, base+"/webhooks/stripe?attempt=1", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Stripe-Signature", signed.Header)
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	req.Header.Add("X-Trace", canary+"-a")
	req.Header.Add("X-Trace", canary+"-b")
	return req
}

func do(t *testing.T, req *http.Request) (int, string, http.Header) {
	t.Helper()
	resp, err := provider.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// provider sends webhooks with the headers a test sets and no others of its
// own (no Accept-Encoding), so what is stored can be told apart from what the
// relay might add.
var provider = &http.Client{Transport: &http.Transport{DisableCompression: true}}

func (b *bundle) events(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.admin.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *bundle) noCanaryInLogs(t *testing.T) {
	t.Helper()
	for name, logs := range map[string]string{"relay": b.relayLogs.String(), "ingress": b.ingestLogs.String()} {
		if strings.Contains(logs, canary) || strings.Contains(logs, relaySecret) || strings.Contains(logs, stripeSecret) {
			t.Errorf("%s log holds a body, a header value or a secret:\n%s", name, logs)
		}
	}
}

// The bytes the provider signed are the bytes stored, and the headers it
// sent are stored as sent (the relay's own headers are not), so the stored
// event re-verifies with the provider's secret alone.
func TestRelayStoresExactBytesAndHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	body := []byte("{\"id\":\"evt_relay_bytes\",  \"type\":\"invoice.paid\",\n\"note\":\"caf\u00e9 \\u00e9 \\/ " + canary + "\"}\n")
	req := stripeRequest(t, b.relayURL, body, time.Now())
	code, answer, _ := do(t, req)
	if code != http.StatusOK || strings.TrimSpace(answer) != `{"status":"stored"}` {
		t.Fatalf("relay answered %d %s", code, answer)
	}
	var raw []byte
	var headers map[string][]string
	var uri string
	err := b.admin.QueryRow(context.Background(), `SELECT raw_body, headers, request_uri FROM webhook_ingress.events
		WHERE provider = 'stripe' AND external_event_id = 'evt_relay_bytes' AND signature_verified`).Scan(&raw, &headers, &uri)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, body) {
		t.Fatalf("stored body differs:\n got %q\nwant %q", raw, body)
	}
	if uri != "/webhooks/stripe?attempt=1" {
		t.Fatalf("request_uri = %q", uri)
	}
	for _, name := range []string{"Stripe-Signature", "Content-Type", "User-Agent", "X-Trace"} {
		if got, want := strings.Join(headers[name], "|"), strings.Join(req.Header.Values(name), "|"); got != want {
			t.Errorf("stored %s = %q, want %q", name, got, want)
		}
	}
	for name := range headers {
		if strings.HasPrefix(name, "Inlet-Relay-") || name == "Accept-Encoding" {
			t.Errorf("stored headers hold %s, which the provider did not send", name)
		}
	}
	if _, err := verify.Reverify(verify.Config{Type: "stripe", Secrets: []string{stripeSecret}}, headers, raw, ""); err != nil {
		t.Fatalf("re-verify the stored event: %v", err)
	}
	// A retry of the same delivery is a duplicate, answered 200 as well.
	code, answer, _ = do(t, stripeRequest(t, b.relayURL, body, time.Now()))
	if code != http.StatusOK || !strings.Contains(answer, `"duplicate"`) || b.events(t) != 1 {
		t.Fatalf("redelivery: %d %s, %d events", code, answer, b.events(t))
	}
	if logs := b.relayLogs.String(); !strings.Contains(logs, `"msg":"webhook relayed"`) {
		t.Fatalf("no relay log line:\n%s", logs)
	}
	b.noCanaryInLogs(t)
}

// Slack's endpoint check is answered by the ingress; the relay passes its
// answer on.
func TestRelayPassesSlackChallenge(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	body := []byte(`{"token":"t","challenge":"c-relay-42","type":"url_verification"}`)
	req, _ := http.NewRequest(http.MethodPost, b.relayURL+"/webhooks/slack", bytes.NewReader(body))
	for k, v := range verify.SignSlack(slackSecret, time.Now(), body) {
		req.Header[k] = v
	}
	code, answer, _ := do(t, req)
	if code != 200 || strings.TrimSpace(answer) != `{"challenge":"c-relay-42"}` {
		t.Fatalf("%d %s", code, answer)
	}
}

// A GET handshake (Meta's hub.challenge) is answered by the relay itself,
// as ingress would: nothing to store, nothing forwarded. A wrong token is
// refused like a bad signature; a GET to a provider without one is a 405.
func TestRelayAnswersGETHandshakes(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	probe, err := verify.HandshakeTest(metaSource, b.relayURL+"/webhooks/meta", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(probe.Method, probe.URL, nil)
	code, answer, header := do(t, req)
	if err := probe.Check(code, header, []byte(answer)); err != nil {
		t.Fatal(err)
	}
	if n := b.forwarded.Load(); n != 0 {
		t.Errorf("%d requests forwarded for a handshake", n)
	}
	req, _ = http.NewRequest(http.MethodGet, strings.Replace(probe.URL, "meta-relay-verify-token", "guessed", 1), nil)
	if code, answer, _ := do(t, req); code != http.StatusUnauthorized || !strings.Contains(answer, "signature_mismatch") {
		t.Errorf("wrong verify token: %d %s", code, answer)
	}
	req, _ = http.NewRequest(http.MethodGet, b.relayURL+"/webhooks/stripe", nil)
	if code, answer, header := do(t, req); code != http.StatusMethodNotAllowed || header.Get("Allow") != "POST" {
		t.Errorf("GET to stripe: %d %s", code, answer)
	}
}

// Whatever changes a relayed request in transit (its signature, a signed
// header, the body) is refused by the ingress and nothing is stored; the
// relay then answers 502 so the provider retries. A header added on the way
// (a proxy's) is not covered and does not break it.
func TestRelayTamperingIsRejectedByIngress(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		tamper func(*http.Request)
		reason string // "" means accepted
	}{
		{"signature", func(r *http.Request) {
			sig := r.Header.Get(verify.RelayHeaderSignature)
			i := strings.LastIndex(sig, "v1=") + 3
			flip := "0"
			if sig[i] == '0' {
				flip = "1"
			}
			r.Header.Set(verify.RelayHeaderSignature, sig[:i]+flip+sig[i+1:])
		}, "relay_signature_mismatch"},
		{"signature removed", func(r *http.Request) { r.Header.Del(verify.RelayHeaderSignature) }, "relay_signature_missing"},
		{"header value changed", func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }, "relay_headers_mismatch"},
		{"header value added", func(r *http.Request) { r.Header.Add("X-Trace", "injected") }, "relay_headers_mismatch"},
		{"header removed", func(r *http.Request) { r.Header.Del("User-Agent") }, "relay_headers_mismatch"},
		{"header list shortened", func(r *http.Request) {
			r.Header.Del("X-Trace")
			r.Header.Set(verify.RelayHeaderHeaders, "content-type,stripe-signature,user-agent")
		}, "relay_headers_mismatch"},
		{"query changed", func(r *http.Request) { r.URL.RawQuery = "attempt=2" }, "relay_signature_mismatch"},
		{"proxy header added", func(r *http.Request) { r.Header.Set("X-Forwarded-For", "192.0.2.1") }, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{tamper: c.tamper})
			body := []byte(`{"id":"evt_tamper","type":"invoice.paid","note":"` + canary + `"}`)
			code, answer, hdr := do(t, stripeRequest(t, b.relayURL, body, time.Now()))
			if c.reason == "" {
				if code != 200 || b.events(t) != 1 {
					t.Fatalf("%d %s, %d events: want stored", code, answer, b.events(t))
				}
				return
			}
			if code != http.StatusBadGateway || hdr.Get("Retry-After") == "" || !strings.Contains(answer, "ingress_rejected") {
				t.Fatalf("relay answered %d %s (Retry-After %q), want 502 ingress_rejected", code, answer, hdr.Get("Retry-After"))
			}
			if n := b.events(t); n != 0 {
				t.Fatalf("%d events stored from a tampered request", n)
			}
			if got := rejected(t, b.reg, "stripe", c.reason); got != 1 {
				t.Fatalf("rejected_total{reason=%q} = %v, want 1\nrelay log:\n%s", c.reason, got, b.relayLogs.String())
			}
			if !strings.Contains(b.relayLogs.String(), `"ingress_reason":"`+c.reason+`"`) {
				t.Fatalf("relay log does not name the ingress's reason %s:\n%s", c.reason, b.relayLogs.String())
			}
			b.noCanaryInLogs(t)
		})
	}
}

// A request to a relay-only source that did not come through the relay is
// refused even though the provider's signature is good.
func TestIngressRequiresTheRelaySignature(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	client := &http.Client{Transport: mustTransport(t, b.caFile)}
	req := stripeRequest(t, b.ingressURL, []byte(`{"id":"evt_direct","type":"x"}`), time.Now())
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(string(answer), "relay_signature_missing") || b.events(t) != 0 {
		t.Fatalf("direct delivery: %d %s, %d events", resp.StatusCode, answer, b.events(t))
	}
}

// A signature too old for the ingress's relay window is refused with its
// own reason, before the provider's signature is looked at.
func TestRelayStaleSignature(t *testing.T) {
	t.Parallel()
	past := time.Now().Add(-10 * time.Minute)
	b := setup(t, options{now: func() time.Time { return past }})
	code, answer, _ := do(t, stripeRequest(t, b.relayURL, []byte(`{"id":"evt_stale","type":"x"}`), past))
	if code != http.StatusBadGateway || b.events(t) != 0 ||
		!strings.Contains(b.relayLogs.String(), `"ingress_reason":"relay_timestamp_outside_tolerance"`) {
		t.Fatalf("%d %s\n%s", code, answer, b.relayLogs.String())
	}
}

// The relay verifies as ingress does: a forged, oversized or misaddressed
// webhook is answered by the relay and never forwarded.
func TestRelayRejectsWithoutForwarding(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	now := time.Now()
	forged := stripeRequest(t, b.relayURL, []byte(`{"id":"evt_forged","type":"x","n":"`+canary+`"}`), now)
	forged.Header.Set("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now.Unix(), strings.Repeat("ab", 32)))
	stale := stripeRequest(t, b.relayURL, []byte(`{"id":"evt_old","type":"x"}`), now.Add(-time.Hour))
	big := stripeRequest(t, b.relayURL, bytes.Repeat([]byte("a"), 8<<10), now)
	unknown, _ := http.NewRequest(http.MethodPost, b.relayURL+"/webhooks/nope", strings.NewReader("{}"))
	noID := stripeRequest(t, b.relayURL, []byte(`{"type":"x"}`), now)
	// Other methods and paths get the relay's JSON answers, as at ingress
	// (they were net/http's plain text and a bare 307).
	put, _ := http.NewRequest(http.MethodPut, b.relayURL+"/webhooks/stripe", strings.NewReader("{}"))
	get, _ := http.NewRequest(http.MethodGet, b.relayURL+"/webhooks/stripe", nil)
	deeper, _ := http.NewRequest(http.MethodPost, b.relayURL+"/webhooks/stripe/extra", strings.NewReader("{}"))
	bare, _ := http.NewRequest(http.MethodPost, b.relayURL+"/webhooks/", strings.NewReader("{}"))
	unclean, _ := http.NewRequest(http.MethodPost, b.relayURL+"/webhooks//stripe", strings.NewReader("{}"))
	for _, c := range []struct {
		req    *http.Request
		code   int
		reason string
	}{
		{forged, 401, "signature_mismatch"},
		{stale, 401, "timestamp_outside_tolerance"},
		{big, 413, "body_too_large"},
		{unknown, 404, "unknown_source"},
		{noID, 400, "malformed_payload"},
		{put, 405, "method_not_allowed"},
		{get, 405, "method_not_allowed"},
		{deeper, 404, "unknown_source"},
		{bare, 404, "unknown_source"},
		{unclean, 404, "unknown_source"},
	} {
		code, answer, _ := do(t, c.req)
		if code != c.code || !strings.Contains(answer, `"reason":"`+c.reason+`"`) {
			t.Errorf("%s %s: %d %s, want %d %s", c.req.Method, c.req.URL.Path, code, answer, c.code, c.reason)
		}
	}
	if n := b.forwarded.Load(); n != 0 {
		t.Fatalf("%d requests forwarded, want none", n)
	}
	if b.events(t) != 0 {
		t.Fatal("events stored")
	}
	b.noCanaryInLogs(t)
}

// When the customer's ingress cannot be reached, or fails, the provider is
// told to retry: 503 with Retry-After, never 2xx.
func TestRelayIngressDown(t *testing.T) {
	t.Parallel()
	down := httptest.NewTLSServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	b := setup(t, options{target: downURL})
	body := []byte(`{"id":"evt_down","type":"x","n":"` + canary + `"}`)
	code, answer, hdr := do(t, stripeRequest(t, b.relayURL, body, time.Now()))
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(answer, "ingress_unavailable") {
		t.Fatalf("ingress down: %d %s (Retry-After %q)", code, answer, hdr.Get("Retry-After"))
	}
	// A connection error is retried once.
	if n := b.forwarded.Load(); n != 2 {
		t.Fatalf("%d attempts, want 2", n)
	}
	if logs := b.relayLogs.String(); !strings.Contains(logs, `"error_class":"connect"`) {
		t.Fatalf("log lacks the error class:\n%s", logs)
	}
	b.noCanaryInLogs(t)

	// An ingress answering 503 (its database is down) is passed on, with
	// its Retry-After.
	failing := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"status":"unavailable","reason":"database_unavailable"}`)
	}))
	t.Cleanup(failing.Close)
	rs := b.startRelay(t, relay.Section{Target: failing.URL, Secrets: []string{relaySecret}, CAFile: writeCA(t, failing)}, options{})
	code, answer, hdr = do(t, stripeRequest(t, rs.URL, body, time.Now()))
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") != "7" {
		t.Fatalf("ingress 503: relay answered %d %s (Retry-After %q)", code, answer, hdr.Get("Retry-After"))
	}
	if !strings.Contains(b.relayLogs.String(), `"ingress_reason":"database_unavailable"`) {
		t.Fatalf("log lacks the ingress's reason:\n%s", b.relayLogs.String())
	}
}

// TLS is verified: an ingress whose certificate the relay does not trust is
// unreachable, not silently accepted.
func TestRelayVerifiesTLS(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	// Every httptest TLS server has the same certificate: another CA is
	// made here.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, DNSNames: []string{"example.com"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	otherCA := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(otherCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	rs := b.startRelay(t, relay.Section{Target: b.ingressURL, Secrets: []string{relaySecret}, CAFile: otherCA}, options{})
	code, answer, _ := do(t, stripeRequest(t, rs.URL, []byte(`{"id":"evt_tls","type":"x"}`), time.Now()))
	if code != http.StatusServiceUnavailable || b.events(t) != 0 || !strings.Contains(b.relayLogs.String(), `"error_class":"tls"`) {
		t.Fatalf("untrusted certificate: %d %s\n%s", code, answer, b.relayLogs.String())
	}
}

func TestRelayConfigErrors(t *testing.T) {
	t.Parallel()
	src := testSources()
	for _, c := range []struct {
		cfg  relay.Section
		want string
	}{
		{relay.Section{Secrets: []string{relaySecret}}, "relay.target: required"},
		{relay.Section{Target: "https://ingress.example"}, "relay.secrets: at least one"},
		{relay.Section{Target: "http://ingress.example", Secrets: []string{relaySecret}}, "allow_insecure_target"},
		{relay.Section{Target: "https://ingress.example", Secrets: []string{"short"}}, "relay.secrets[0]"},
		{relay.Section{Target: "https://ingress.example", Secrets: []string{relaySecret}, CAFile: "/nonexistent/ca.pem"}, "relay.ca_file"},
	} {
		_, err := relay.New(relay.Config{Section: c.cfg, Sources: src})
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), relaySecret) {
			t.Errorf("%+v: error %v, want one naming %q", c.cfg, err, c.want)
		}
	}
	if _, err := relay.New(relay.Config{Section: relay.Section{Target: "http://127.0.0.1:1", AllowInsecureTarget: true, Secrets: []string{relaySecret}}, Sources: src}); err != nil {
		t.Fatalf("allow_insecure_target: %v", err)
	}
}

func writeCA(t *testing.T, s *httptest.Server) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustTransport(t *testing.T, caFile string) http.RoundTripper {
	t.Helper()
	tr, err := relay.NewTransport(caFile)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// rejected is inlet_ingress_rejected_total{source, reason} of the ingress.
func rejected(t *testing.T, reg *prometheus.Registry, source, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "inlet_ingress_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["source"] == source && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no inlet_ingress_rejected_total{source=%q,reason=%q}", source, reason)
	return 0
}

// An event the ingress refuses for its own data (here an id over the
// ingress's 1024-byte limit, which the relay does not check) would be
// refused on every retry: the provider gets the ingress's 400, without
// Retry-After, not a 502 to retry for days. Nothing is stored.
func TestRelayPassesOnARefusalOfTheEventsOwnData(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	body := []byte(`{"id":"evt_` + strings.Repeat("x", 1100) + `","type":"invoice.paid"}`)
	code, answer, hdr := do(t, stripeRequest(t, b.relayURL, body, time.Now()))
	if code != http.StatusBadRequest || !strings.Contains(answer, "event_id_too_long") || hdr.Get("Retry-After") != "" {
		t.Fatalf("relay answered %d %s (Retry-After %q), want the ingress's 400 event_id_too_long\nrelay log:\n%s",
			code, answer, hdr.Get("Retry-After"), b.relayLogs.String())
	}
	if n := b.events(t); n != 0 {
		t.Fatalf("%d events stored", n)
	}
	if !strings.Contains(b.relayLogs.String(), `"ingress_reason":"event_id_too_long"`) {
		t.Fatalf("relay log does not name the ingress's reason:\n%s", b.relayLogs.String())
	}
}
