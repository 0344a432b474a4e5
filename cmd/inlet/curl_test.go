package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/curlcmd"
)

// curlRequest reads a printed curl command line back into the request it
// sends (curlcmd.Parse).
func curlRequest(t *testing.T, cmd string) (method, url string, h http.Header, body []byte) {
	t.Helper()
	method, url, h, body, err := curlcmd.Parse(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return method, url, h, body
}

// A printed command carries the request exactly, whatever its bytes, as
// the shell reads it; one that would carry a secret is not printed.
func TestCurlCommand(t *testing.T) {
	t.Parallel()
	body := []byte("{\"a\":\"it's $HOME `id` \\\\ \\\"q\\\"\",\n\"b\":\"é\"}")
	h := http.Header{"X-Sig": {"v1=ab'cd"}, "Content-Type": {"application/json"}}
	for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodPut} {
		b := body
		if method == http.MethodGet {
			b = nil
		}
		cmd, err := curlCommand(method, "http://localhost:8080/webhooks/x?a=1&b='2'", h, b, []string{"the-secret"})
		if err != nil {
			t.Fatal(err)
		}
		m, u, gotH, gotB := curlRequest(t, cmd)
		if m != method || u != "http://localhost:8080/webhooks/x?a=1&b='2'" || !reflect.DeepEqual(gotH, h) || !bytes.Equal(gotB, b) {
			t.Errorf("%s: the shell reads %s %s %v %q from\n%s", method, m, u, gotH, gotB, cmd)
		}
	}
	if _, err := curlCommand(http.MethodPost, "http://x", http.Header{"X-Gitlab-Token": {"the-secret"}}, nil, []string{"the-secret"}); err == nil || strings.Contains(err.Error(), "the-secret") {
		t.Errorf("a request carrying the secret: %v", err)
	}
	if _, err := curlCommand(http.MethodPost, "http://x", nil, []byte("a\x00b"), nil); err == nil {
		t.Error("a body with NUL was printed")
	}
}

// --private-key takes the key or @FILE, and never repeats it in an error.
func TestReadPrivateKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte("  private-canary\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{"private-canary": "private-canary", "@" + file: "private-canary"} {
		if got, err := readPrivateKey(in); err != nil || got != want {
			t.Errorf("readPrivateKey(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"@" + filepath.Join(dir, "missing"), "@" + empty} {
		if _, err := readPrivateKey(in); err == nil {
			t.Errorf("readPrivateKey(%q): no error", in)
		}
	}
}
