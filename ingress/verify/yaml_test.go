package verify_test

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/config"
)

// exampleSources is a copy-paste example of every scheme (docs/providers.md
// generates its own from verify.ProviderDocs: TestProviderSourcesParse). The
// test parses it strictly, as `inlet` does, and builds each verifier, so
// the documented keys cannot drift from Config's yaml tags.
const exampleSources = `
sources:
  - name: stripe
    type: stripe
    secrets: ["${STRIPE_WEBHOOK_SECRET}"]      # whsec_…
    tolerance: 5m
  - name: github
    type: github
    secrets: ["${GITHUB_WEBHOOK_SECRET}"]
  - name: gitlab
    type: gitlab
    secrets: ["${GITLAB_WEBHOOK_TOKEN}"]        # the webhook's secret token
  - name: shopify
    type: shopify
    secrets: ["${SHOPIFY_CLIENT_SECRET}"]
  - name: slack
    type: slack
    secrets: ["${SLACK_SIGNING_SECRET}"]
    tolerance: 5m
  - name: paddle
    type: paddle
    secrets: ["${PADDLE_WEBHOOK_SECRET}"]       # pdl_ntfset_…
    tolerance: 5m
  - name: acme
    type: standard-webhooks                     # or svix
    secrets: ["${ACME_WEBHOOK_SECRET}"]         # whsec_… (v1)
  - name: acme-ed25519
    type: standard-webhooks
    secrets: ["${ACME_PUBLIC_KEY}", "${ACME_WEBHOOK_SECRET}"]   # whpk_… (v1a) beside whsec_…
  - name: twilio
    type: twilio
    secrets: ["${TWILIO_AUTH_TOKEN}"]
    public_url: https://hooks.example.com/webhooks/twilio       # as configured in Twilio, no query
  - name: vendor
    type: hmac
    secrets: ["${VENDOR_WEBHOOK_SECRET}"]
    tolerance: 10m
    hmac:
      header: X-Vendor-Signature
      algorithm: sha256          # sha1, sha256 or sha512
      encoding: hex              # hex or base64
      prefix: "sha256="
      timestamp_header: X-Vendor-Timestamp
      signed_payload: "{timestamp}.{body}"
    event_id_json: data.id
    event_type_header: X-Vendor-Event
`

func TestExampleSourcesParse(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"STRIPE_WEBHOOK_SECRET": "whsec_test", "GITHUB_WEBHOOK_SECRET": "gh", "GITLAB_WEBHOOK_TOKEN": "gl",
		"SHOPIFY_CLIENT_SECRET": "shp", "SLACK_SIGNING_SECRET": "sl", "PADDLE_WEBHOOK_SECRET": "pdl_ntfset_x",
		"ACME_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "ACME_PUBLIC_KEY": "whpk_" + strings.Repeat("A", 43) + "=",
		"TWILIO_AUTH_TOKEN": "tw", "VENDOR_WEBHOOK_SECRET": "vendor",
	}
	cfg, err := inletyaml.Parse([]byte(exampleSources), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(cfg.Sources) != 10 {
		t.Fatalf("%d sources", len(cfg.Sources))
	}
	for _, s := range cfg.Sources {
		if _, err := verify.New(s.Config); err != nil {
			t.Errorf("source %s: New: %v", s.Name, err)
		}
	}
	vendor, _ := cfg.Source("vendor")
	want := verify.HMACConfig{Header: "X-Vendor-Signature", Algorithm: "sha256", Encoding: "hex", Prefix: "sha256=",
		TimestampHeader: "X-Vendor-Timestamp", SignedPayload: "{timestamp}.{body}"}
	if !reflect.DeepEqual(vendor.HMAC, want) || vendor.EventIDJSON != "data.id" || vendor.EventTypeHeader != "X-Vendor-Event" || vendor.Tolerance != 10*time.Minute {
		t.Errorf("vendor = %+v", vendor.Config)
	}
	tw, _ := cfg.Source("twilio")
	if tw.PublicURL != "https://hooks.example.com/webhooks/twilio" {
		t.Errorf("twilio public_url = %q", tw.PublicURL)
	}

	// A signed test request for every example source verifies.
	now := time.Now()
	for _, s := range cfg.Sources {
		h, body, err := verify.SignTest(s.Config, "evt_example", nil, "http://localhost:8080/webhooks/"+s.Name, now)
		if err != nil {
			t.Errorf("source %s: SignTest: %v", s.Name, err)
			continue
		}
		v, _ := verify.New(s.Config)
		if _, err := v.Verify(&verify.Request{Header: h, Body: body, URL: "http://localhost:8080/webhooks/" + s.Name, Now: now}); err != nil {
			t.Errorf("source %s: Verify(SignTest): %v", s.Name, err)
		}
	}
}

func TestUnknownSourceKeyRejected(t *testing.T) {
	t.Parallel()
	_, err := inletyaml.Parse([]byte("sources:\n  - name: v\n    type: hmac\n    secrets: [x]\n    hmac:\n      header: X-S\n      algo: sha1\n"), func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), "algo") {
		t.Errorf("Parse with a misspelt hmac key: %v", err)
	}
}

// docs/providers.md's sources to copy, generated from verify.ProviderDocs,
// parse strictly as inlet parses its configuration file: one source per
// provider, each of its type.
func TestProviderSourcesParse(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- provider-sources:begin[^>]*-->\n```yaml\n(.*?)```\n<!-- provider-sources:end -->").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/providers.md has no generated sources")
	}
	// As inlet config check --allow-unset reads it: every key checked,
	// the values of unset variables not (a public key's form, say).
	if _, err := inletyaml.ParseFor(m[1], func(string) (string, bool) { return "", false }, config.NoSection); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	var file struct {
		Sources []struct{ Name, Type string }
	}
	if err := yaml.Unmarshal(m[1], &file); err != nil {
		t.Fatal(err)
	}
	docs := verify.ProviderDocs()
	if len(file.Sources) != len(docs) {
		t.Fatalf("%d sources for %d providers", len(file.Sources), len(docs))
	}
	for i, s := range file.Sources {
		if s.Type != docs[i].Type || s.Name != docs[i].Type {
			t.Errorf("source %d: %s of type %s, want %s", i, s.Name, s.Type, docs[i].Type)
		}
	}
}
