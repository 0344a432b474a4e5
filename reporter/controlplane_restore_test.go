package reporter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/controlplane"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/reporter"
)

// TestControlPlaneRestoredUnderARunningReporterGetsItsLostRecordsAgain (review helper-311, fixed).
// Defect: the reporter asks the control plane for its cursor (the highest
// attempt id it holds) only when it starts (reporter.go: Reporter.run calls
// fetchCursor once, then keeps its own cursor in memory). A control plane
// restored from a backup (its database rolled back, so the records stored
// after the backup are gone) under a running data plane is never noticed:
// the reporter goes on after its in-memory cursor, the records the control
// plane lost are never sent again, and as soon as one new record is stored
// the control plane's cursor (max(attempt_id)) is above the hole, so a later
// restart of the streamer does not notice it either (its restartLookback of
// 1,000 ids heals a hole only while fewer than 1,000 attempts finished after
// it). The control plane's page (jobs by latest outcome, failure classes,
// percentiles) undercounts for ever. Reporter.Stop's doc ("the cursor comes
// from the control plane") and the design ("a batch sent twice after a lost
// answer is harmless": idempotent storage exists exactly so the reporter may
// resend) let it resend; it never does. Root cause: reporter/reporter.go
// Reporter.run (cursor fetched once) and Reporter.send (the answer's state is
// never compared with what was acknowledged).
// Setup: real data plane and control plane databases, the real control plane
// server over real HTTP; a running reporter (Interval 30ms) reports 6
// completed attempts; then the control plane's database is rolled back to a
// backup taken after the first 3 (the 3 later rows deleted, as a restore
// leaves it); one more attempt finishes.
// Expected: once the new attempt is stored, the control plane holds all 7
// records again (the reporter resends what the control plane no longer
// holds).
// Observed: the new attempt is stored (4 records), the 3 lost records are
// never sent again: the control plane holds attempt ids [1 2 3 7], missing
// [4 5 6], 5 s after the new record (~160 reporter rounds).
// Fixed (helper-313): POST /api/v1/reports answers the tenant's cursor as it
// was before the batch (cursor_before, one statement with the insert); the
// reporter keeps the highest id the control plane acknowledged, and also
// fetches GET /api/v1/cursor after a send the control plane did not answer
// and at least each minute (for control planes that do not answer
// cursor_before). A cursor below what was acknowledged is logged at warn
// with both ids, and the next round goes back to it (Reporter.rewind): the
// lost records are read again, oldest first, and sent before newer ones;
// what the data plane no longer holds is logged at error and counted in
// failures_total{step="lost"}.
func TestControlPlaneRestoredUnderARunningReporterGetsItsLostRecordsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, cp := newDataPlane(t), newControlPlane(t)
	startReporter(t, d, cp, nil)
	for range 6 {
		d.complete(t, d.super, d.job(t), 1)
	}
	rows := cp.waitStored(t, 6)
	backupCursor := rows[2].attemptID

	// The control plane's database restored from a backup taken after its
	// third record: what it stored later is gone.
	tag, err := cp.pool.Exec(ctx, `DELETE FROM control_plane.attempts WHERE tenant = 'acme' AND attempt_id > $1`, backupCursor)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 3 {
		t.Fatalf("restore removed %d records, want 3", tag.RowsAffected())
	}

	// Business as usual: one more attempt finishes and is reported.
	later := d.job(t)
	d.complete(t, d.super, later, 1)
	laterRef := reporter.OpaqueJobID([]byte(hmacKey), later)
	testwait.Eventually(t, 30*time.Second, "the attempt after the restore stored", func() (bool, string) {
		for _, r := range cp.rows(t) {
			if r.job == laterRef {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d records", len(cp.rows(t)))
	})

	want := d.attemptIDs(t)
	held := func() []int64 {
		var ids []int64
		for _, r := range cp.rows(t) {
			ids = append(ids, r.attemptID)
		}
		return ids
	}
	// The reporter has had ~160 rounds at Interval 30ms to notice.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if len(held()) == len(want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := held()
	var missing []int64
	for _, id := range want {
		if !slices.Contains(got, id) {
			missing = append(missing, id)
		}
	}
	t.Fatalf("after the control plane was restored to a backup holding attempts up to %d, the running reporter never sent the lost records again: "+
		"control plane holds attempt ids %v, data plane has %v, missing %v",
		backupCursor, got, want, missing)
}

// olderControlPlane is the real control plane behind real HTTP that answers
// a report as releases before cursor_before did ({"received", "stored"}),
// and its cursor as they did ({"attempt_id"}: no arrival numbers), and can
// be taken down (connections dropped unanswered).
func olderControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	cp := &controlPlane{pool: openPool(t, pgtest.NewEmptyDatabase(t))}
	if _, err := controlplane.Migrate(context.Background(), cp.pool); err != nil {
		t.Fatal(err)
	}
	srv, err := controlplane.New(controlplane.Config{Pool: cp.pool, Tenants: []controlplane.Tenant{{Name: "acme", Token: tenantToken}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cp.requests.Add(1)
		if cp.down.Load() {
			cp.refused.Add(1)
			panic(http.ErrAbortHandler)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		if rec.Code == http.StatusOK && strings.HasPrefix(r.URL.Path, "/api/") {
			var a map[string]json.RawMessage
			if err := json.Unmarshal(body, &a); err != nil {
				t.Errorf("answer %s: %v", body, err)
			}
			delete(a, "cursor_before")
			delete(a, "arrival_before")
			delete(a, "arrival")
			body, _ = json.Marshal(a)
		}
		w.Header().Set("Content-Type", rec.Header().Get("Content-Type"))
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	}))
	t.Cleanup(hs.Close)
	cp.url = hs.URL
	return cp
}

// restoreControlPlane deletes the tenant's records above keep, as a restore
// from a backup taken then leaves the control plane, and returns how many.
func restoreControlPlane(t *testing.T, cp *controlPlane, keep int64) int64 {
	t.Helper()
	tag, err := cp.pool.Exec(context.Background(), `DELETE FROM control_plane.attempts WHERE tenant = 'acme' AND attempt_id > $1`, keep)
	if err != nil {
		t.Fatal(err)
	}
	return tag.RowsAffected()
}

func storedIDs(t *testing.T, cp *controlPlane) []int64 {
	t.Helper()
	var ids []int64
	for _, r := range cp.rows(t) {
		ids = append(ids, r.attemptID)
	}
	return ids
}

// A control plane of an earlier release (no cursor_before in its answer)
// restored while it was down: the reporter asks for its cursor before it
// sends again after the failure, so the records it lost are sent again
// although the batch that waited raises its cursor above them.
func TestOlderControlPlaneRestoredWhileDownGetsItsLostRecordsAgain(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), olderControlPlane(t)
	var logs reviewBuf
	startReporter(t, d, cp, func(c *reporter.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	for range 6 {
		d.complete(t, d.super, d.job(t), 1)
	}
	rows := cp.waitStored(t, 6)

	cp.down.Store(true)
	if n := restoreControlPlane(t, cp, rows[2].attemptID); n != 3 {
		t.Fatalf("restore removed %d records, want 3", n)
	}
	refused := cp.refused.Load()
	d.complete(t, d.super, d.job(t), 1)
	cp.waitRequests(t, "the new record's send dropped while down", &cp.refused, refused, 1)
	cp.down.Store(false)

	want := d.attemptIDs(t)
	testwait.Eventually(t, 20*time.Second, "every record stored again", func() (bool, string) {
		got := storedIDs(t, cp)
		return slices.Equal(got, want), fmt.Sprintf("control plane holds %v, data plane has %v", got, want)
	})
	if out := logs.String(); !strings.Contains(out, fmt.Sprintf("cursor=%d acknowledged=%d", rows[2].attemptID, rows[5].attemptID)) {
		t.Errorf("no warning naming the control plane's cursor (%d) and what it had acknowledged (%d):\n%s", rows[2].attemptID, rows[5].attemptID, out)
	}
}

// A control plane of an earlier release restored while the reporter has
// nothing to send: its cursor, fetched every cursor check, shows it behind,
// and the records it lost are sent again without any new attempt.
func TestOlderControlPlaneRestoredUnderAnIdleReporterGetsItsLostRecordsAgain(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), olderControlPlane(t)
	startReporter(t, d, cp, func(c *reporter.Config) { reporter.SetCursorCheck(c, 100*time.Millisecond) })
	for range 6 {
		d.complete(t, d.super, d.job(t), 1)
	}
	rows := cp.waitStored(t, 6)
	if n := restoreControlPlane(t, cp, rows[2].attemptID); n != 3 {
		t.Fatalf("restore removed %d records, want 3", n)
	}
	want := d.attemptIDs(t)
	testwait.Eventually(t, 20*time.Second, "every record stored again", func() (bool, string) {
		got := storedIDs(t, cp)
		return slices.Equal(got, want), fmt.Sprintf("control plane holds %v, data plane has %v", got, want)
	})
}

// Records the control plane lost that the data plane no longer holds
// (retention dropped them) cannot be sent again: they are logged at error
// by id and counted in failures_total{step="lost"}, not silently skipped,
// and those it still holds are sent again.
func TestLostRecordsTheDataPlaneNoLongerHoldsAreLoggedAndCounted(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	var logs reviewBuf
	startReporter(t, d, cp, func(c *reporter.Config) {
		c.Metrics, c.Logger = reg, slog.New(slog.NewTextHandler(&logs, nil))
	})
	for range 4 {
		d.attempt(t, d.job(t), 1, "failed", "timeout", errorText)
	}
	for range 2 {
		d.complete(t, d.super, d.job(t), 1)
	}
	rows := cp.waitStored(t, 6)

	// The data plane's retention dropped the four failures; the control
	// plane is restored from a backup taken before its first record.
	if _, err := d.super.Exec(ctx, `DELETE FROM webhook_ingress.job_attempts`); err != nil {
		t.Fatal(err)
	}
	if n := restoreControlPlane(t, cp, 0); n != 6 {
		t.Fatalf("restore removed %d records, want 6", n)
	}
	d.complete(t, d.super, d.job(t), 1)

	want := d.attemptIDs(t)
	if len(want) != 3 || want[0] != rows[4].attemptID {
		t.Fatalf("data plane holds attempts %v, want the two successes from %d and one more", want, rows[4].attemptID)
	}
	testwait.Eventually(t, 20*time.Second, "the records the data plane holds stored again", func() (bool, string) {
		got := storedIDs(t, cp)
		return slices.Equal(got, want), fmt.Sprintf("control plane holds %v, data plane has %v", got, want)
	})
	testwait.Eventually(t, 10*time.Second, "the lost records counted", func() (bool, string) {
		n := metricValue(t, reg, "inlet_reporter_failures_total", "lost")
		return n == 1, fmt.Sprintf("failures_total{step=lost} = %v", n)
	})
	lost := fmt.Sprintf("from_attempt_id=1 to_attempt_id=%d oldest_attempt_id=%d", rows[3].attemptID, rows[4].attemptID)
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, lost) {
		t.Errorf("no error naming the lost ids (%s):\n%s", lost, out)
	}
}
