package ingress_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress/verify"
)

// rawRequest sends method and target byte for byte (net/http's client
// cleans nothing, but its URL parser would) and returns the answer.
func rawRequest(t *testing.T, base, method, target string, header http.Header, body []byte) (*http.Response, string) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var req bytes.Buffer
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nConnection: close\r\n", method, target, u.Host, len(body))
	for k, vs := range header {
		for _, v := range vs {
			fmt.Fprintf(&req, "%s: %s\r\n", k, v)
		}
	}
	req.WriteString("\r\n")
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp, string(answer)
}

// TestUncleanWebhookPathIsAnsweredAsDocumented: a signed webhook
// POSTed to a path under /webhooks/ that is not in net/http's clean form
// (/webhooks//stripe, as a proxy joining "https://inlet/" and
// "/webhooks/stripe" produces, or /webhooks/./stripe) is answered by
// net/http's ServeMux itself with a redirect (307 or 301, Location
// /webhooks/stripe, no body, no Content-Type) before any Inlet handler runs.
//
// Defect: server.go (New, the mux.HandleFunc("/webhooks/", ...) block)
// promises that "every other answer under /webhooks/ is the documented
// JSON", and the contract (DESIGN.md, External contract) lists only
// 200/401/400/404/405/413/503 for POST /webhooks/{source}. Providers do not
// follow redirects for webhook POSTs (Stripe, GitHub count a 3xx as a
// failed delivery), so every delivery fails with an answer that is neither
// in the contract nor says why, and nothing counts it in
// inlet_ingress_rejected_total (the handler never ran).
//
// Expected: a JSON answer from Inlet: either the webhook is routed to its
// source (verified and stored, 200), or 404 {"status":"rejected",
// "reason":"unknown_source"} like /webhooks/stripe/extra.
func TestUncleanWebhookPathIsAnsweredAsDocumented(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, target := range []string{"/webhooks//stripe", "/webhooks/./stripe", "/webhooks/x/../stripe"} {
		body := []byte(`{"id":"evt_path_review","type":"invoice.paid"}`)
		h := verify.SignStripe(stripeSecret, time.Now(), body)
		h.Set("Content-Type", "application/json")
		resp, answer := rawRequest(t, b.url, http.MethodPost, target, h, body)
		ct := resp.Header.Get("Content-Type")
		if resp.StatusCode/100 == 3 || !strings.HasPrefix(ct, "application/json") || !strings.Contains(answer, `"status":`) {
			t.Errorf("POST %s: %d, Content-Type %q, Location %q, body %q; want Inlet's JSON answer (200 stored or 404 unknown_source), not a redirect",
				target, resp.StatusCode, ct, resp.Header.Get("Location"), answer)
		}
	}
}
