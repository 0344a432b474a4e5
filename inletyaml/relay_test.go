package inletyaml

import (
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/relay"
)

// inlet relay reads its sources and its own section only: no database, no
// other service's secrets need to be set.
func TestParseForRelay(t *testing.T) {
	t.Parallel()
	doc := []byte(`
database_url: ${DATABASE_URL}
ingress: {listen: ":9999"}
consumer:
  handlers: [{name: fwd, type: http-forward, url: "http://x", secret: "${FORWARD_SECRET}"}]
sources:
  - {name: stripe, type: stripe, secrets: ["${STRIPE_SECRET}"]}
relay:
  target: https://ingress.customer.example
  secrets: ["${RELAY_SECRET}"]
  timeout: 4s
`)
	c, err := ParseFor(doc, env(map[string]string{"STRIPE_SECRET": "whsec_x", "RELAY_SECRET": "0123456789abcdef"}), config.RelayService)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Relay
	if r.Target != "https://ingress.customer.example" || r.Secrets[0] != "0123456789abcdef" || r.Timeout != 4*time.Second ||
		r.Listen != ":8080" || r.MaxBodyBytes != 1<<20 || len(c.Sources) != 1 || len(c.Consumer.Handlers) != 0 {
		t.Fatalf("relay config = %+v", c)
	}
	if config.ServiceOf("relay") != config.RelayService || config.RelayService.Reads("database_url") || !config.RelayService.Reads("sources") || config.IngressService.Reads("relay") {
		t.Fatal("Reads / config.ServiceOf disagree with the sections dropped")
	}
	// Ingress does not read the relay's secrets.
	if _, err := ParseFor(doc, env(map[string]string{"STRIPE_SECRET": "whsec_x", "DATABASE_URL": "postgres://x"}), config.IngressService); err != nil {
		t.Fatalf("ingress needs the relay's variables: %v", err)
	}
}

func TestRelayValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ doc, want string }{
		{"relay: {target: 'http://ingress.example', secrets: [0123456789abcdef]}", "relay.target: http:// sends the webhook bytes in clear"},
		{"relay: {target: 'ftp://ingress.example'}", "relay.target: scheme"},
		{"relay: {target: 'https://u:p@ingress.example'}", "relay.target: must not carry credentials"},
		{"relay: {target: 'https://ingress.example', secrets: [short]}", "relay.secrets[0]: at least 16 bytes"},
		{"relay: {timeout: -1s}", "relay.timeout"},
		{"sources: [{name: s, type: github, secrets: [x], relay_secrets: [short]}]", "sources[0].relay_secrets[0]: at least 16 bytes"},
		{"sources: [{name: s, type: github, secrets: [x], relay_tolerance: 1m}]", "sources[0].relay_tolerance: only used with relay_secrets"},
	} {
		_, err := Parse([]byte(c.doc), env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.doc, err, c.want)
		}
	}
	c, err := Parse([]byte(`
relay: {target: 'http://127.0.0.1:8080', allow_insecure_target: true, secrets: [0123456789abcdef]}
sources: [{name: s, type: github, secrets: [x], relay_secrets: [0123456789abcdef], relay_tolerance: 2m}]
`), env(nil))
	if err != nil || c.Sources[0].RelayTolerance != 2*time.Minute || c.Sources[0].RelaySecrets[0] != "0123456789abcdef" {
		t.Fatalf("%+v, %v", c.Sources, err)
	}
	if err := (relay.Section{}).ValidateForServe(); err == nil || !strings.Contains(err.Error(), "relay.target: required") {
		t.Fatalf("inlet relay without a target: %v", err)
	}
}
