package tests

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/curlcmd"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// presetSources is a source entry, named after its type, for every
// provider preset: its copy-ready PresetDoc.Source with each ${VAR} given a
// test value. A preset whose test event cannot be signed from its entry
// alone (a key pair's public key, which needs inlet send --private-key) is
// left out and logged.
func presetSources(t *testing.T) (yamlText string, names []string, keys map[string]string) {
	t.Helper()
	vars := regexp.MustCompile(`\$\{([A-Za-z0-9_]+)\}`)
	var sb strings.Builder
	keys = map[string]string{}
	for _, typ := range verify.Presets() {
		doc, _ := verify.PresetDocOf(typ)
		public, private := testKeyPair(t, typ)
		src := vars.ReplaceAllStringFunc(doc.Source, func(v string) string {
			if public != "" {
				return public // the provider's public key, for a key-pair provider
			}
			return "whsec_" + base64.StdEncoding.EncodeToString([]byte("e2e "+strings.ToLower(v)))
		})
		var cfg verify.Config
		if err := yaml.Unmarshal([]byte(src), &cfg); err != nil {
			t.Fatalf("preset %s: its Source is no YAML: %v\n%s", typ, err, src)
		}
		if _, err := verify.New(cfg); err != nil {
			t.Fatalf("preset %s: its Source with test values: %v", typ, err)
		}
		sign := func() error {
			_, _, err := verify.SignTest(cfg, "evt_e2e", nil, "http://127.0.0.1/webhooks/"+typ, time.Now())
			return err
		}
		if private != "" {
			keys[typ] = private
			sign = func() error {
				_, _, err := verify.SignTestKey(cfg, private, "evt_e2e", nil, "http://127.0.0.1/webhooks/"+typ, time.Now())
				return err
			}
		}
		if err := sign(); err != nil {
			t.Fatalf("preset %s: %v", typ, err)
		}
		sb.WriteString("  - name: " + typ + "\n    " + strings.ReplaceAll(strings.TrimSpace(src), "\n", "\n    ") + "\n")
		names = append(names, typ)
	}
	return sb.String(), names, keys
}

// testKeyPair is a new key pair for a preset whose source holds the
// provider's public key (discord: Ed25519 hex; sendgrid: ECDSA P-256, base64
// DER), with the private key as inlet send --private-key takes it; "" for
// the others.
func testKeyPair(t *testing.T, typ string) (public, private string) {
	t.Helper()
	if !verify.UsesPublicKeys(typ) {
		return "", ""
	}
	switch typ {
	case "discord":
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return hex.EncodeToString(pub), hex.EncodeToString(priv.Seed())
	case "sendgrid":
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		priv, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(pub), base64.StdEncoding.EncodeToString(priv)
	}
	t.Fatalf("preset %s uses public keys: give it a test key pair here", typ)
	return "", ""
}

// keyArgs are the --private-key arguments of src, if it signs with one.
func keyArgs(keys map[string]string, src string) []string {
	if k := keys[src]; k != "" {
		return []string{"--private-key", k}
	}
	return nil
}

// curlRequest builds the request a printed curl command line sends
// (curlcmd.Parse).
func curlRequest(t *testing.T, cmd string) *http.Request {
	t.Helper()
	method, url, h, body, err := curlcmd.Parse(cmd)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatalf("the request of %q: %v", cmd, err)
	}
	req.Header = h
	return req
}

// do sends req and returns its status and body.
func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Redacted(), err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// inlet send --handshake sends each provider's endpoint check to a running
// ingress and checks the answer as the provider would; nothing is stored. A
// provider without one, a wrong verify token, and --curl of a handshake.
func TestSendHandshake(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	addr := freeAddr(t)
	presets, names, keys := presetSources(t)
	config := func(metaToken string) string {
		return `
database_url: ${DATABASE_URL}
ingress:
  listen: "` + addr + `"
  metrics_listen: "127.0.0.1:0"
sources:
  - {name: github, type: github, secrets: ["gh-e2e"]}
  - {name: slack, type: slack, secrets: ["slack-e2e"]}
  - {name: fb, type: meta, secrets: ["meta-e2e"], verify_token: "` + metaToken + `"}
` + presets
	}
	dir := t.TempDir()
	cfg := writeFile(t, dir, "inlet.yaml", config("meta-verify-e2e"))
	env := cleanEnv("DATABASE_URL=" + url)
	p := start(t, env, "ingress", "--config", cfg)
	p.waitLog("ingress listening", 30*time.Second)
	base := "http://" + addr

	sent := 0
	for _, src := range append([]string{"slack", "fb"}, names...) {
		out, errOut, code := runInlet(t, env, append([]string{"send", src, "--config", cfg, "--url", base, "--handshake"}, keyArgs(keys, src)...)...)
		if strings.Contains(errOut, "sends no handshake") {
			continue // a preset without one
		}
		sent++
		if code != 0 || !strings.Contains(out, "handshake") || !strings.HasSuffix(strings.TrimSpace(out), ": OK") {
			t.Errorf("send %s --handshake: exit %d\n%s%s", src, code, out, errOut)
		}
		// The same as a ready curl, whose answer passes too.
		out, errOut, code = runInlet(t, env, append([]string{"send", src, "--config", cfg, "--url", base, "--handshake", "--curl"}, keyArgs(keys, src)...)...)
		if strings.Contains(errOut, "carries the secret itself") { // Okta's Authorization
			if code != 1 || strings.Contains(out+errOut, "whsec_") {
				t.Errorf("send %s --handshake --curl: exit %d\n%s%s", src, code, out, errOut)
			}
			continue
		}
		if code != 0 {
			t.Errorf("send %s --handshake --curl: exit %d\n%s%s", src, code, out, errOut)
			continue
		}
		// (WooCommerce's ping is answered with an empty 200.)
		if status, answer := do(t, curlRequest(t, out)); status != http.StatusOK || (answer == "" && src != "woocommerce") {
			t.Errorf("the curl of %s's handshake: %d %q", src, status, answer)
		}
	}
	if out, errOut, code := runInlet(t, env, "send", "slack", "--config", cfg, "--url", base, "--handshake"); code != 0 ||
		!strings.Contains(out, "200 OK POST "+base+"/webhooks/slack handshake url_verification: OK") {
		t.Errorf("send slack --handshake: exit %d\n%s%s", code, out, errOut)
	}

	// A provider that sends none: a clear error, exit 1.
	out, errOut, code := runInlet(t, env, "send", "github", "--config", cfg, "--url", base, "--handshake")
	if code != 1 || !strings.Contains(errOut, `handshake for source "github": type github: the provider sends no handshake`) {
		t.Errorf("send github --handshake: exit %d\n%s%s", code, out, errOut)
	}
	// A sender whose verify token is not the ingress's: refused, and said so.
	other := writeFile(t, dir, "other.yaml", config("guessed-token"))
	out, errOut, code = runInlet(t, env, "send", "fb", "--config", other, "--url", base, "--handshake")
	if code != 1 || !strings.Contains(errOut, "handshake subscribe: the provider would not accept the answer: want 200") ||
		strings.Contains(out+errOut, "guessed-token") || strings.Contains(out+errOut, "meta-verify-e2e") {
		t.Errorf("send with a wrong verify token: exit %d\n%s%s", code, out, errOut)
	}
	// --handshake sends the provider's own request.
	if _, errOut, code := runInlet(t, env, "send", "fb", "--config", cfg, "--url", base, "--handshake", "--id", "x"); code != 2 || !strings.Contains(errOut, "do not apply") {
		t.Errorf("--handshake --id: exit %d\n%s", code, errOut)
	}
	// --private-key never shows the key, whatever it answers.
	out, errOut, code = runInlet(t, env, "send", "github", "--config", cfg, "--url", base, "--private-key", "private-key-canary-e2e")
	if code == 0 || strings.Contains(out+errOut, "private-key-canary-e2e") {
		t.Errorf("send --private-key: exit %d\n%s%s", code, out, errOut)
	}

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d events stored by %d handshakes (%v), want none", n, sent, err)
	}
	if sent < 2 {
		t.Fatalf("%d handshakes sent, want slack's and meta's at least", sent)
	}
}
