package relay_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testlog"
	"github.com/inlet-dev/inlet/relay"
	"github.com/inlet-dev/inlet/schema"
)

// rawPost sends a stripe webhook to the relay as raw HTTP/1.1 bytes, with
// extra header lines exactly as given (a Go client cannot send an empty or a
// repeated User-Agent), and returns the relay's answer.
func rawPost(t *testing.T, relayURL string, body []byte, extra ...string) (int, string) {
	t.Helper()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeSecret, Timestamp: time.Now()})
	host := strings.TrimPrefix(relayURL, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "POST /webhooks/stripe HTTP/1.1\r\nHost: %s\r\n", host)
	fmt.Fprintf(&b, "Content-Type: application/json\r\nStripe-Signature: %s\r\n", signed.Header)
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(a)
}

// wire is a bundle whose ingress speaks HTTP/2 or HTTP/1.1 only, and whose
// relay runs on relay.NewTransport (with compression on when asked), traced:
// proto is the protocol the relay's connection negotiated, and wrote holds,
// by lower-case name, the header values the transport put on the wire.
type wire struct {
	*bundle
	mu    sync.Mutex
	proto string
	wrote map[string][]string
}

func setupWire(t *testing.T, h2, compress bool) *wire {
	t.Helper()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	w := &wire{bundle: &bundle{relayLogs: &testlog.Buffer{}, ingestLogs: &testlog.Buffer{}, reg: prometheus.NewRegistry()}, wrote: map[string][]string{}}
	admin, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	w.admin = admin
	pool, err := database.Open(ctx, dbURL, database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ing, err := ingress.New(ingress.Config{
		Section: ingress.Section{MaxBodyBytes: 1 << 20, StoreTimeout: 10 * time.Second},
		Sources: testSources(relaySecret),
		Store:   ingress.NewPGStore(pool, nil),
		Logger:  slog.New(slog.NewJSONHandler(w.ingestLogs, nil)),
		Metrics: w.reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(ing.Handler())
	hs.EnableHTTP2 = h2
	hs.StartTLS()
	t.Cleanup(hs.Close)
	w.ingressURL = hs.URL
	w.caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(w.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	base, err := relay.NewTransport(w.caFile)
	if err != nil {
		t.Fatal(err)
	}
	base.DisableCompression = !compress
	trace := &httptrace.ClientTrace{
		GotConn: func(ci httptrace.GotConnInfo) {
			if tc, ok := ci.Conn.(*tls.Conn); ok {
				w.mu.Lock()
				w.proto = tc.ConnectionState().NegotiatedProtocol
				w.mu.Unlock()
			}
		},
		WroteHeaderField: func(key string, value []string) {
			w.mu.Lock()
			k := strings.ToLower(key)
			w.wrote[k] = append(w.wrote[k], value...)
			w.mu.Unlock()
		},
	}
	srv, err := relay.New(relay.Config{
		Section: relay.Section{Target: hs.URL, Secrets: []string{relaySecret}, CAFile: w.caFile, Timeout: 5 * time.Second, MaxBodyBytes: 4 << 10},
		Sources: testSources(),
		Logger:  slog.New(slog.NewJSONHandler(w.relayLogs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Transport: roundTripper(func(req *http.Request) (*http.Response, error) {
			return base.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	rs := httptest.NewServer(srv.Handler())
	t.Cleanup(rs.Close)
	w.relayURL = rs.URL
	return w
}

// post sends body with the extra header lines through the relay and fails
// the test unless the event was stored; it returns the stored headers.
func (w *wire) post(t *testing.T, h2 bool, body []byte, extra ...string) http.Header {
	t.Helper()
	code, answer := rawPost(t, w.relayURL, body, extra...)
	w.mu.Lock()
	proto := w.proto
	w.mu.Unlock()
	if want := map[bool]string{true: "h2", false: "http/1.1"}[h2]; proto != want {
		t.Fatalf("premise: relay->ingress protocol %q, want %q", proto, want)
	}
	if code != http.StatusOK || w.events(t) != 1 {
		t.Fatalf("verified webhook with %q: relay answered %d %s, %d events stored; want 200 and the event stored\nrelay log:\n%s",
			extra, code, strings.TrimSpace(answer), w.events(t), w.relayLogs.String())
	}
	var headers map[string][]string
	if err := w.admin.QueryRow(context.Background(), `SELECT headers FROM webhook_ingress.events`).Scan(&headers); err != nil {
		t.Fatal(err)
	}
	return headers
}

var protocols = []struct {
	name string
	h2   bool
}{{"http1", false}, {"http2", true}}

// (review helper-182, fixed; this describes the code before the fix)
// DEFECT: a genuine, provider-verified webhook that carries an empty
// User-Agent header, or more than one User-Agent line, is never delivered
// through the relay. The relay signs every value of every forwarded header
// (verify.SignRelay lists "user-agent" and hashes "user-agent:\n", or both
// values), but Go's HTTP client writes at most one User-Agent and none at all
// when its value is empty (net/http request.write / httpcommon: "at most one
// User-Agent. If set to nil or empty string, then omit it"). The ingress
// therefore receives headers that differ from what the relay signed and
// refuses with 401 relay_headers_mismatch; the relay answers the provider 502
// ingress_rejected with Retry-After, and every retry fails the same way until
// the provider gives up: a valid event is lost, and the operator is told the
// relay and ingress "disagree on secrets, limits or clocks", which they don't.
//
// FIX: relay/forward.go wireHeaders, before SignRelay, keeps the first
// User-Agent only and drops an empty one, which is what the transport sends
// (and the relay still sends none rather than Go's own).
func TestRelayEmptyOrRepeatedUserAgentIsDelivered(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		for _, c := range []struct {
			name  string
			extra []string
			want  []string // the stored User-Agent
		}{
			{"empty", []string{"User-Agent:"}, nil},
			{"repeated", []string{"User-Agent: Provider/1.0", "User-Agent: lib/2.3"}, []string{"Provider/1.0"}},
			{"empty then one", []string{"User-Agent:", "User-Agent: lib/2.3"}, nil},
		} {
			t.Run(p.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				w := setupWire(t, p.h2, false)
				body := []byte(`{"id":"evt_ua","type":"invoice.paid"}`)
				stored := w.post(t, p.h2, body, c.extra...)
				if got := stored["User-Agent"]; !slices.Equal(got, c.want) {
					t.Fatalf("stored User-Agent %q, want %q", got, c.want)
				}
			})
		}
	}
}

// (review helper-182, fixed; this describes the code before the fix)
// DEFECT: the relay signs the Cookie header as the provider sent it, but its
// transport speaks HTTP/2 to an https target (NewTransport:
// ForceAttemptHTTP2), and HTTP/2 carries Cookie as separate crumbs that the
// receiving side joins back with "; " (RFC 9113 8.2.3; Go's http2 server,
// nginx, envoy all do). So a provider's "Cookie: a=1;b=2", or two Cookie
// lines, reaches an HTTP/2 ingress as "a=1; b=2": the ingress refuses with
// 401 relay_headers_mismatch and the relay answers 502 ingress_rejected on
// every retry; the verified event is never stored.
//
// FIX: relay/forward.go wireHeaders, before SignRelay, rewrites Cookie as
// the one value an HTTP/2 receiver rebuilds (crumbs trimmed, empty ones
// dropped, joined with "; "), which an HTTP/1.1 ingress gets verbatim.
func TestRelayCookieThroughHTTP2IngressIsDelivered(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		for _, c := range []struct {
			name  string
			extra []string
			want  []string // the stored Cookie
		}{
			{"one value", []string{"Cookie: a=1;b=2"}, []string{"a=1; b=2"}},
			{"two lines", []string{"Cookie: a=1", "Cookie: b=2 ;; c=3;"}, []string{"a=1; b=2; c=3"}},
			{"no crumb", []string{"Cookie: ; ;"}, nil},
		} {
			t.Run(p.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				w := setupWire(t, p.h2, false)
				body := []byte(`{"id":"evt_cookie","type":"invoice.paid"}`)
				stored := w.post(t, p.h2, body, c.extra...)
				if got := stored["Cookie"]; !slices.Equal(got, c.want) {
					t.Fatalf("stored Cookie %q, want %q", got, c.want)
				}
			})
		}
	}
}

// A transport with compression on adds "Accept-Encoding: gzip" to a request
// without one, and over HTTP/1.1 (net/http: Header.Get == "") to one whose
// first Accept-Encoding is empty too, beside the signed empty value: 401
// relay_headers_mismatch and 502 on every retry. The relay forwards no empty
// value, so what it signed is what arrives, over either protocol, and the
// transport's own value, unsigned, is neither checked nor stored.
func TestRelayEmptyAcceptEncodingThroughCompressingTransportIsDelivered(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			w := setupWire(t, p.h2, true)
			body := []byte(`{"id":"evt_accept_encoding","type":"invoice.paid"}`)
			stored := w.post(t, p.h2, body, "Accept-Encoding:")
			w.mu.Lock()
			wrote := w.wrote["accept-encoding"]
			w.mu.Unlock()
			if !slices.Equal(wrote, []string{"gzip"}) {
				t.Fatalf("premise: the transport wrote Accept-Encoding %q, want its own gzip only", wrote)
			}
			if got, ok := stored["Accept-Encoding"]; ok {
				t.Fatalf("stored Accept-Encoding %q, which the provider did not send", got)
			}
		})
	}
}
