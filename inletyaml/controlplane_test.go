package inletyaml

import (
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/controlplane"
	"github.com/inlet-dev/inlet/internal/config"
)

func TestReporterAndControlPlaneSections(t *testing.T) {
	t.Parallel()
	doc := `
reporter:
  url: https://cp.example.com
  token: ${REPORT_TOKEN}
  key: ${REPORT_KEY}
  include_provider: true
control_plane:
  listen: 127.0.0.1:9999
  database_url: ${CP_DB}
  tenants:
    - name: acme
      token: ${ACME_TOKEN}
`
	vars := env(map[string]string{"REPORT_TOKEN": "report-token-0123456789", "REPORT_KEY": "report-key-0123456789",
		"CP_DB": "postgres://cp/db", "ACME_TOKEN": "acme-token-0123456789"})
	c, err := Parse([]byte(doc), vars)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Reporter
	if r.URL != "https://cp.example.com" || r.Token != "report-token-0123456789" || r.Key != "report-key-0123456789" ||
		!r.IncludeProvider || r.SendDatabaseIDs || r.BatchSize != 500 || r.Interval != 10*time.Second {
		t.Fatalf("reporter = %+v", r)
	}
	cp := c.ControlPlane
	if cp.Listen != "127.0.0.1:9999" || cp.DatabaseURL != "postgres://cp/db" || len(cp.Tenants) != 1 || cp.Tenants[0].Token != "acme-token-0123456789" {
		t.Fatalf("control_plane = %+v", cp)
	}
	if err := cp.ValidateForServe(); err != nil {
		t.Fatal(err)
	}

	// Only the streamer reads reporter:, and no service reads control_plane:,
	// so none needs their ${VAR}s.
	for _, s := range []config.Service{config.IngressService, config.ConsumerService} {
		c, err := ParseFor([]byte(doc), env(nil), s)
		if err != nil || c.Reporter.URL != "" || len(c.ControlPlane.Tenants) != 0 {
			t.Errorf("service %d: %v, %+v", s, err, c.Reporter)
		}
	}
	if _, err := ParseFor([]byte(doc), env(nil), config.StreamerService); err == nil || !strings.Contains(err.Error(), "REPORT_TOKEN") {
		t.Errorf("streamer without the reporter token: %v", err)
	}
	if !config.StreamerService.Reads("reporter") || config.StreamerService.Reads("control_plane") {
		t.Error("the streamer must read reporter: and not control_plane:")
	}
}

func TestReporterAndControlPlaneErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ doc, field string }{
		{"reporter:\n  url: ftp://x\n  token: 0123456789abcdef\n  key: 0123456789abcdef", "reporter.url"},
		{"reporter:\n  url: https://u:p@x\n  token: 0123456789abcdef\n  key: 0123456789abcdef", "reporter.url"},
		{"reporter:\n  url: https://x\n  token: short\n  key: 0123456789abcdef", "reporter.token"},
		{"reporter:\n  url: https://x\n  token: 0123456789abcdef", "reporter.key"},
		{"reporter:\n  batch_size: 5000", "reporter.batch_size"},
		{"reporter:\n  interval: 1ms", "reporter.interval"},
		{"reporter:\n  extra: 1", "line 2: reporter.extra: unknown key"},
		{"control_plane:\n  tenants:\n    - name: Acme\n      token: 0123456789abcdef", "control_plane.tenants[0].name"},
		{"control_plane:\n  tenants:\n    - name: a\n      token: short", "control_plane.tenants[0].token"},
		{"control_plane:\n  tenants:\n    - name: a\n      token: 0123456789abcdef\n    - name: b\n      token: 0123456789abcdef", "control_plane.tenants[1].token"},
	} {
		_, err := Parse([]byte(c.doc), env(nil))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%q: error %v, want one naming %s", c.doc, err, c.field)
		}
	}
	// A key is not needed when database ids are sent.
	if _, err := Parse([]byte("reporter:\n  url: https://x\n  token: 0123456789abcdef\n  send_database_ids: true"), env(nil)); err != nil {
		t.Error(err)
	}
	if err := (controlplane.Section{}).ValidateForServe(); err == nil || !strings.Contains(err.Error(), "control_plane.database_url") {
		t.Errorf("serving without a database: %v", err)
	}
}

// A tenant's name may come twice with two tokens: a rotation (the data plane
// moves to the new token while the old one still answers).
func TestControlPlaneTenantTokenRotation(t *testing.T) {
	doc := "control_plane:\n  tenants:\n    - name: a\n      token: 0123456789abcdef\n    - name: a\n      token: 0123456789abcdeg"
	c, err := Parse([]byte(doc), env(nil))
	if err != nil {
		t.Fatalf("two tokens of one tenant: %v, want accepted (a rotation)", err)
	}
	if len(c.ControlPlane.Tenants) != 2 {
		t.Fatalf("tenants %+v, want both", c.ControlPlane.Tenants)
	}
}
