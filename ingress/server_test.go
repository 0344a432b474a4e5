package ingress_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testlog"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	stripeSecret = "whsec_test_ingress_secret"
	githubSecret = "github-test-secret"
	gitlabToken  = "gitlab-test-token-4f1d"
	slackSecret  = "slack-test-signing-secret"
)

type testBundle struct {
	admin *pgxpool.Pool // superuser, for assertions
	url   string        // base URL of the running ingress
	logs  *testlog.Buffer
	reg   *prometheus.Registry
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	url := pgtest.NewDatabase(t)
	return setupOn(t, url, 1<<10)
}

func setupOn(t *testing.T, dbURL string, maxBody int64) *testBundle {
	t.Helper()
	return setupWith(t, dbURL, func(c *ingress.Config) { c.Section.MaxBodyBytes = maxBody })
}

// setupWith runs ingress on dbURL with the test sources, a PGStore as the
// ingress role and StoreTimeout 10s, after edit has changed what it needs.
// The tests of the timeout set their own: 2s (the production default is 5s)
// failed TestTimedProviderHandshakes once in a loaded CI run, its first
// webhook on a new database (the pool's first connection, the filters'
// first read) answered 503 database_unavailable.
func setupWith(t *testing.T, dbURL string, edit func(*ingress.Config)) *testBundle {
	t.Helper()
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	// Ingress runs as its own least-privilege role, as in production.
	pool, err := database.Open(ctx, dbURL, database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logs := &testlog.Buffer{}
	reg := prometheus.NewRegistry()
	cfg := ingress.Config{
		Metrics: reg,
		Section: ingress.Section{StoreTimeout: 10 * time.Second},
		Sources: []sources.Source{
			{Name: "stripe", Config: verify.Config{Type: "stripe", Secrets: []string{"whsec_old_one", stripeSecret}}},
			{Name: "github", Config: verify.Config{Type: "github", Secrets: []string{githubSecret}}},
			{Name: "gitlab", Config: verify.Config{Type: "gitlab", Secrets: []string{gitlabToken}}},
			{Name: "slack", Config: verify.Config{Type: "slack", Secrets: []string{slackSecret}}},
		},
		Store:  ingress.NewPGStore(pool, nil),
		Ready:  database.Ready(pool),
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	}
	edit(&cfg)
	srv, err := ingress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &testBundle{admin: admin, url: hs.URL, logs: logs, reg: reg}
}

func stripeRequest(t *testing.T, url string, body []byte, ts time.Time) *http.Request {
	t.Helper()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeSecret, Timestamp: ts})
	req, err := http.NewRequest(http.MethodPost, url+"/webhooks/stripe", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Stripe-Signature", signed.Header)
	req.Header.Set("Content-Type", "application/json")
	return req
}

func do(t *testing.T, req *http.Request) (int, string, http.Header) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestStoredBytesEqualSentBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Odd spacing, escapes, non-ASCII and a trailing newline: a JSON re-encode would change it.
	body := []byte("{\"id\":\"evt_bytes\",  \"type\":\"invoice.paid\",\n\"note\":\"caf\u00e9 \\u00e9 \\/\"}\n")
	code, answer, _ := do(t, stripeRequest(t, b.url, body, time.Now()))
	if code != http.StatusOK || !strings.Contains(answer, `"stored"`) {
		t.Fatalf("answer %d %s", code, answer)
	}
	var raw []byte
	var headers map[string][]string
	var verified bool
	var secretIndex int
	var typ string
	err := b.admin.QueryRow(context.Background(), `SELECT raw_body, headers, signature_verified, secret_index, event_type
		FROM webhook_ingress.events WHERE provider = 'stripe' AND external_event_id = 'evt_bytes'`).Scan(&raw, &headers, &verified, &secretIndex, &typ)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, body) {
		t.Fatalf("stored body differs:\n got %q\nwant %q", raw, body)
	}
	if !verified || secretIndex != 1 || typ != "invoice.paid" {
		t.Fatalf("verified=%v secret_index=%d type=%q", verified, secretIndex, typ)
	}
	if len(headers["Stripe-Signature"]) != 1 || headers["Content-Type"][0] != "application/json" {
		t.Fatalf("stored headers = %v", headers)
	}
	// Rotation visibility: the log names the index that matched, never the secret.
	if logs := b.logs.String(); !strings.Contains(logs, `"msg":"signing secret in use","source":"stripe","secret_index":1`) || strings.Contains(logs, stripeSecret) {
		t.Fatalf("log lacks the matched secret index (or shows the secret):\n%s", logs)
	}
}

func TestDuplicateDeliveryStoresOneRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := []byte(`{"id":"evt_dup","type":"charge.succeeded"}`)
	for i, want := range []string{"stored", "duplicate", "duplicate"} {
		// A retry is signed anew with another timestamp; the event id is the key.
		code, answer, _ := do(t, stripeRequest(t, b.url, body, time.Now().Add(-time.Duration(i)*time.Second)))
		if code != http.StatusOK || !strings.Contains(answer, want) {
			t.Fatalf("delivery %d: %d %s, want 200 %s", i, code, answer, want)
		}
	}
	if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = 'evt_dup'`); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
}

func TestRejections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const canary = "CANARY-7d1f"
	body := []byte(`{"id":"evt_rej","type":"x","secret":"` + canary + `"}`)

	tampered := stripeRequest(t, b.url, body, time.Now())
	tampered.Body = io.NopCloser(bytes.NewReader(bytes.Replace(body, []byte("x"), []byte("y"), 1)))

	stale := stripeRequest(t, b.url, body, time.Now().Add(-10*time.Minute))
	future := stripeRequest(t, b.url, body, time.Now().Add(10*time.Minute))

	unsigned, _ := http.NewRequest(http.MethodPost, b.url+"/webhooks/stripe", bytes.NewReader(body))

	notJSON := stripeRequest(t, b.url, []byte("not json "+canary), time.Now())

	big := bytes.Repeat([]byte("a"), 2<<10)
	tooLarge := stripeRequest(t, b.url, big, time.Now())
	chunked := stripeRequest(t, b.url, big, time.Now())
	chunked.Body = io.NopCloser(bytes.NewReader(big)) // no length known: limit enforced while reading
	chunked.ContentLength = -1

	unknown, _ := http.NewRequest(http.MethodPost, b.url+"/webhooks/nope", bytes.NewReader(body))
	wrongMethod, _ := http.NewRequest(http.MethodGet, b.url+"/webhooks/stripe", nil)

	cases := []struct {
		name   string
		req    *http.Request
		code   int
		reason string
	}{
		{"tampered body", tampered, 401, "signature_mismatch"},
		{"stale timestamp", stale, 401, "timestamp_outside_tolerance"},
		{"future timestamp", future, 401, "timestamp_outside_tolerance"},
		{"no signature", unsigned, 401, "signature_missing"},
		{"verified but not JSON", notJSON, 400, "malformed_payload"},
		{"too large", tooLarge, 413, "body_too_large"},
		{"too large, chunked", chunked, 413, "body_too_large"},
		{"unknown source", unknown, 404, "unknown_source"},
		{"wrong method", wrongMethod, 405, ""},
	}
	for _, c := range cases {
		code, answer, _ := do(t, c.req)
		if code != c.code || !strings.Contains(answer, c.reason) {
			t.Errorf("%s: %d %q, want %d with %q", c.name, code, answer, c.code, c.reason)
		}
		if strings.Contains(answer, canary) {
			t.Errorf("%s: the answer echoes the body", c.name)
		}
	}
	if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events`); n != 0 {
		t.Fatalf("%d events stored after only rejected requests", n)
	}
	if strings.Contains(b.logs.String(), canary) {
		t.Fatal("the logs contain the body")
	}
	if !strings.Contains(b.logs.String(), `"reason":"timestamp_outside_tolerance"`) {
		t.Fatalf("no log line with the rejection reason:\n%s", b.logs.String())
	}
}

func TestGitHubEventFromHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := []byte(`{"zen":"Design for failure."}`)
	req, _ := http.NewRequest(http.MethodPost, b.url+"/webhooks/github", bytes.NewReader(body))
	for k, v := range verify.SignGitHub(githubSecret, "a1b2c3", "ping", body) {
		req.Header[k] = v
	}
	if code, answer, _ := do(t, req); code != 200 {
		t.Fatalf("%d %s", code, answer)
	}
	if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'github' AND external_event_id = 'a1b2c3' AND event_type = 'ping'`); n != 1 {
		t.Fatalf("github event not stored with its delivery id and type")
	}
}

func TestFanOutJobsCommitWithTheEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern)
		VALUES ('billing', 'stripe', 'invoice.*'), ('audit', '*', '*')`); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"evt_fan","type":"invoice.paid"}`)
	if code, answer, _ := do(t, stripeRequest(t, b.url, body, time.Now())); code != 200 {
		t.Fatalf("%d %s", code, answer)
	}
	if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE e.external_event_id = 'evt_fan' AND j.status = 'pending'`); n != 2 {
		t.Fatalf("%d jobs, want 2", n)
	}
}

// Postgres stopped: 503 with Retry-After and nothing acknowledged; back up: the
// same ingress stores again without a restart.
func TestDatabaseDownThenRecovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Its own cluster: stopping the shared one would break the other tests.
	cluster, err := pgcluster.New(ctx, pgcluster.Config{Dir: filepath.Join(pgtest.TempDir(t), "pg"), Install: true,
		Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	if err := migrateAll(ctx, cluster.URL("postgres")); err != nil {
		t.Fatal(err)
	}
	b := setupOn(t, cluster.URL("postgres"), 1<<10)

	send := func(id string) (int, string, http.Header) {
		return do(t, stripeRequest(t, b.url, []byte(fmt.Sprintf(`{"id":%q,"type":"t"}`, id)), time.Now()))
	}
	if code, answer, _ := send("evt_before"); code != 200 {
		t.Fatalf("before: %d %s", code, answer)
	}
	if err := cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	code, answer, hdr := send("evt_during")
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Fatalf("database down: %d %s Retry-After=%q, want 503 with Retry-After", code, answer, hdr.Get("Retry-After"))
	}
	resp, err := http.Get(b.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz with the database down: %d", resp.StatusCode)
	}
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 20*time.Second, "recovery after the restart: the provider's retry stored", func() (bool, string) {
		code, answer, _ = send("evt_during") // the provider's retry
		return code == 200, fmt.Sprintf("%d %s", code, answer)
	})
	if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events`); n != 2 {
		t.Fatalf("%d events after recovery, want 2", n)
	}
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(b.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
}

// GitLab sends its secret token itself: only its digest is stored, and the
// stored event still re-verifies.
func TestGitLabTokenIsNotStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := []byte(`{"object_kind":"push"}`)
	req, _ := http.NewRequest(http.MethodPost, b.url+"/webhooks/gitlab?x=1", bytes.NewReader(body))
	for k, v := range verify.SignGitLab(gitlabToken, "gl-uuid-1", "Push Hook") {
		req.Header[k] = v
	}
	if code, answer, _ := do(t, req); code != 200 {
		t.Fatalf("%d %s", code, answer)
	}
	var headers map[string][]string
	var uri string
	var raw []byte
	if err := b.admin.QueryRow(context.Background(), `SELECT headers, request_uri, raw_body FROM webhook_ingress.events WHERE provider = 'gitlab'`).Scan(&headers, &uri, &raw); err != nil {
		t.Fatal(err)
	}
	if tok := headers["X-Gitlab-Token"]; len(tok) != 1 || strings.Contains(tok[0], gitlabToken) || !strings.HasPrefix(tok[0], "sha256:") {
		t.Fatalf("stored X-Gitlab-Token = %q", tok)
	}
	if uri != "/webhooks/gitlab?x=1" {
		t.Fatalf("request_uri = %q", uri)
	}
	res, err := verify.Reverify(verify.Config{Type: "gitlab", Secrets: []string{gitlabToken}}, http.Header(headers), raw, "")
	if err != nil || res.EventID != "gl-uuid-1" {
		t.Fatalf("re-verify the stored event: %+v, %v", res, err)
	}
}

// Slack checks a new endpoint with url_verification: the answer echoes the
// challenge, and nothing is stored (a handshake is no event).
func TestSlackChallengeIsAnswered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := []byte(`{"token":"t","challenge":"c-123","type":"url_verification"}`)
	req, _ := http.NewRequest(http.MethodPost, b.url+"/webhooks/slack", bytes.NewReader(body))
	for k, v := range verify.SignSlack(slackSecret, time.Now(), body) {
		req.Header[k] = v
	}
	code, answer, _ := do(t, req)
	if code != 200 || strings.TrimSpace(answer) != `{"challenge":"c-123"}` {
		t.Fatalf("%d %s", code, answer)
	}
	var n int
	if err := b.admin.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'slack' AND event_type = 'url_verification'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("stored url_verification events = %d, %v; want none", n, err)
	}
	// Signed with another secret, the handshake is refused like a bad signature.
	req, _ = http.NewRequest(http.MethodPost, b.url+"/webhooks/slack", bytes.NewReader(body))
	for k, v := range verify.SignSlack("not-the-secret", time.Now(), body) {
		req.Header[k] = v
	}
	if code, answer, _ := do(t, req); code != http.StatusUnauthorized || !strings.Contains(answer, "signature_mismatch") {
		t.Fatalf("forged url_verification: %d %s", code, answer)
	}
}

// A source without relay_secrets trusts no relay: Inlet-Relay-* headers sent
// by anyone are not relay metadata and are not stored. The webhook itself
// is taken (the provider's signature never covers them), stored as a
// direct delivery would be, and re-verifies from what was stored.
func TestRelayHeadersAreNotStoredWithoutRelaySecrets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := []byte(`{"id":"evt_forged_relay","type":"invoice.paid"}`)
	req := stripeRequest(t, b.url, body, time.Now())
	req.Header.Set("Inlet-Relay-Id", "forged-relay-id")
	req.Header.Set("Inlet-Relay-Headers", "content-type,stripe-signature")
	req.Header.Set("Inlet-Relay-Signature", "t=1,h=00,v1=00")
	req.Header.Set("inlet-relay-custom", "lower case too")
	if code, answer, _ := do(t, req); code != http.StatusOK || !strings.Contains(answer, `"stored"`) {
		t.Fatalf("answer %d %s", code, answer)
	}
	var headers map[string][]string
	var raw []byte
	if err := b.admin.QueryRow(context.Background(), `SELECT headers, raw_body FROM webhook_ingress.events
		WHERE provider = 'stripe' AND external_event_id = 'evt_forged_relay'`).Scan(&headers, &raw); err != nil {
		t.Fatal(err)
	}
	for name := range headers {
		if strings.HasPrefix(strings.ToLower(name), "inlet-relay-") {
			t.Errorf("stored headers hold %s from a sender no relay secret vouches for", name)
		}
	}
	if len(headers["Stripe-Signature"]) != 1 || headers["Content-Type"][0] != "application/json" {
		t.Fatalf("stored headers = %v, want the provider's", headers)
	}
	if _, err := verify.Reverify(verify.Config{Type: "stripe", Secrets: []string{stripeSecret}}, http.Header(headers), raw, ""); err != nil {
		t.Fatalf("re-verify the stored event: %v", err)
	}
}

// useGroupStore is a setupWith edit that stores through a GroupStore (as
// the ingress role) instead of a PGStore.
func useGroupStore(t *testing.T, dbURL string) func(*ingress.Config) {
	t.Helper()
	return func(c *ingress.Config) {
		pool, err := database.Open(context.Background(), dbURL, database.Options{Role: schema.IngressRole})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		g := ingress.NewGroupStore(pool, nil, ingress.GroupConfig{})
		t.Cleanup(g.Close)
		c.Store = g
	}
}

// rawPost sends a POST to target (the request line's, sent byte for byte:
// net/http's client would refuse or escape what the test needs) and returns
// the answer.
func rawPost(t *testing.T, base, target string, header http.Header, body []byte) (int, string) {
	t.Helper()
	resp, answer := rawRequest(t, base, http.MethodPost, target, header, body)
	return resp.StatusCode, answer
}

// A query string with a byte that is not UTF-8 (sent raw: Go keeps it)
// does not cost a correctly signed webhook: the request URI is stored with
// that byte percent-encoded, in either store. A scheme that signs the URL
// (Twilio) still checks the URL exactly as received.
func TestRawNonUTF8QueryIsStoredPercentEncoded(t *testing.T) {
	t.Parallel()
	const twilioToken = "twilio-test-auth-token"
	for _, kind := range []string{"single", "group"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dbURL := pgtest.NewDatabase(t)
			b := setupWith(t, dbURL, func(c *ingress.Config) {
				c.Sources = append(c.Sources, sources.Source{Name: "twilio", Config: verify.Config{Type: "twilio", Secrets: []string{twilioToken}}})
				if kind == "group" {
					useGroupStore(t, dbURL)(c)
				}
			})
			host := strings.TrimPrefix(b.url, "http://")
			storedURI := func(provider string) string {
				t.Helper()
				var uri string
				if err := b.admin.QueryRow(context.Background(), `SELECT request_uri FROM webhook_ingress.events WHERE provider = $1`, provider).Scan(&uri); err != nil {
					t.Fatalf("%s event: %v", provider, err)
				}
				return uri
			}

			// GitHub signs the body, not the URL.
			body := []byte(`{"zen":"Keep it logically awesome."}`)
			if code, answer := rawPost(t, b.url, "/webhooks/github?a=\xff&b=%FF&c=\xc3\xa9", verify.SignGitHub(githubSecret, "d1", "ping", body), body); code != http.StatusOK {
				t.Fatalf("github with a raw 0xff in the query: %d %s, want 200", code, answer)
			}
			if got, want := storedURI("github"), "/webhooks/github?a=%FF&b=%FF&c=\u00e9"; got != want {
				t.Errorf("github request_uri %q, want %q", got, want)
			}

			// Twilio signs the URL: the one received, raw byte and all.
			form := []byte("MessageSid=SM1&MessageStatus=delivered")
			const target = "/webhooks/twilio?x=\xff"
			encoded, err := verify.SignTwilio(twilioToken, "http://"+host+"/webhooks/twilio?x=%FF", form)
			if err != nil {
				t.Fatal(err)
			}
			encoded.Set("Content-Type", "application/x-www-form-urlencoded")
			if code, answer := rawPost(t, b.url, target, encoded, form); code != http.StatusUnauthorized {
				t.Fatalf("twilio signed over the encoded URL, sent raw: %d %s, want 401", code, answer)
			}
			signed, err := verify.SignTwilio(twilioToken, "http://"+host+target, form)
			if err != nil {
				t.Fatal(err)
			}
			signed.Set("Content-Type", "application/x-www-form-urlencoded")
			if code, answer := rawPost(t, b.url, target, signed, form); code != http.StatusOK {
				t.Fatalf("twilio signed over the raw URL: %d %s, want 200", code, answer)
			}
			if got, want := storedURI("twilio"), "/webhooks/twilio?x=%FF"; got != want {
				t.Errorf("twilio request_uri %q, want %q", got, want)
			}
		})
	}
}
