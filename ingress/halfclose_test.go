package ingress_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema"
)

// TestHalfClosedSenderIsStored: a sender writes a complete, correctly
// signed webhook and then half-closes its side of the TCP connection
// (shutdown(SHUT_WR) / CloseWrite: legal TCP, done by HTTP/1.0-style clients,
// `nc -N`, some proxies and serverless HTTP stacks), and keeps reading for
// the answer. The database is up and idle.
//
// Regression test (review helper-98; fixed: the text describes the behaviour
// before the fix). ingress answers 503 {"reason":"database_unavailable"} with
// Retry-After and stores nothing, with either store. net/http cancels
// r.Context() as soon as its background read sees the FIN (golang/go#18527),
// and handleWebhook (ingress/server.go, `ctx, cancel :=
// context.WithTimeout(ctx, s.cfg.StoreTimeout)` before wh.event/wh.store)
// derives the store's context from r.Context(): filters.match / pool
// acquire / groupcommit.Do fail at once with context.Canceled, classify
// (fault.go) calls it errNotWritten → faultNotStored → 503
// database_unavailable, inlet_ingress_unavailable_total is incremented and
// "webhook not stored" is logged at Error. A sender that always
// half-closes can never deliver (every retry meets the same 503: "a 5xx
// where retrying can never help"), and the operator is told the database
// is unavailable when it is fine.
//
// Expected: once the body is whole and verified, the write is bounded by
// ingress.store_timeout, not by the sender's read side: 200 stored, one
// row. (A sender that really left then still gets its event stored once,
// and its retry is answered duplicate.)
func TestAHalfClosedSendersEventIsStored(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"single", "group"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			rs := startListening(t, func(c *ingress.Config, dbURL string) {
				if kind == "group" {
					pool, err := database.Open(context.Background(), dbURL, database.Options{Role: schema.IngressRole})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(pool.Close)
					g := ingress.NewGroupStore(pool, nil, ingress.GroupConfig{})
					t.Cleanup(g.Close)
					c.Store = g
				}
			})
			for i := range 3 {
				id := fmt.Sprintf("evt_halfclose_%s_%d", kind, i)
				body := []byte(`{"id":"` + id + `","type":"t"}`)
				conn, err := net.Dial("tcp", rs.host)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(conn, "POST /webhooks/stripe HTTP/1.1\r\nHost: %s\r\nStripe-Signature: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
					rs.host, stripeSig(body), len(body), body)
				if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
				_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				answer, _ := io.ReadAll(conn)
				conn.Close()
				status, _, _ := strings.Cut(string(answer), "\r\n")
				_, n := rs.storedBody(t, id)
				if !strings.HasPrefix(status, "HTTP/1.1 200") || n != 1 {
					t.Fatalf("attempt %d: a whole signed webhook followed by a half-close got %q (%d rows stored) with the database up; want 200 stored and 1 row",
						i, strings.ReplaceAll(string(answer), "\r\n", " | "), n)
				}
			}
		})
	}
}
