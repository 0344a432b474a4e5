package monitor_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/audit"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/monitor"
	"github.com/inlet-dev/inlet/schema"
)

// The audit gauges, read as webhook_streamer, show nothing recorded, then
// an intact verification, then one that found two altered events.
func TestAuditGauges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	url := super.Config().ConnString()
	operator, err := database.Open(ctx, url, database.Options{Role: schema.OperatorRole, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(operator.Close)
	sealerDB, err := database.Open(ctx, url, database.Options{Role: schema.SealerRole, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sealerDB.Close)

	reg := prometheus.NewRegistry()
	reg.MustRegister(monitor.NewAudit(streamer, nil))
	gauges := func(problems, broken int) string {
		return `
# HELP inlet_audit_chain_broken 1 when the newest recorded inlet audit verify found the checkpoint chain broken (nothing past the break was checked), else 0.
# TYPE inlet_audit_chain_broken gauge
inlet_audit_chain_broken ` + itoa(broken) + `
# HELP inlet_audit_problems Problems (altered, missing or out-of-order events, a broken checkpoint chain) the newest recorded inlet audit verify found; 0 when none was recorded.
# TYPE inlet_audit_problems gauge
inlet_audit_problems ` + itoa(problems) + `
# HELP inlet_audit_scrape_ok 1 when the last scrape could read webhook_ingress.audit_verifications, else 0.
# TYPE inlet_audit_scrape_ok gauge
inlet_audit_scrape_ok 1
`
	}
	names := []string{"inlet_audit_problems", "inlet_audit_chain_broken", "inlet_audit_scrape_ok"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(gauges(0, 0)), names...); err != nil {
		t.Fatalf("before any verification: %v", err)
	}
	lastVerified := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "inlet_audit_last_verification_timestamp_seconds" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no inlet_audit_last_verification_timestamp_seconds")
		return 0
	}
	if got := lastVerified(); got != 0 {
		t.Fatalf("last verification %v before any, want 0", got)
	}

	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		SELECT 'stripe', 'stripe', 'evt_' || g, '{}', true, now() - interval '1 minute' FROM generate_series(1, 5) g`)
	s, err := audit.NewSealer(audit.Config{DB: sealerDB, Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if cps, err := s.Seal(ctx); err != nil || len(cps) != 1 {
		t.Fatalf("seal: %v, %v", cps, err)
	}
	verify := func() {
		t.Helper()
		rep, err := audit.Verify(ctx, operator, audit.VerifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := audit.Record(ctx, operator, rep); err != nil {
			t.Fatal(err)
		}
	}
	verify()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(gauges(0, 0)), names...); err != nil {
		t.Fatalf("after an intact verification: %v", err)
	}
	if got := lastVerified(); got < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("last verification at %v, want about now", got)
	}

	exec(t, super, `ALTER TABLE webhook_ingress.events DISABLE TRIGGER events_append_only_row`)
	exec(t, super, `UPDATE webhook_ingress.events SET event_type = 'forged' WHERE id IN (2, 4)`)
	exec(t, super, `ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row`)
	verify()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(gauges(2, 0)), names...); err != nil {
		t.Fatalf("after two altered events: %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
