package inletyaml

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/schema"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseExpandsEnvironment(t *testing.T) {
	t.Parallel()
	doc := `
database_url: ${DB}
ingress:
  listen: "${LISTEN:-:9090}"
  max_body_bytes: 2048
sources:
  - name: stripe
    type: stripe
    secrets: ["${STRIPE}"]
    tolerance: 2m
`
	c, err := Parse([]byte(doc), env(map[string]string{"DB": "postgres://x/y", "STRIPE": `whsec_a: "b" # c`}))
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "postgres://x/y" || c.Ingress.Listen != ":9090" || c.Ingress.MaxBodyBytes != 2048 {
		t.Fatalf("got %+v", c)
	}
	if got := c.Sources[0].Secrets[0]; got != `whsec_a: "b" # c` {
		t.Fatalf("secret with YAML syntax became %q", got)
	}
	if c.Sources[0].Tolerance != 2*time.Minute {
		t.Fatalf("tolerance = %s", c.Sources[0].Tolerance)
	}
	if *c.Ingress.DBRole != schema.IngressRole || c.Ingress.ReadTimeout != 10*time.Second {
		t.Fatalf("defaults not applied: %+v", c.Ingress)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, doc, want string }{
		{"unset variable", "sources:\n  - name: s\n    type: stripe\n    secrets: [\"${NOPE}\"]\n", "line 4: sources[0].secrets[0]: environment variable NOPE is not set"},
		{"unknown field", "ingress:\n  listne: \":1\"\n", "line 2: ingress.listne: unknown key; did you mean `listen`?"},
		{"bad name", "sources:\n  - name: Bad/Name\n    type: stripe\n    secrets: [x]\n", "sources[0].name"},
		{"duplicate name", "sources:\n  - {name: a, type: stripe, secrets: [x]}\n  - {name: a, type: github, secrets: [y]}\n", "sources[1].name: \"a\" is already the name of sources[0]"},
		{"no type", "sources:\n  - {name: a, secrets: [x]}\n", "sources[0].type: required"},
		{"no secrets", "sources:\n  - {name: a, type: github}\n", "sources[0].secrets: at least one"},
		{"empty secret", "sources:\n  - {name: a, type: github, secrets: [\"${E:-}\"]}\n", "sources[0].secrets[0]: empty"},
		{"bad duration", "ingress:\n  read_timeout: soon\n", "soon"},
		{"bad level", "log:\n  level: loud\n", "log.level"},
		{"store timeout", "ingress:\n  store_timeout: 20s\n", "ingress.store_timeout"},
		{"inflight below a body", "ingress:\n  max_body_bytes: 2097152\n  max_inflight_bytes: 1048576\n", "ingress.max_inflight_bytes: 1048576 is less than ingress.max_body_bytes"},
		{"negative inflight", "ingress:\n  max_inflight_bytes: -1\n", "ingress.max_inflight_bytes"},
		{"negative batch bytes", "ingress:\n  group_commit: {max_batch_bytes: -1}\n", "ingress.group_commit.max_batch_bytes"},
		{"wake", "streamer:\n  wake: smoke\n", "streamer.wake"},
		{"slot name", "streamer:\n  wake: replication\n  slot_name: Inlet-1\n", "streamer.slot_name"},
		{"batch", "streamer:\n  batch_size: 0\n  lease_duration: 10ms\n", "streamer.lease_duration"},
		{"handler type", "consumer:\n  handlers:\n    - {name: a, type: carrier-pigeon}\n", "consumer.handlers[0].type"},
		{"handler name", "consumer:\n  handlers:\n    - {name: a, type: log}\n    - {name: a, type: log}\n", "consumer.handlers[1].name"},
		{"forward url", "consumer:\n  handlers:\n    - {name: a, type: http-forward, secret: 0123456789abcdef}\n", "consumer.handlers[0].url"},
		{"forward secret", "consumer:\n  handlers:\n    - {name: a, type: http-forward, url: 'http://x', secret: short}\n", "consumer.handlers[0].secret"},
		{"bus", "bus:\n  kind: carrier-pigeon\n", "bus.kind"},
		{"nats url", "bus:\n  kind: nats\n", "bus.url"},
		{"admin token missing", "admin:\n  listen: \"127.0.0.1:9091\"\n", "admin.token: at least 16 bytes"},
		{"admin token short", "admin:\n  listen: \"127.0.0.1:9091\"\n  token: short\n", "admin.token: at least 16 bytes"},
		{"admin on the webhook port", "admin:\n  listen: \"127.0.0.1:8080\"\n  token: 0123456789abcdef\n", "admin.listen: \"127.0.0.1:8080\" is the webhook listener"},
		{"admin on the webhook listener", "ingress:\n  listen: \"127.0.0.1:9000\"\nadmin:\n  listen: \"127.0.0.1:9000\"\n  token: 0123456789abcdef\n", "admin.listen"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(c.doc), env(nil))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestExampleFileLoads(t *testing.T) {
	for _, k := range []string{"DATABASE_URL", "STRIPE_WEBHOOK_SECRET", "GITHUB_WEBHOOK_SECRET", "ACME_WEBHOOK_SECRET"} {
		t.Setenv(k, "x-"+k)
	}
	t.Setenv("ACME_WEBHOOK_SECRET", "whsec_aW5sZXQtZXhhbXBsZS1rZXktMDEyMzQ1Njc4OQ==")
	c, err := Load("../inlet.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sources) != 3 || c.Sources[1].Secrets[0] != "x-GITHUB_WEBHOOK_SECRET" {
		t.Fatalf("example sources = %+v", c.Sources)
	}
}

func TestDevConfig(t *testing.T) {
	c, err := Dev()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Source("stripe"); !ok || len(c.Sources) != 3 {
		t.Fatalf("dev sources = %+v", c.Sources)
	}
}

// The embedded defaults' secrets are public: a source using one is named,
// whatever its name, and one with a secret of its own is not.
func TestPublicSecretSources(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
database_url: postgres://x/y
sources:
  - {name: stripe, type: stripe, secrets: ["whsec_mine"]}
  - {name: gh, type: github, secrets: ["mine", "inlet-dev-github-secret"]}
  - {name: acme, type: standard-webhooks, secrets: ["whsec_aW5sZXQtZGV2LXN0YW5kYXJkLXdlYmhvb2tzLWtleSE="]}
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := PublicSecretSources(c); !slices.Equal(got, []string{"gh", "acme"}) {
		t.Errorf("PublicSecretSources = %q, want [gh acme]", got)
	}
	// The embedded defaults themselves, with one secret set from the
	// environment.
	dev, err := Parse(devYAML, env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_mine"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := PublicSecretSources(dev); !slices.Equal(got, []string{"github", "acme"}) {
		t.Errorf("PublicSecretSources(dev) = %q, want [github acme]", got)
	}
}

func TestParseAdmin(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("database_url: postgres://x/y\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin.Listen != "" || c.Admin.DBRole == nil || *c.Admin.DBRole != schema.OperatorRole {
		t.Fatalf("admin defaults = %+v", c.Admin)
	}
	doc := `
ingress:
  listen: ":8080"
admin:
  listen: "127.0.0.1:9091"
  token: "${ADMIN_TOKEN}"
  database_url: postgres://operator@x/y
  db_role: ""
`
	c, err = Parse([]byte(doc), env(map[string]string{"ADMIN_TOKEN": "0123456789abcdef0123"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin.Listen != "127.0.0.1:9091" || c.Admin.Token != "0123456789abcdef0123" ||
		c.Admin.DatabaseURL != "postgres://operator@x/y" || *c.Admin.DBRole != "" {
		t.Fatalf("admin = %+v", c.Admin)
	}
	for _, l := range [][2]string{{":9091", "127.0.0.1:9091"}, {"0.0.0.0:80", "10.0.0.1:80"}, {"[::]:80", ":80"}} {
		if !sameListener(l[0], l[1]) {
			t.Errorf("sameListener(%q, %q) = false", l[0], l[1])
		}
	}
	for _, l := range [][2]string{{":9091", ":8080"}, {"127.0.0.1:80", "10.0.0.1:80"}, {":0", ":0"}} {
		if sameListener(l[0], l[1]) {
			t.Errorf("sameListener(%q, %q) = true", l[0], l[1])
		}
	}
}

// A streamer or consumer reads only its own sections: the webhook secrets
// need not be set where they run.
func TestParseForDropsOtherServicesSections(t *testing.T) {
	t.Parallel()
	doc := []byte(`
database_url: postgres://x/y
sources:
  - {name: stripe, type: stripe, secrets: ["${STRIPE_SECRET}"]}
consumer:
  handlers:
    - {name: fwd, type: http-forward, url: "http://internal", secret: "${FORWARD_SECRET}"}
bus: {kind: nats, url: "nats://127.0.0.1:4222"}
`)
	none := env(nil)
	if _, err := Parse(doc, none); err == nil || !strings.Contains(err.Error(), "STRIPE_SECRET") {
		t.Fatalf("whole file without its secrets: %v", err)
	}
	st, err := ParseFor(doc, none, config.StreamerService)
	if err != nil || len(st.Sources) != 1 || st.Sources[0].Name != "stripe" || st.Sources[0].Secrets != nil ||
		len(st.Consumer.Handlers) != 0 || st.Bus.Kind != "nats" {
		t.Fatalf("streamer: %+v, %v", st, err)
	}
	if _, err := ParseFor(doc, none, config.ConsumerService); err == nil || !strings.Contains(err.Error(), "FORWARD_SECRET") {
		t.Fatalf("consumer without its own secret: %v", err)
	}
	c, err := ParseFor(doc, env(map[string]string{"FORWARD_SECRET": "0123456789abcdef0"}), config.ConsumerService)
	if err != nil || len(c.Sources) != 0 || len(c.Consumer.Handlers) != 1 {
		t.Fatalf("consumer: %+v, %v", c, err)
	}
	if config.StreamerService.Reads("sources") || !config.IngressService.Reads("sources") || config.ServiceOf("consumer") != config.ConsumerService || config.ServiceOf("migrate") != config.AllSections {
		t.Fatal("Reads / config.ServiceOf disagree with the sections dropped")
	}
	in, err := ParseFor(doc, env(map[string]string{"STRIPE_SECRET": "whsec_x"}), config.IngressService)
	if err != nil || len(in.Sources) != 1 || len(in.Consumer.Handlers) != 0 {
		t.Fatalf("ingress: %+v, %v", in, err)
	}
}

func TestRetentionSection(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("retention:\n  max_age: 90d\n  partition_interval: day\n  ahead: 0\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := c.Retention.MaxAgeDuration(); d != 90*24*time.Hour || c.Retention.PartitionInterval != "day" || *c.Retention.Ahead != 0 {
		t.Fatalf("retention = %+v", c.Retention)
	}
	for _, bad := range []string{"max_age: 90 days", "partition_interval: fortnight", "ahead: -1", "lock_timeout: -1s"} {
		if _, err := Parse([]byte("retention:\n  "+bad+"\n"), func(string) (string, bool) { return "", false }); err == nil || !strings.Contains(err.Error(), "retention.") {
			t.Errorf("retention %q: err %v, want one naming the field", bad, err)
		}
	}
}

// ${file:PATH} reads a mounted secret: its content is used as is (one
// trailing newline dropped), never expanded again, and an error names the
// file, never a value.
func TestSecretFromFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := filepath.Join(dir, "stripe")
	if err := os.WriteFile(secret, []byte("whsec_from_file: ${NOT_EXPANDED}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lookup := func(k string) (string, bool) { return map[string]string{"TOKEN_TAIL": "-tail"}[k], k == "TOKEN_TAIL" }
	c, err := Parse([]byte("sources:\n  - name: stripe\n    type: stripe\n    secrets: [\"${file:"+secret+"}\"]\nadmin:\n  listen: 127.0.0.1:0\n  token: \"${file:"+secret+"}${TOKEN_TAIL}\"\n"), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Sources[0].Secrets[0]; got != "whsec_from_file: ${NOT_EXPANDED}" {
		t.Fatalf("secret from file = %q", got)
	}
	if got := c.Admin.Token; got != "whsec_from_file: ${NOT_EXPANDED}-tail" {
		t.Fatalf("token = %q", got)
	}
	_, err = Parse([]byte("sources:\n  - name: stripe\n    type: stripe\n    secrets: [\"${file:"+filepath.Join(dir, "missing")+"}\"]\n"), lookup)
	if err == nil || !strings.Contains(err.Error(), "missing") || !strings.Contains(err.Error(), "no such file") || strings.Contains(err.Error(), "whsec") {
		t.Fatalf("missing secret file: %v", err)
	}
}

func TestGroupCommitSection(t *testing.T) {
	t.Parallel()
	none := func(string) (string, bool) { return "", false }
	c, err := Parse([]byte("ingress:\n  group_commit: {max_batch: 32}\n"), none)
	if err != nil {
		t.Fatal(err)
	}
	if gc := c.Ingress.GroupCommit; gc.MaxBatch != 32 || gc.MaxWait != 0 || gc.Committers != 2 || gc.Disabled {
		t.Fatalf("group_commit = %+v", gc)
	}
	for _, bad := range []string{"max_batch: -1", "max_wait: 2s", "committers: 100"} {
		if _, err := Parse([]byte("ingress:\n  group_commit: {"+bad+"}\n"), none); err == nil || !strings.Contains(err.Error(), "ingress.group_commit") {
			t.Errorf("group_commit %s: %v, want an error naming the field", bad, err)
		}
	}
}

// The memory bounds of ingress: defaults out of the box, a budget at least
// one body of the largest size, and values as written.
func TestIngressMemoryBounds(t *testing.T) {
	t.Parallel()
	none := func(string) (string, bool) { return "", false }
	for _, c := range []struct {
		doc                 string
		inflight, batchSize int64
	}{
		{"", ingress.DefaultMaxInflightBytes, ingress.DefaultMaxBatchBytes},
		{"ingress:\n  max_body_bytes: 67108864\n", 64 << 20, ingress.DefaultMaxBatchBytes},
		{"ingress:\n  max_inflight_bytes: 8388608\n  group_commit: {max_batch_bytes: 65536}\n", 8 << 20, 64 << 10},
	} {
		cfg, err := Parse([]byte(c.doc), none)
		if err != nil {
			t.Fatalf("%q: %v", c.doc, err)
		}
		if got := cfg.Ingress.MaxInflightBytes; got != c.inflight {
			t.Errorf("%q: max_inflight_bytes = %d, want %d", c.doc, got, c.inflight)
		}
		if got := cfg.Ingress.GroupCommit.MaxBatchBytes; got != c.batchSize {
			t.Errorf("%q: group_commit.max_batch_bytes = %d, want %d", c.doc, got, c.batchSize)
		}
	}
}

// heartbeat: is the old name of silence: (it meant three things): a file
// with it is read as before, one with both names is refused.
func TestHeartbeatIsReadAsSilence(t *testing.T) {
	t.Parallel()
	none := env(nil)
	c, err := Parse([]byte("heartbeat:\n  check_every: 2m\n  max_silence: {stripe: 6h}\n"), none)
	if err != nil || c.Silence.CheckEvery != 2*time.Minute || c.Silence.MaxSilence["stripe"] != 6*time.Hour || c.Silence.Factor != 2 {
		t.Fatalf("heartbeat: read as %+v, %v", c.Silence, err)
	}
	if _, err := Parse([]byte("heartbeat:\n  check_every: 1ms\n"), none); err == nil || !strings.Contains(err.Error(), "silence.check_every") {
		t.Fatalf("bad value under heartbeat: %v", err)
	}
	if _, err := Parse([]byte("silence: {factor: 3}\nheartbeat: {factor: 4}\n"), none); err == nil || !strings.Contains(err.Error(), "line 2: heartbeat: the old name of silence (line 1): keep only silence") {
		t.Fatalf("both names: %v", err)
	}
	// A consumer reads neither, whichever name the file uses.
	c, err = ParseFor([]byte("heartbeat:\n  alert_url: ${ALERT_URL}\n"), none, config.ConsumerService)
	if err != nil || c.Silence.AlertURL != "" {
		t.Fatalf("consumer: %+v, %v", c.Silence, err)
	}
	if config.ConsumerService.Reads("silence") || !config.StreamerService.Reads("silence") {
		t.Fatal("Reads disagrees with the sections dropped")
	}
}
