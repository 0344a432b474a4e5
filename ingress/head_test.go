package ingress_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestHeadIsMethodNotAllowed: HEAD /webhooks/{source} for a source
// whose provider checks the endpoint with a GET handshake (meta here; also
// x, dropbox, okta).
//
// Regression test (review helper-98; fixed: the text describes the behaviour
// before the fix). the answer is 401 signature_missing (counted in
// inlet_ingress_rejected_total{reason="signature_missing"}, the series a
// signature-failure alert watches), not the documented 405. Go 1.22's
// ServeMux pattern "GET /webhooks/{source}" (ingress/server.go, New:
// mux.HandleFunc("GET /webhooks/{source}", s.handleWebhook)) also matches
// HEAD, and methodAllowed (server.go) lets any non-POST method through when
// verify.AnswersGET is true, so the HEAD reaches the verifier, which
// refuses it as an unsigned request (verify/presets.go: "a HEAD request is
// not one of the provider's handshakes" → ErrSignatureMissing). For every
// other source a HEAD gets 405 with Allow: POST, as the contract says
// ("405 wrong method"; server.go: "GET only for the providers that check
// the endpoint with a GET handshake (…); anything else is 405").
//
// Expected: 405 method_not_allowed with Allow: POST, GET, as for PUT.
func TestHeadIsMethodNotAllowed(t *testing.T) {
	t.Parallel()
	rs := startListening(t, nil)
	for _, target := range []string{"/webhooks/meta", "/webhooks/meta?hub.mode=subscribe&hub.verify_token=meta-verify-token&hub.challenge=42"} {
		conn, err := net.Dial("tcp", rs.host)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "HEAD %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, rs.host)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodHead})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		conn.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") == "" {
			t.Errorf("HEAD %s: %d (Allow %q); want 405 method_not_allowed with an Allow header, as every other method but POST/GET gets",
				target, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
}
