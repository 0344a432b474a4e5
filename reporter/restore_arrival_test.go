package reporter_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/reporter"
)

// lateRecord reports attempt b, then attempt a (drawn before b, committed
// after it) as a gap record, and returns a's and b's ids.
func lateRecord(t *testing.T, d *dataPlane, cp *controlPlane) (lateID, bID int64) {
	t.Helper()
	ctx := context.Background()
	slow, fast := d.job(t), d.job(t)
	tx, err := d.super.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	d.complete(t, tx, slow, 1)
	d.complete(t, d.super, fast, 1)
	cp.waitStored(t, 1)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows := cp.waitStored(t, 2)
	if rows[0].attemptID >= rows[1].attemptID {
		t.Fatalf("want the late attempt below the one reported first: %+v", rows)
	}
	return rows[0].attemptID, rows[1].attemptID
}

// loseRecord deletes the tenant's record of attempt id, as a restore from a
// backup taken before it was stored leaves the control plane.
func loseRecord(t *testing.T, cp *controlPlane, id int64) {
	t.Helper()
	tag, err := cp.pool.Exec(context.Background(), `DELETE FROM control_plane.attempts WHERE tenant = 'acme' AND attempt_id = $1`, id)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("restore: %v, %d rows", err, tag.RowsAffected())
	}
}

// A restore that lost only a late record, under a reporter with nothing
// more to send: the highest arrival number GET /api/v1/cursor answers shows
// the loss, and the record is sent again without any new attempt.
func TestIdleReporterGetsALateRecordTheControlPlaneLostAgain(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	var logs reviewBuf
	startReporter(t, d, cp, func(c *reporter.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		reporter.SetCursorCheck(c, 100*time.Millisecond)
	})
	lateID, _ := lateRecord(t, d, cp)
	loseRecord(t, cp, lateID)

	want := d.attemptIDs(t)
	testwait.Eventually(t, 20*time.Second, "the lost late record stored again", func() (bool, string) {
		got := storedIDs(t, cp)
		return slices.Equal(got, want), fmt.Sprintf("control plane holds %v, data plane has %v", got, want)
	})
	if out := logs.String(); !strings.Contains(out, "highest arrival number is below") || !strings.Contains(out, "GET /api/v1/cursor") {
		t.Errorf("no warning that the control plane's arrival number (answered by GET /api/v1/cursor) went back:\n%s", out)
	}
}

// A late record acknowledged to the reporter before this one (before a
// restart), lost by a restore: the arrival log of this reporter does not
// reach back to it, so it says so and goes back to the control plane's
// cursor, looking for the 1,000 ids below it again: the record is among
// them and sent again.
func TestLateRecordAcknowledgedBeforeARestartIsLookedForAgain(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	first := startReporter(t, d, cp, nil)
	lateID, _ := lateRecord(t, d, cp)
	first.Stop()

	var logs reviewBuf
	requests := cp.requests.Load()
	startReporter(t, d, cp, func(c *reporter.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	// Its cursor, then its start's lookback, which sends the late record
	// again (held: stored once).
	cp.waitRequests(t, "the restarted reporter's cursor and first report", &cp.requests, requests, 2)
	loseRecord(t, cp, lateID)
	d.complete(t, d.super, d.job(t), 1)

	want := d.attemptIDs(t)
	testwait.Eventually(t, 20*time.Second, "the lost late record stored again", func() (bool, string) {
		got := storedIDs(t, cp)
		return slices.Equal(got, want), fmt.Sprintf("control plane holds %v, data plane has %v", got, want)
	})
	if out := logs.String(); !strings.Contains(out, "acknowledged before this reporter started") {
		t.Errorf("no warning that the arrival log did not reach back to what was lost:\n%s", out)
	}
}
