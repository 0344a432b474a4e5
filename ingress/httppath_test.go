package ingress_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testlog"
	"github.com/inlet-dev/inlet/schema"
)

// startedLikeInletIngress runs ingress the way `inlet ingress` does: Server.Start, so
// the listener has the section's read and write timeouts (setupWith serves
// the handler from httptest, without them).
func startedLikeInletIngress(t *testing.T, sec ingress.Section) (addr string, logs *testlog.Buffer) {
	t.Helper()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	pool, err := database.Open(ctx, dbURL, database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logs = &testlog.Buffer{}
	sec.Listen = "127.0.0.1:0"
	if err := sec.WithDefaults().Validate(); err != nil {
		t.Fatalf("the section is not a valid configuration: %v", err)
	}
	srv, err := ingress.New(ingress.Config{
		Section: sec,
		Sources: []sources.Source{{Name: "stripe", Config: verify.Config{Type: "stripe", Secrets: []string{stripeSecret}}}},
		Store:   ingress.NewPGStore(pool, nil),
		Logger:  slog.New(slog.NewJSONHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Stop(c)
	})
	return srv.Addr().String(), logs
}

// The documented 408 body_read_timeout for "the whole rest not within
// ingress.read_timeout" reaches the sender with the shipped timeouts: the
// overall read deadline of the rest starts when the head has arrived, so it
// passes at least read_timeout after the headers, later than net/http's
// write deadline (write_timeout, equal by default), which readBody pushes
// out for the answer. (Found by a review: the 408 was written past the
// deadline and the sender saw the connection close.) Here read_timeout =
// write_timeout = 3 s and a sender keeps each 64 KiB step on time but its
// whole rest takes longer than 3 s.
func TestRestOverReadTimeoutGets408(t *testing.T) {
	t.Parallel()
	addr, _ := startedLikeInletIngress(t, ingress.Section{
		MaxBodyBytes: 256 << 10,
		ReadTimeout:  3 * time.Second,
		WriteTimeout: 3 * time.Second,
		StoreTimeout: time.Second,
	})
	body := []byte(`{"id":"evt_slow_rest","type":"t","pad":"` + strings.Repeat("x", 200<<10) + `"}`)
	sig := verify.SignStripe(stripeSecret, time.Now(), body).Get("Stripe-Signature")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var head bytes.Buffer
	fmt.Fprintf(&head, "POST /webhooks/stripe HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nStripe-Signature: %s\r\nContent-Length: %d\r\n\r\n",
		addr, sig, len(body))
	// The head and one byte more at once, then a 64 KiB step every 1.2 s
	// (each step within its 2 s), and then nothing: the rest as a whole
	// overruns read_timeout.
	head.Write(body[:16<<10+1])
	if _, err := conn.Write(head.Bytes()); err != nil {
		t.Fatal(err)
	}
	answered := make(chan string, 1)
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- "no answer: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answered <- fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}()
	sent := 16<<10 + 1
	for range 2 {
		select {
		case a := <-answered:
			t.Fatalf("answered while every step was on time: %s", a)
		case <-time.After(1200 * time.Millisecond):
		}
		if _, err := conn.Write(body[sent : sent+64<<10]); err != nil {
			t.Fatal(err)
		}
		sent += 64 << 10
	}
	got := <-answered
	if !strings.HasPrefix(got, "408 ") || !strings.Contains(got, `"body_read_timeout"`) {
		t.Fatalf("a body whose rest overran ingress.read_timeout got %q; the documented answer is 408 body_read_timeout", got)
	}
}

// "Every answer is a small JSON object, {"status": …, "reason": …}" and
// "any other path is 404 unknown_source" (docs/pipeline.md): also a method
// other than GET/POST on a source's path, a path with a second segment or
// an empty source name. (Found by a review: the ServeMux answered those
// itself, in net/http's plain text.)
func TestEveryAnswerUnderWebhooksIsJSON(t *testing.T) {
	t.Parallel()
	b := setupWith(t, pgtest.NewDatabase(t), func(*ingress.Config) {})
	for _, c := range []struct {
		method, path string
		code         int
		reason       string
	}{
		{http.MethodPut, "/webhooks/stripe", 405, ""},
		{http.MethodPost, "/webhooks/stripe/extra", 404, "unknown_source"},
		{http.MethodPost, "/webhooks/", 404, "unknown_source"},
	} {
		req, err := http.NewRequest(c.method, b.url+c.path, strings.NewReader(`{"id":"evt_x","type":"t"}`))
		if err != nil {
			t.Fatal(err)
		}
		code, answer, hdr := do(t, req)
		ct := hdr.Get("Content-Type")
		if code != c.code || !strings.HasPrefix(ct, "application/json") || !strings.Contains(answer, `"status":"rejected"`) ||
			(c.reason != "" && !strings.Contains(answer, `"reason":"`+c.reason+`"`)) {
			t.Errorf("%s %s: %d %s %q; want %d, a JSON answer {\"status\":\"rejected\"…%s}", c.method, c.path, code, ct, strings.TrimSpace(answer), c.code, c.reason)
		}
	}
}
