package tests

import (
	"context"
	"strings"
	"testing"
)

// Regression test for a defect found by review helper-92 (fixed; the
// text below describes the behaviour before the fix).
//
// TestRetentionRefusesAMaxAgeTooLongToHold proves a data-loss
// defect: a very long --max-age (or retention.max_age) in days or weeks
// overflows time.Duration inside retention.ParseAge (retention/section.go:
// `time.Duration(v) * unit`, unchecked) and wraps around. "213505d" (about
// 585,000 years: an operator's "keep practically forever") wraps to about
// 1 day 25 minutes, so inlet retention drops every finished, sealed period
// that ended more than a day ago: two months of the immutable event log go.
// Other values (365000d, 1000 years) wrap to a negative age and are refused
// with "max age -1488191h...: must not be negative", a misleading message
// for a value the operator wrote positive, while `inlet config check`
// accepts the same value in the file.
//
// Expected: an age that does not fit in a duration is refused (usage error
// naming --max-age / retention.max_age), as admin.ParseTime already does
// for "7d" bounds with maxDays; it must never shrink to a short age.
func TestRetentionRefusesAMaxAgeTooLongToHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, env := sealedOldLog(t,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at) VALUES
			('stripe', 'stripe', 'evt_old_1', '{}', true, now() - interval '60 days'),
			('stripe', 'stripe', 'evt_old_2', '{}', true, now() - interval '20 days')`,
		`UPDATE webhook_ingress.jobs SET status = 'completed'`,
	)

	// ~585,000 years: nothing in a two-month-old log is that old.
	out, errOut, code := runInlet(t, env, "retention", "--max-age", "213505d")
	t.Logf("inlet retention --max-age 213505d: exit %d\n%s%s", code, out, errOut)

	var events int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 2 {
		t.Errorf("after inlet retention --max-age 213505d (about 585,000 years): %d of 2 events left; "+
			"the age wrapped around to about a day and dropped events 20 and 60 days old", events)
	}
	if code == 0 && strings.Contains(out, "dropped") && !strings.Contains(out, "dropped 0") {
		t.Errorf("inlet retention reported dropping partitions for a max age of 585,000 years:\n%s", out)
	}
}
