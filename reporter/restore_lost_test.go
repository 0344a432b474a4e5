package reporter_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/reporter"
)

// TestRestoreThatLostOnlyALateRecordGetsItAgain (review helper-316, fixed).
// Defect: a control plane restored from a backup under a running reporter is
// said to get the records it lost again (CHANGELOG 2ec08b2, docs/operations.md
// "Restoring the control plane's database", reporter/doc.go). The detection
// compares only the control plane's max(attempt_id) (cursor_before, GET
// /api/v1/cursor) with the highest id acknowledged (Reporter.acked). A record
// stored after the backup under an id BELOW the cursor (an attempt whose
// transaction committed after a later id was reported: a gap record, sent by
// readGaps; or a restart lookback record) is lost by the restore without
// lowering the cursor when nothing above the backup's cursor was stored
// after the backup. Then cursor_before == acked, behind() sees nothing, no
// rewind happens, and the gap that found the record was closed when it was
// acknowledged: the running reporter never sends it again (only a later
// restart's 1,000-id lookback might, if fewer than 1,000 attempts finished
// since). Root cause: reporter/reporter.go Reporter.behind (and the answer
// of controlplane/queries.sql InsertAttempts): a restore is detected only by
// the highest attempt id, which a late record does not move.
// Setup: real data plane and control plane databases, the real control plane
// over real HTTP, a running reporter (Interval 30ms, cursor check 100ms).
// Attempt a is drawn in an open transaction; a later attempt b commits and
// is reported (the control plane's backup is taken here: it holds {b}); then
// a commits and is reported as a gap record; the control plane is restored
// to the backup (a deleted); one more attempt c finishes and is reported.
// Expected: the control plane gets a again (as it gets every other lost
// record), within 15s (~500 reporter rounds, ~150 cursor checks).
// Observed: c is stored (its answer's cursor_before equals acknowledged, b),
// a is never sent again: the control plane holds [b c], the data plane
// [a b c], after 15s; no "cursor is below" warning is logged.
// Fixed (helper-317): the control plane numbers the records it stores in
// each tenant's arrival order (control-plane migration 002: a nullable
// attempts.arrival, drawn from a per-tenant counter whose row lock orders a
// tenant's reports; a partial index answers the highest held). Each answer
// to a report carries the tenant's highest arrival number held before the
// batch and after it (arrival_before, arrival), GET /api/v1/cursor its
// highest held (arrival). The reporter keeps an arrival log (the highest
// number acknowledged, and for each batch the number it reached and the
// batch's lowest attempt id, bounded at 4,096 marks, the older half merged
// in pairs when full); a number held below the one acknowledged makes it go
// back to just below the lowest attempt id of the batches whose numbers
// were lost (arrivalLog.lose, Reporter.arrived), here the late record's.
func TestRestoreThatLostOnlyALateRecordGetsItAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, cp := newDataPlane(t), newControlPlane(t)
	slow, fast, later := d.job(t), d.job(t), d.job(t)
	var logs reviewBuf
	startReporter(t, d, cp, func(c *reporter.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		reporter.SetCursorCheck(c, 100*time.Millisecond)
	})

	tx, err := d.super.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	d.complete(t, tx, slow, 1) // attempt a: its id is drawn, not committed
	d.complete(t, d.super, fast, 1)
	backup := cp.waitStored(t, 1) // the control plane's backup: {b}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows := cp.waitStored(t, 2) // a reported late, as a gap record
	lateID, bID := rows[0].attemptID, rows[1].attemptID
	if lateID >= bID || backup[0].attemptID != bID {
		t.Fatalf("want the late attempt below the one reported first: %+v", rows)
	}

	// Restore the control plane from the backup: the late record is gone,
	// its cursor (b) is what it was.
	tag, err := cp.pool.Exec(ctx, `DELETE FROM control_plane.attempts WHERE tenant = 'acme' AND attempt_id = $1`, lateID)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("restore: %v, %d rows", err, tag.RowsAffected())
	}

	d.complete(t, d.super, later, 1)
	want := d.attemptIDs(t)
	var got []int64
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		got = storedIDs(t, cp)
		if slices.Equal(got, want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the control plane was restored from a backup holding %v (cursor %d) after it stored the late record %d; "+
		"15s later it holds %v, the data plane %v: the lost record %d was never sent again (warned of a cursor below acknowledged: %v)",
		[]int64{bID}, bID, lateID, got, want, lateID, strings.Contains(logs.String(), "cursor is below"))
}

// TestLostRecordsAboveTheOldestHeldAreLoggedAndCounted (review helper-316, fixed).
// Defect: reporter/doc.go, docs/operations.md and CHANGELOG say records a
// restored control plane lost that the data plane no longer holds are
// logged at error by id and counted in
// inlet_reporter_failures_total{step="lost"}, "not silently skipped"
// (controlplane_restore_test.go). Reporter.rewind takes "no longer held" to
// be "below the data plane's oldest attempt" (ReporterAttemptsAfter(0, 1)).
// Retention does not drop attempt ids from the bottom up: `inlet retention`
// drops whole event periods and keeps a period for its open jobs while it
// drops the later ones (retention.Run goes on past a kept period), and a
// dropped period's late retries carry ids interleaved with the next
// period's. Its oldest held attempt is then below a hole: rewind computes
// lost = min(lostTo, oldest-1) <= to, logs nothing, counts nothing, and the
// ids of the hole are skipped by the resend without a word: the control
// plane's loss is silent, exactly what step="lost" was added to prevent.
// Root cause: reporter/reporter.go Reporter.rewind (oldest held attempt
// taken as the low-water mark of what retention dropped).
// Setup: real data plane and control plane, a running reporter. Attempt 1
// fails on a job still open (its period is kept); attempts 2..5 fail and
// are reported; retention drops their period (rows 2..5 deleted from
// job_attempts); the control plane is restored from a backup taken before
// its first record; one more attempt finishes.
// Expected: once the rewind has sent attempt 1 again, an ERROR naming the
// lost ids 2..5 and failures_total{step="lost"} >= 1.
// Observed: the control plane holds [1 6] again (rewind done), 4 records
// lost, failures_total{step="lost"} = 0 and no ERROR line.
// Fixed (helper-317), without a schema change: the reporter remembers the
// attempt ids the control plane acknowledged since it started, as runs
// (idRuns, at most 10,000 runs). After a rewind, the rounds that read the
// ids the control plane certainly lost (above the cursor it answered, up to
// the highest it had acknowledged) again look for each acknowledged id among
// what they read (Reporter.sweep): one the data plane no longer returns was
// committed and is gone, so it is logged at error (the lowest and highest
// of them, and how many) and counted in failures_total{step="lost"}. Ids
// no attempt ever committed under were never acknowledged, so they are not
// taken for lost ones.
func TestLostRecordsAboveTheOldestHeldAreLoggedAndCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, cp := newDataPlane(t), newControlPlane(t)
	reg := prometheus.NewRegistry()
	var logs reviewBuf
	startReporter(t, d, cp, func(c *reporter.Config) {
		c.Metrics, c.Logger = reg, slog.New(slog.NewTextHandler(&logs, nil))
	})
	d.attempt(t, d.job(t), 1, "failed", "timeout", errorText) // its job stays open: its period is kept
	for range 4 {
		d.attempt(t, d.job(t), 1, "failed", "timeout", errorText)
	}
	rows := cp.waitStored(t, 5)

	// Retention dropped the later period (attempts 2..5), kept the one of
	// the open job; the control plane is restored from a backup taken
	// before its first record.
	tag, err := d.super.Exec(ctx, `DELETE FROM webhook_ingress.job_attempts WHERE id BETWEEN $1 AND $2`, rows[1].attemptID, rows[4].attemptID)
	if err != nil || tag.RowsAffected() != 4 {
		t.Fatalf("retention: %v, %d rows", err, tag.RowsAffected())
	}
	if n := restoreControlPlane(t, cp, 0); n != 5 {
		t.Fatalf("restore removed %d records, want 5", n)
	}
	d.complete(t, d.super, d.job(t), 1)

	want := d.attemptIDs(t)
	if len(want) != 2 || want[0] != rows[0].attemptID {
		t.Fatalf("data plane holds %v, want attempt %d and the new one", want, rows[0].attemptID)
	}
	// Attempt 1 stored again: the rewind (which does the lost accounting
	// before it reads) has run.
	testwait.Eventually(t, 20*time.Second, "the records the data plane holds stored again", func() (bool, string) {
		got := storedIDs(t, cp)
		return slices.Equal(got, want), fmt.Sprintf("control plane holds %v, data plane has %v", got, want)
	})
	lost := metricValue(t, reg, "inlet_reporter_failures_total", "lost")
	out := logs.String()
	lostLine := fmt.Sprintf("from_attempt_id=%d to_attempt_id=%d", rows[1].attemptID, rows[4].attemptID)
	if lost < 1 || !strings.Contains(out, "level=ERROR") || !strings.Contains(out, lostLine) {
		t.Errorf("the control plane lost records %d..%d that the data plane no longer holds (retention dropped them above its oldest attempt %d): "+
			"failures_total{step=lost} = %v, error naming them (%s) logged: %v; the loss is silent",
			rows[1].attemptID, rows[4].attemptID, rows[0].attemptID, lost, lostLine, strings.Contains(out, lostLine))
	}
}
