package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/inletyaml"
)

// The walkthrough prints a ready signed curl only for the public
// development secret, and a database URL never with its password.
func TestDevWalkthroughPrintsNoSecret(t *testing.T) {
	const (
		password = "canary-db-password"
		ghSecret = "canary-github-secret"
		local    = "postgres://postgres@127.0.0.1:5999/postgres?sslmode=disable"
		withPW   = "postgres://inlet:" + password + "@db.internal:5432/inlet?sslmode=require"
	)
	walkthrough := func(t *testing.T, dbURL string) string {
		t.Helper()
		t.Setenv("INLET_METRICS_LISTEN", "")
		cfg, err := inletyaml.Dev()
		if err != nil {
			t.Fatal(err)
		}
		cfg.DatabaseURL = dbURL
		var out bytes.Buffer
		printWalkthrough(&environment{stdout: &out, stderr: &out}, cfg, "[::]:8080", "embedded defaults")
		return out.String()
	}
	// What the old walkthrough printed for a secret of one's own: a
	// signature valid forever.
	leaked := verify.SignGitHub(ghSecret, "00000000-0000-0000-0000-000000000001", "ping", []byte(`{"zen":"Keep it logically awesome."}`)).Get("X-Hub-Signature-256")

	t.Run("development secrets", func(t *testing.T) {
		t.Setenv("GITHUB_WEBHOOK_SECRET", "")
		t.Setenv("DATABASE_URL", "")
		out := walkthrough(t, local)
		for _, want := range []string{"X-Hub-Signature-256: sha256=", "psql '" + local + "'", "inlet send github",
			"Metrics: http://127.0.0.1:8083/metrics (this machine only", "inlet send SOURCE --curl"} {
			if !strings.Contains(out, want) {
				t.Errorf("walkthrough lacks %q:\n%s", want, out)
			}
		}
		// The ready curl, as the shell reads it, is accepted by the
		// source's verifier.
		start := strings.Index(out, "curl -i")
		end := strings.Index(out[start:], "\n\n")
		if start < 0 || end < 0 {
			t.Fatalf("no curl in:\n%s", out)
		}
		method, url, h, body := curlRequest(t, out[start:start+end])
		gh, _ := firstOfType(mustDev(t), "github")
		v, err := verify.New(gh.Config)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := v.Verify(&verify.Request{Method: method, URL: url, Header: h, Body: body}); err != nil ||
			method != "POST" || url != "http://localhost:8080/webhooks/"+gh.Name || res.EventType != "ping" {
			t.Errorf("the printed curl (%s %s): %+v, %v", method, url, res, err)
		}
	})
	t.Run("own secret, DATABASE_URL with a password", func(t *testing.T) {
		t.Setenv("GITHUB_WEBHOOK_SECRET", ghSecret)
		t.Setenv("DATABASE_URL", withPW)
		out := walkthrough(t, withPW)
		for _, bad := range []string{password, ghSecret, leaked, "X-Hub-Signature-256", "curl -i"} {
			if strings.Contains(out, bad) {
				t.Errorf("walkthrough prints %q:\n%s", bad, out)
			}
		}
		for _, want := range []string{"inlet send github", `psql "$DATABASE_URL"`, "No ready curl for github"} {
			if !strings.Contains(out, want) {
				t.Errorf("walkthrough lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("database_url of a config file with a password", func(t *testing.T) {
		t.Setenv("DATABASE_URL", "")
		out := walkthrough(t, withPW)
		if strings.Contains(out, password) || !strings.Contains(out, "psql 'postgres://inlet:xxxxx@db.internal:5432/inlet?sslmode=require'") ||
			!strings.Contains(out, "password is left out") {
			t.Errorf("walkthrough:\n%s", out)
		}
	})
}

func mustDev(t *testing.T) inletyaml.Config {
	t.Helper()
	cfg, err := inletyaml.Dev()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The secrets the walkthrough treats as public are the embedded defaults'.
func TestDevSecretsAreTheEmbeddedOnes(t *testing.T) {
	t.Setenv("GITHUB_WEBHOOK_SECRET", "")
	t.Setenv("INLET_ADMIN_TOKEN", "")
	cfg, err := inletyaml.Dev()
	if err != nil {
		t.Fatal(err)
	}
	gh, ok := firstOfType(cfg, "github")
	if !ok || len(gh.Secrets) == 0 || gh.Secrets[0] != devGitHubSecret {
		t.Errorf("embedded github source %+v, want secret %q", gh, devGitHubSecret)
	}
	if cfg.Admin.Token != devAdminToken {
		t.Errorf("embedded admin token %q, want %q", cfg.Admin.Token, devAdminToken)
	}
}

// Every listener that serves /metrics binds loopback unless configured.
func TestMetricsListenersDefaultToLoopback(t *testing.T) {
	t.Setenv("INLET_METRICS_LISTEN", "")
	dev, err := inletyaml.Dev()
	if err != nil {
		t.Fatal(err)
	}
	def := inletyaml.Config{}.WithDefaults()
	for field, addr := range map[string]string{
		"ingress.metrics_listen":             def.Ingress.MetricsListen,
		"streamer.health_listen":             def.Streamer.HealthListen,
		"consumer.health_listen":             def.Consumer.HealthListen,
		"ingress.metrics_listen (inlet dev)": dev.Ingress.MetricsListen,
	} {
		if !loopback(addr) {
			t.Errorf("%s defaults to %q: not loopback", field, addr)
		}
	}
	for addr, want := range map[string]bool{
		"127.0.0.1:8083": true, "[::1]:8083": true, "localhost:8083": true, "127.0.0.2:1": true,
		":8083": false, "0.0.0.0:8083": false, "[::]:8083": false, "10.0.0.5:8083": false, "off": false,
	} {
		if got := loopback(addr); got != want {
			t.Errorf("loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// --port-base moves every listener of inlet dev (keeping each host); each
// listener's own flag wins over it, and off switches off /metrics and the
// admin API.
func TestDevListenerFlags(t *testing.T) {
	for _, v := range []string{"INLET_LISTEN", "INLET_METRICS_LISTEN", "INLET_ADMIN_LISTEN"} {
		t.Setenv(v, "")
	}
	dev := func(t *testing.T, portBase int, listen, metrics, admin string) inletyaml.Config {
		t.Helper()
		cfg, err := inletyaml.Dev()
		if err != nil {
			t.Fatal(err)
		}
		if err := applyDevListeners(&cfg, portBase, listen, metrics, admin); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg := dev(t, 9080, "", "", "")
	if cfg.Ingress.Listen != ":9080" || cfg.Ingress.MetricsListen != "127.0.0.1:9083" || cfg.Admin.Listen != "127.0.0.1:9084" {
		t.Errorf("--port-base 9080: %q %q %q", cfg.Ingress.Listen, cfg.Ingress.MetricsListen, cfg.Admin.Listen)
	}
	cfg = dev(t, 9080, "127.0.0.1:7000", "off", "off")
	if cfg.Ingress.Listen != "127.0.0.1:7000" || cfg.Ingress.MetricsListen != "off" || cfg.Admin.Listen != "" {
		t.Errorf("flags over --port-base: %q %q %q", cfg.Ingress.Listen, cfg.Ingress.MetricsListen, cfg.Admin.Listen)
	}
	if ls := devListeners(cfg); len(ls) != 1 || ls[0].setting != "ingress.listen" {
		t.Errorf("listeners with metrics and admin off: %+v", ls)
	}
	c, err := inletyaml.Dev()
	if err != nil {
		t.Fatal(err)
	}
	if err := applyDevListeners(&c, 0, "127.0.0.1:7000", "", "127.0.0.1:7000"); err == nil {
		t.Error("the admin API on the webhook listener was accepted")
	}
	if err := applyDevListeners(&c, 70000, "", "", ""); err == nil {
		t.Error("--port-base 70000 was accepted")
	}
}

// Ingress warns when a source verifies with a public development secret and
// the listener reaches beyond this machine, and only then.
func TestWarnPublicSecrets(t *testing.T) {
	for _, c := range []struct {
		listen, githubSecret string
		warn                 bool
	}{
		{":8080", "", true},
		{"0.0.0.0:8080", "", true},
		{"192.0.2.1:8080", "", true},
		{"127.0.0.1:8080", "", false},
		{"localhost:8080", "", false},
		{"[::1]:8080", "", false},
		{":8080", "whsec_mine", true}, // acme and stripe still use theirs
	} {
		t.Run(c.listen+" "+c.githubSecret, func(t *testing.T) {
			t.Setenv("GITHUB_WEBHOOK_SECRET", c.githubSecret)
			cfg := mustDev(t)
			cfg.Ingress.Listen = c.listen
			var out bytes.Buffer
			warnPublicSecrets(cfg, slog.New(slog.NewTextHandler(&out, nil)))
			got := out.String()
			if warned := strings.Contains(got, "level=WARN") && strings.Contains(got, "public development secrets"); warned != c.warn {
				t.Fatalf("warned %v, want %v: %q", warned, c.warn, got)
			}
			if c.warn && (!strings.Contains(got, "addr="+c.listen) || !strings.Contains(got, "acme")) {
				t.Errorf("the warning names neither the address nor the sources: %q", got)
			}
			if c.githubSecret != "" && strings.Contains(got, "github") {
				t.Errorf("github has a secret of its own, yet is named: %q", got)
			}
		})
	}
	// Secrets of one's own everywhere: nothing to warn about.
	t.Setenv("GITHUB_WEBHOOK_SECRET", "mine")
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_mine")
	t.Setenv("ACME_WEBHOOK_SECRET", "whsec_bWluZQ==")
	var out bytes.Buffer
	warnPublicSecrets(mustDev(t), slog.New(slog.NewTextHandler(&out, nil)))
	if out.Len() != 0 {
		t.Errorf("warned with every secret one's own: %q", out.String())
	}
}

// inlet config check passes a file whose sources use the public development
// secrets, with a warning when ingress listens beyond loopback.
func TestConfigCheckWarnsOfPublicSecrets(t *testing.T) {
	dir := t.TempDir()
	check := func(listen string) (string, string) {
		t.Helper()
		path := filepath.Join(dir, "inlet.yaml")
		if err := os.WriteFile(path, []byte(`database_url: postgres://127.0.0.1:1/x
ingress:
  listen: "`+listen+`"
sources:
  - {name: mine, type: github, secrets: ["not-public"]}
  - {name: demo, type: github, secrets: ["inlet-dev-github-secret"]}
`), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if err := runConfigCheck(context.Background(), &environment{stdout: &out, stderr: &errOut}, []string{"--config", path}); err != nil {
			t.Fatalf("config check with ingress.listen %q: %v\n%s", listen, err, out.String())
		}
		if out.String() != path+": ok\n" {
			t.Errorf("stdout %q", out.String())
		}
		return path, errOut.String()
	}
	path, warning := check(":8080")
	if want := path + `: warning: sources demo accept the embedded defaults' public development secrets, and ingress.listen ":8080" reaches beyond this machine`; !strings.HasPrefix(warning, want) {
		t.Errorf("stderr %q, want it to start with %q", warning, want)
	}
	if _, warning := check("127.0.0.1:8080"); warning != "" {
		t.Errorf("loopback listener, stderr %q", warning)
	}
}
