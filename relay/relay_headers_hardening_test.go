package relay_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testlog"
	"github.com/inlet-dev/inlet/relay"
	"github.com/inlet-dev/inlet/schema"
)

// TestRelayBetweenProxies (review helper-228, fixed).
// Defect: neither inlet relay nor inlet ingress ends TLS (relay.listen and
// the ingress listener are plain HTTP, relay.target must be https://), so
// both run behind a TLS-terminating reverse proxy. Such a proxy (nginx's
// $proxy_add_x_forwarded_for, an AWS ALB, Go's httputil.ReverseProxy) sets
// X-Forwarded-For on the request reaching the relay, and the relay forwards
// and SIGNS it as if the provider had sent it (verify.RelayForwardHeaders
// drops hop-by-hop headers only). The proxy in front of the ingress then
// appends the relay's address to that same header, the listed value no
// longer matches the signature, and the ingress refuses every delivery
// with relay_headers_mismatch: the provider gets 502 on every retry and the
// event is never stored. docs/operations.md ("Relay mode") says a header a
// proxy adds on the way (X-Forwarded-For) "is not covered and does not
// break it"; that is false as soon as the relay itself sits behind a proxy.
// Root cause: ingress/verify/relay.go:RelayForwardHeaders (and the relay's
// forward.go:forward, which signs whatever it was given).
// Setup: real ingress on real PostgreSQL behind a TLS httputil.ReverseProxy
// (the relay's target), relay behind another httputil.ReverseProxy; a
// Stripe webhook signed by stripe-go is posted to the relay's proxy.
// Expected: 200 stored, one event row.
// Observed: 502 {"status":"unavailable","reason":"ingress_rejected"}, ingress
// reason relay_headers_mismatch, 0 events.
// Fixed: verify.RelayForwardHeaders treats the headers a proxy adds about
// the relay's inbound hop (X-Forwarded-*, Forwarded, X-Real-Ip, Via) as
// hop-by-hop ones: the relay neither forwards nor signs them, so a proxy
// before the ingress may add or append them freely.
func TestRelayBetweenProxies(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})

	// The customer's TLS proxy in front of its ingress.
	ingressURL, err := url.Parse(b.ingressURL)
	if err != nil {
		t.Fatal(err)
	}
	ingressProxy := httputil.NewSingleHostReverseProxy(ingressURL)
	ingressProxy.Transport = mustTransport(t, b.caFile)
	ips := httptest.NewTLSServer(ingressProxy) // httptest's TLS servers share one certificate: b.caFile trusts it
	t.Cleanup(ips.Close)

	// The relay, pointed at that proxy, behind its own TLS proxy (plain
	// HTTP here: what matters is the header it adds).
	rs := b.startRelay(t, relay.Section{Target: ips.URL, Secrets: []string{relaySecret}, CAFile: b.caFile,
		Timeout: 5 * time.Second, MaxBodyBytes: 4 << 10}, options{})
	relayURL, err := url.Parse(rs.URL)
	if err != nil {
		t.Fatal(err)
	}
	rps := httptest.NewServer(httputil.NewSingleHostReverseProxy(relayURL))
	t.Cleanup(rps.Close)

	body := []byte(`{"id":"evt_relay_between_proxies","type":"invoice.paid"}`)
	code, answer, _ := do(t, stripeRequest(t, rps.URL, body, time.Now()))
	if code != http.StatusOK || b.events(t) != 1 {
		reason := "?"
		if logs := b.relayLogs.String(); strings.Contains(logs, `"ingress_reason":"`) {
			reason = strings.SplitN(strings.SplitN(logs, `"ingress_reason":"`, 2)[1], `"`, 2)[0]
		}
		t.Fatalf("a verified webhook through a proxy before the relay and one before the ingress: relay answered %d %s (ingress reason %s), %d events stored; want 200 and 1 event",
			code, strings.TrimSpace(answer), reason, b.events(t))
	}
}

const hardeningGitLabToken = "gitlab-relay-hardening-token"

// hardeningGitLab is a real ingress on a real database behind TLS taking a
// GitLab source only from the relay (relay_secrets), and a relay in front
// of it whose transport lets tamper change each forwarded request in
// transit.
func hardeningGitLab(t *testing.T, tamper func(*http.Request)) (b *bundle, relayURL string) {
	t.Helper()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	b = &bundle{relayLogs: &testlog.Buffer{}, ingestLogs: &testlog.Buffer{}, reg: prometheus.NewRegistry()}
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
	gitlab := func(relaySecrets ...string) []sources.Source {
		return []sources.Source{{Name: "gitlab", Config: verify.Config{Type: "gitlab", Secrets: []string{hardeningGitLabToken}}, RelaySecrets: relaySecrets}}
	}
	ing, err := ingress.New(ingress.Config{
		Section: ingress.Section{MaxBodyBytes: 1 << 20, StoreTimeout: 10 * time.Second},
		Sources: gitlab(relaySecret),
		Store:   ingress.NewPGStore(pool, nil),
		Logger:  slog.New(slog.NewJSONHandler(b.ingestLogs, nil)),
		Metrics: b.reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewTLSServer(ing.Handler())
	t.Cleanup(hs.Close)
	b.ingressURL = hs.URL
	b.caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(b.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	base, err := relay.NewTransport(b.caFile)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := relay.New(relay.Config{
		Section: relay.Section{Target: b.ingressURL, Secrets: []string{relaySecret}, CAFile: b.caFile, Timeout: 5 * time.Second},
		Sources: gitlab(),
		Logger:  slog.New(slog.NewJSONHandler(b.relayLogs, nil)),
		Transport: roundTripper(func(req *http.Request) (*http.Response, error) {
			b.forwarded.Add(1)
			tamper(req)
			return base.RoundTrip(req)
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	rs := httptest.NewServer(srv.Handler())
	t.Cleanup(rs.Close)
	return b, rs.URL
}

// TestRelayRefusesHeaderListedInTransit (review helper-228, fixed).
// Defect: whoever sits between the relay and the customer's ingress can add
// a header to a relayed webhook that the ingress then hands to the
// provider's verifier and stores, so they choose the event id of a GitLab
// (Idempotency-Key) or Shopify (X-Shopify-Event-Id) delivery that lacks
// that header: a later genuine event is answered 200 "duplicate" and never
// stored (the provider stops retrying: silent loss), or a retry becomes a
// second event. docs/operations.md ("A weaker guarantee") says they "cannot
// forge or alter one, nor add a header to one (the ingress keeps only the
// headers the relay signed, those Inlet-Relay-Headers lists)". Root cause:
// ingress/verify/relay.go: Inlet-Relay-Headers is not itself signed, and
// VerifyRelay/canonicalDigest look a listed name up in lower case only, so
// a name listed in another case ("Idempotency-Key", sorted first since
// upper case sorts before lower) adds no line to the digest and passes,
// while RelayListedHeaders reads it with h.Values, case-insensitively, and
// keeps its values.
// Setup: real ingress (PostgreSQL) with a gitlab source behind the relay;
// two distinct GitLab deliveries (different X-Gitlab-Event-Uuid and body,
// no Idempotency-Key, as GitLab before 17.4 sends them); in transit each
// gets "Idempotency-Key: chosen-by-path" and "Idempotency-Key," prepended
// to Inlet-Relay-Headers.
// Expected: the ingress refuses the altered requests (relay_headers_mismatch)
// or ignores the added header; never a stored row keyed by it.
// Observed: first 200 stored with external_event_id "chosen-by-path" and the
// injected header stored; second 200 {"status":"duplicate"}; 1 event.
// Fixed: VerifyRelay refuses an Inlet-Relay-Headers entry that is not a
// lower-case header name or is an Inlet-Relay-* one, and a listed name
// received with no value, so the list is exactly the names of the lines the
// signed digest covers; RelayListedHeaders reads them as the digest does.
func TestRelayRefusesHeaderListedInTransit(t *testing.T) {
	t.Parallel()
	const chosen = "chosen-by-path"
	b, relayURL := hardeningGitLab(t, func(r *http.Request) {
		r.Header.Set("Idempotency-Key", chosen)
		r.Header.Set(verify.RelayHeaderHeaders, "Idempotency-Key,"+r.Header.Get(verify.RelayHeaderHeaders))
	})
	send := func(uuid, body string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, relayURL+"/webhooks/gitlab", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Gitlab-Token", hardeningGitLabToken)
		req.Header.Set("X-Gitlab-Event", "Push Hook")
		req.Header.Set("X-Gitlab-Event-Uuid", uuid)
		code, answer, _ := do(t, req)
		return code, strings.TrimSpace(answer)
	}
	code1, ans1 := send("3d1d1a47-0000-4000-8000-000000000001", `{"object_kind":"push","ref":"refs/heads/main","after":"aaaa"}`)
	code2, ans2 := send("3d1d1a47-0000-4000-8000-000000000002", `{"object_kind":"push","ref":"refs/heads/main","after":"bbbb"}`)

	var injected int
	if err := b.admin.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.events
		WHERE external_event_id = $1 OR headers ? 'Idempotency-Key'`, chosen).Scan(&injected); err != nil {
		t.Fatal(err)
	}
	if injected != 0 {
		t.Fatalf("a header added between relay and ingress was used and stored: %d event(s) keyed by or holding it; "+
			"first delivery %d %s, second (a distinct event) %d %s, %d events stored of 2",
			injected, code1, ans1, code2, ans2, b.events(t))
	}
	if code1 == http.StatusOK && code2 == http.StatusOK && b.events(t) != 2 {
		t.Fatalf("two distinct deliveries answered 200 but %d events stored", b.events(t))
	}
}
