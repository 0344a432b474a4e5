package backfill_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode"

	"github.com/inlet-dev/inlet/backfill"
)

// TestRefusalErrorNeverCarriesTheCredential (review helper-290, fixed).
// Defect: the error of a refused request is documented (CHANGELOG, review
// helper-282: "quotes the provider's own message (one line, at most 300
// bytes, control characters dropped, the credential replaced)") as safe to
// print and log, and `inlet backfill`/reconcile print and log it. Two paths
// bypass that: (1) backfill/client.go providerText replaces the credential
// BEFORE it drops format characters (U+200B, U+00AD, bidi marks), so a
// message that carries the token with one zero-width character inside it
// is not matched, and the token is then reassembled, whole, in the error;
// (2) statusError.Error quotes resp.Status, the provider's (or a proxy's)
// reason phrase, raw: unbounded, with control characters (ESC sequences
// reach the operator's terminal) and the credential not replaced.
// Setup: a real HTTP server answering the GitHub deliveries list 401 with
// (1) {"message":"Bad credentials: <token with U+200B inside>"} and (2) a
// status line "401 <token> ESC[2J <64 KiB>"; backfill.Run with that token.
// Expected: neither error contains the token, any control character, or
// more than a few KiB.
// Observed: (1) the error ends `the provider says "Bad credentials:
// ghp_review290SecretTokenValue0123456789"` whole; (2) a 65,755-byte error holding
// the token and ESC [2J (clear screen) raw.
// Fixed: providerText drops control and format characters first and
// replaces the credential after; statusError keeps only the status code
// and http.StatusText, not the server's reason phrase.
func TestRefusalErrorNeverCarriesTheCredential(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const token = "ghp_review290SecretTokenValue0123456789"

	check := func(t *testing.T, err error) {
		t.Helper()
		if err == nil {
			t.Fatal("a refused token was accepted")
		}
		msg := err.Error()
		var bad []string
		if strings.Contains(msg, token) {
			bad = append(bad, "it holds the token whole")
		}
		if strings.IndexFunc(msg, func(r rune) bool { return unicode.IsControl(r) && r != '\n' }) >= 0 {
			bad = append(bad, "it holds control characters")
		}
		if len(msg) > 4096 {
			bad = append(bad, fmt.Sprintf("it is %d bytes long", len(msg)))
		}
		if len(bad) > 0 {
			shown := msg
			if len(shown) > 600 {
				shown = shown[:300] + " … " + shown[len(shown)-300:]
			}
			t.Errorf("refusal error unfit to print or log: %s:\n%q", strings.Join(bad, "; "), shown)
		}
	}

	t.Run("token split by a zero-width character in the message", func(t *testing.T) {
		t.Parallel()
		split := token[:12] + "\u200b" + token[12:]
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.Header().Set("X-GitHub-Request-Id", "CAFE:290:1")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = fmt.Fprintf(w, `{"message":"Bad credentials: %s","documentation_url":"https://docs.github.com/rest","status":"401"}`, split)
		}))
		defer srv.Close()
		l, err := backfill.NewGitHub(backfill.GitHubConfig{Token: token, BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42})
		if err != nil {
			t.Fatal(err)
		}
		_, err = backfill.Run(context.Background(), b.config("github", "github"), l)
		check(t, err)
	})

	t.Run("token, escape sequence and 64 KiB in the reason phrase", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		reason := "Unauthorized token " + token + " \x1b[2J\x1b[31m" + strings.Repeat("A", 64<<10)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func(c net.Conn) {
					defer c.Close()
					r := bufio.NewReader(c)
					for { // the request's head
						line, err := r.ReadString('\n')
						if err != nil || line == "\r\n" {
							break
						}
					}
					body := `{"message":"Bad credentials"}`
					_, _ = fmt.Fprintf(c, "HTTP/1.1 401 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", reason, len(body), body)
				}(c)
			}
		}()
		l, err := backfill.NewGitHub(backfill.GitHubConfig{Token: token, BaseURL: "http://" + ln.Addr().String(), Repo: "acme/widgets", HookID: 42})
		if err != nil {
			t.Fatal(err)
		}
		cfg := b.config("github", "github")
		cfg.StatePath += ".2"
		_, err = backfill.Run(context.Background(), cfg, l)
		check(t, err)
	})
}
