package relay_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
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

const (
	reviewShopifySecret = "shopify-review-secret-0123"
	reviewGitLabToken   = "gitlab-review-token-0123"
)

// reviewHopSetup is a real ingress (TLS, real PostgreSQL) taking shopify and
// gitlab only through the relay (relay_secrets), and a relay in front of it
// whose outgoing requests pass through hop: a network hop between the relay
// and the customer's ingress (a load balancer, a TLS-terminating proxy, an
// attacker on that path) that cannot forge the relay's signature.
func reviewHopSetup(t *testing.T, hop func(*http.Request)) (relayURL string, admin *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	srcs := func(relaySecrets ...string) []sources.Source {
		return []sources.Source{
			{Name: "shopify", Config: verify.Config{Type: "shopify", Secrets: []string{reviewShopifySecret}}, RelaySecrets: relaySecrets},
			{Name: "gitlab", Config: verify.Config{Type: "gitlab", Secrets: []string{reviewGitLabToken}}, RelaySecrets: relaySecrets},
		}
	}
	dbURL := pgtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	pool, err := database.Open(ctx, dbURL, database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ing, err := ingress.New(ingress.Config{
		Section: ingress.Section{MaxBodyBytes: 1 << 20, StoreTimeout: 10 * time.Second},
		Sources: srcs(relaySecret),
		Store:   ingress.NewPGStore(pool, nil),
		Logger:  slog.New(slog.NewJSONHandler(&testlog.Buffer{}, nil)),
		Metrics: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewTLSServer(ing.Handler())
	t.Cleanup(hs.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	base, err := relay.NewTransport(caFile)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := relay.New(relay.Config{
		Section: relay.Section{Target: hs.URL, Secrets: []string{relaySecret}, CAFile: caFile, Timeout: 5 * time.Second},
		Sources: srcs(),
		Logger:  slog.New(slog.NewJSONHandler(&testlog.Buffer{}, nil)),
		Transport: roundTripper(func(req *http.Request) (*http.Response, error) {
			hop(req)
			return base.RoundTrip(req)
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	rs := httptest.NewServer(srv.Handler())
	t.Cleanup(rs.Close)
	return rs.URL, admin
}

// A header added between the relay and the ingress, not listed in
// Inlet-Relay-Headers (so not covered by the relay's signature), never
// reaches the provider's verifier or the stored row.
//
// Regression test (review helper-119; fixed: the text describes the
// behaviour before the fix). relayCheck.check returned every header as
// received (verify.StripRelay), not only the listed ones, and the ingress
// took the event id from them and stored them. Shopify signs only the body
// and GitLab nothing, so their event id comes from headers
// (X-Shopify-Event-Id before X-Shopify-Webhook-Id; Idempotency-Key before
// X-Gitlab-Event-UUID): whoever sat on the relay→ingress path, without any
// secret, added the preferred header and chose the dedupe key. One provider
// delivery and its retry (same bytes, same ids) became two stored events
// with hop-chosen ids, each fanned out to handlers; the same trick could
// pick the id of a later genuine event so that it was dropped as a
// "duplicate".
//
// Expected: on a relay_secrets source the ingress verifies and stores only
// the headers listed in Inlet-Relay-Headers (what the relay saw and signed);
// the retry is a duplicate of the first delivery, stored under the
// provider's own id, and no header the hop added is stored.
func TestRelayHopCannotInjectAnUnsignedIdentityHeader(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, source, injected, wantID string
		request                        func(base string, body []byte) *http.Request
	}{
		{
			name: "shopify X-Shopify-Event-Id", source: "shopify", injected: "X-Shopify-Event-Id", wantID: "wh-review-1",
			request: func(base string, body []byte) *http.Request {
				req, _ := http.NewRequest(http.MethodPost, base+"/webhooks/shopify", bytes.NewReader(body))
				for k, v := range verify.SignShopify(reviewShopifySecret, "", "orders/create", body) {
					req.Header[k] = v
				}
				req.Header.Set("X-Shopify-Webhook-Id", "wh-review-1") // no X-Shopify-Event-Id
				req.Header.Set("Content-Type", "application/json")
				return req
			},
		},
		{
			name: "gitlab Idempotency-Key", source: "gitlab", injected: "Idempotency-Key",
			wantID: "", // X-Gitlab-Event-UUID with the body's digest; checked below by prefix
			request: func(base string, body []byte) *http.Request {
				req, _ := http.NewRequest(http.MethodPost, base+"/webhooks/gitlab", bytes.NewReader(body))
				for k, v := range verify.SignGitLab(reviewGitLabToken, "", "Push Hook") {
					req.Header[k] = v
				}
				req.Header.Set("X-Gitlab-Event-UUID", "uuid-review-1") // GitLab < 17.4: no Idempotency-Key
				req.Header.Set("Content-Type", "application/json")
				return req
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			relayURL, admin := reviewHopSetup(t, func(r *http.Request) {
				// The hop adds one header, not listed in Inlet-Relay-Headers.
				r.Header.Set(c.injected, fmt.Sprintf("hop-chosen-%d", n.Add(1)))
			})
			body := []byte(`{"id":123,"note":"one delivery, retried once"}`)
			for attempt := 1; attempt <= 2; attempt++ { // the provider's delivery and its retry
				code, answer, _ := do(t, c.request(relayURL, body))
				if code != http.StatusOK {
					t.Fatalf("attempt %d: relay answered %d %s", attempt, code, answer)
				}
			}
			rows, err := admin.Query(context.Background(),
				`SELECT external_event_id, headers FROM webhook_ingress.events WHERE provider = $1 ORDER BY id`, c.source)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var ids []string
			var injectedStored []string
			for rows.Next() {
				var id string
				var headers map[string][]string
				if err := rows.Scan(&id, &headers); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
				if v, ok := headers[c.injected]; ok {
					injectedStored = append(injectedStored, strings.Join(v, ","))
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			sort.Strings(ids)
			ok := len(ids) == 1 && len(injectedStored) == 0 && !strings.HasPrefix(ids[0], "hop-chosen")
			if ok && c.wantID != "" && ids[0] != c.wantID {
				ok = false
			}
			if !ok {
				t.Fatalf("one provider delivery (plus its retry) stored as %d event(s) with ids %q; stored %s values %q that only the "+
					"hop between relay and ingress added (not in Inlet-Relay-Headers, not covered by the relay signature); "+
					"want 1 event under the provider's own id and no hop-added header", len(ids), ids, c.injected, injectedStored)
			}
		})
	}
}
