package retention_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/retention"
)

// TestNotOwnedPeriodReportsWhatItHolds (review helper-152, fixed; this
// describes the code before the fix):
//
// A period kept because another login owns its partitions
// (ErrPartitionOwner, e247511) is reported with EVENTS 0, JOBS 0, DEAD 0,
// ATTEMPTS 0 (text table and --json "events": 0) whatever it holds: expire
// fills the counts only from partition_status, which is the very read that
// failed with 42501 (retention/retention.go expire, the "42501" case returns
// `part` with zero counts). The report thus states, wrongly, that the
// period is empty — next to a reason telling a DBA to run ALTER TABLE … OWNER
// TO (or, as an empty partition, simply to drop it by hand) — while it holds
// events with jobs still open. The other kept rows carry true counts, so the
// zeros read as facts.
//
// Now: the kept row of such a period shows what it holds, counted through
// the parent tables, whose privileges are the ones checked for a query on
// the parent.
func TestNotOwnedPeriodReportsWhatItHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	m := ownerMembers(t, b)
	// An old event, sealed, whose job is still pending; its period was
	// created by the DBA's login before 060 (hers).
	old := b.event(t, "evt_review152_notowned", 60*day)
	b.seal(t)
	part := partitionOf(t, b, old)
	suffix := strings.TrimPrefix(part, "events_")
	for _, tbl := range []string{"events_", "jobs_", "job_attempts_"} {
		b.exec(t, fmt.Sprintf(`ALTER TABLE webhook_ingress.%s OWNER TO %s`, tbl+suffix, m.role("dba")))
	}

	rep, err := retention.Run(ctx, m.pool("cron"), retention.Options{MaxAge: 30 * day, Interval: "week", Ahead: 2})
	if !errors.Is(err, retention.ErrPartitionOwner) {
		t.Fatalf("test set-up: Run: %v, want ErrPartitionOwner", err)
	}
	var row *retention.Partition
	for i, p := range rep.Partitions {
		if p.Name == part {
			row = &rep.Partitions[i]
		}
	}
	if row == nil || row.Verdict != retention.Kept {
		t.Fatalf("test set-up: %s not reported kept: %+v", part, rep.Partitions)
	}
	t.Logf("%s: events %d jobs %d open %d: %s", part, row.Events, row.Jobs, row.OpenJobs, row.Reason)
	if row.Events != 1 || row.Jobs != 1 || row.OpenJobs != 1 {
		t.Errorf("%s holds 1 event and 1 job (still pending), but inlet retention reports it kept with %d events, %d jobs, %d open jobs: "+
			"the report says the period is empty", part, row.Events, row.Jobs, row.OpenJobs)
	}
}
