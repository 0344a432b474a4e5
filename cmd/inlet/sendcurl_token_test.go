package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestHandshakeCurlLeaksVerifyToken (review helper-161, fixed; this
// describes the code before the fix): `inlet send SOURCE --handshake
// --curl` for a meta source printed the probe's URL, which carries the source's verify_token
// (?hub.verify_token=...), in the curl command. sendHandshake's own comment
// says "The probe's URL is never printed: it may carry the source's verify
// token", and docs/operations.md says --curl never prints a command that
// carries the secret itself; curlCommand only checks src.Secrets against
// headers and body, never the verify token nor the URL.
// Now: the command is refused (like GitLab's token) or the token is
// not disclosed.
func TestHandshakeCurlLeaksVerifyToken(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Chdir(t.TempDir())
	const token = "vt-canary-token-77"
	cfg := "sources:\n  - name: meta\n    type: meta\n    secrets: [\"app-secret-canary\"]\n    verify_token: \"" + token + "\"\n"
	if err := os.WriteFile("inlet.yaml", []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), &environment{stdout: &out, stderr: &errOut},
		[]string{"send", "--config", "inlet.yaml", "--handshake", "--curl", "meta"})
	if err == nil && out.Len() == 0 {
		t.Fatalf("no output and no error; stderr %q", errOut.String())
	}
	if strings.Contains(out.String()+errOut.String(), token) {
		t.Errorf("inlet send meta --handshake --curl printed the verify token:\n%s", out.String())
	}
	if err != nil && strings.Contains(err.Error(), token) {
		t.Errorf("error carries the verify token: %v", err)
	}
}
