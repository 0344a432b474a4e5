package monitor_test

// Review: the silent-source detector learns a source's rhythm from, and
// takes its last sign of life from, EVERY row of webhook_ingress.events,
// including the ones `inlet backfill` and `inlet reconcile` (also run on a
// schedule by `inlet streamer`) store through the ingress write path with
// signature_verified = false and received_at = now(). Those rows are not
// deliveries by the provider, yet they move last_seen and the median gap.
//
// Root cause: schema/queries/monitor.sql MonitorArrivals (and
// MonitorSources) read every event of the provider; monitor/silence.go
// arrivals() feeds them to judge() unfiltered.
//

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// delivered inserts n events of source as ingress stores a delivery
// (signature_verified = true), gap apart, the first at first.
func reviewDelivered(t *testing.T, super *pgxpool.Pool, source string, first time.Time, gap time.Duration, n int) time.Time {
	t.Helper()
	var last time.Time
	for i := range n {
		last = first.Add(time.Duration(i) * gap)
		exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
			VALUES ($1, 'stripe', $2, '{}', true, $3)`, source, fmt.Sprintf("evt_delivered_%d", i), last)
	}
	return last
}

// reviewUnsigned inserts an event as backfill/reconcile store one: the
// API's copy, signature_verified = false, marked with the reconcile header.
func reviewUnsigned(t *testing.T, super *pgxpool.Pool, source, id string, at time.Time) {
	t.Helper()
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at, headers)
		VALUES ($1, 'stripe', $2, '{}', false, $3, '{"Inlet-Reconcile": ["7"]}')`, source, id, at)
}

// Regression test (review helper-101; fixed: the text describes the behaviour
// before the fix). a one-off `inlet backfill stripe` (or a reconcile run that stores
// a batch of missing events) puts dozens of rows milliseconds apart at the
// head of stripe's history. The median gap collapses to ~0, the threshold
// to min_silence (1m), and a source that is delivering exactly at its
// usual 10-minute rhythm is alerted "silent" minutes after the backfill,
// and will flap silent/resumed between real deliveries until 50 real
// events have pushed the backfill out of the history (~8 hours here).
//
// Expected: 5 minutes after stripe's last delivery (its median gap is 10m),
// stripe is not silent and no alert is POSTed.
func TestABackfillBurstRaisesNoSilenceAlert(t *testing.T) {
	t.Parallel()
	super, streamer := pools(t)
	sink := newReviewSink(t)
	base := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
	last := reviewDelivered(t, super, "stripe", base, 10*time.Minute, 30)
	// The operator runs inlet backfill stripe a minute after that delivery:
	// 60 historic events stored within a few seconds.
	for j := range 60 {
		reviewUnsigned(t, super, "stripe", fmt.Sprintf("evt_backfilled_%d", j), last.Add(time.Minute+time.Duration(j)*100*time.Millisecond))
	}
	clock := &reviewClock{now: last.Add(5 * time.Minute)}
	h := reviewDetector(t, streamer, sink.srv.URL, clock, nil)

	sts, err := h.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Source == "stripe" && st.Silent {
			t.Errorf("stripe 5m after its last delivery (it delivers every 10m) judged silent: median %s, threshold %s, reason %q; "+
				"the backfilled rows were taken as the provider's rhythm", st.Median, st.Threshold, st.Reason)
		}
	}
	for _, a := range sink.alerts() {
		if a == "stripe silent" {
			t.Errorf("false alert POSTed: %q (alerts: %v)", a, sink.alerts())
		}
	}
}

// Regression test (review helper-101; fixed: the text describes the behaviour
// before the fix). the provider stopped delivering (Stripe disabled the endpoint
// after failures: the very case the detector exists for). The detector
// alerted "stripe silent". Then the scheduled reconcile (reconcile.enabled
// in inlet streamer) stores the three events Stripe's API lists as
// missing; received_at = now. The detector takes them for deliveries and
// POSTs "stripe resumed", although no webhook has arrived for 3 hours and
// none will: the alert tells the on-call the incident is over while the
// endpoint is still dead, and the next "silent" comes only 2× the median
// after the reconcile run, to be "resumed" again by the next run.
//
// Expected: stripe stays silent, and no "resumed" is sent, until the
// provider delivers again.
func TestReconciledEventsDoNotResumeASilentSource(t *testing.T) {
	t.Parallel()
	super, streamer := pools(t)
	sink := newReviewSink(t)
	base := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
	last := reviewDelivered(t, super, "stripe", base, 10*time.Minute, 30)
	clock := &reviewClock{now: last.Add(3 * time.Hour)}
	h := reviewDetector(t, streamer, sink.srv.URL, clock, nil)
	reviewCheck(t, h) // 3h without a delivery, median 10m: silent, alerted
	if got := sink.alerts(); len(got) < 1 || !contains(got, "stripe silent") {
		t.Fatalf("precondition: alerts after 3h without a delivery: %v; want stripe silent", got)
	}

	// The reconcile round stores what Stripe's API lists and the log lacks.
	for j := range 3 {
		reviewUnsigned(t, super, "stripe", fmt.Sprintf("evt_reconciled_%d", j), clock.Now().Add(-time.Duration(30-10*j)*time.Second))
	}
	sts, err := h.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Source == "stripe" && !st.Silent {
			t.Errorf("stripe, no delivery for 3h, judged not silent after a reconcile stored 3 unsigned events: last_seen %s (the reconcile's rows)", st.LastSeen)
		}
	}
	if got := sink.alerts(); contains(got, "stripe resumed") {
		t.Errorf("alerts: %v; \"stripe resumed\" was POSTed although the provider delivered nothing", got)
	}
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// Regression test (review helper-101; fixed: the text describes the behaviour
// before the fix). when the threshold is the min_silence floor (a source whose
// median gap is shorter than min_silence / factor), the reason logged and
// POSTed names the rule that did NOT fire: "2× the median gap 1s", i.e. a
// 2s threshold, while the source was in fact judged against min_silence
// (1m; threshold_seconds says 60). The on-call reads a contradictory alert.
// Root cause: monitor/silence.go judge(), the else branch of the reason
// (it only distinguishes max_silence from the median rule).
//
// Expected: the reason names min_silence when it set the threshold, e.g.
// "no event for 2m0s (min_silence 1m0s; median gap 1s)".
func TestSilenceReasonNamesTheRuleThatFired(t *testing.T) {
	t.Parallel()
	super, streamer := pools(t)
	base := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
	last := reviewDelivered(t, super, "stripe", base, time.Second, 12)
	clock := &reviewClock{now: last.Add(2 * time.Minute)}
	h := reviewDetector(t, streamer, "", clock, nil)
	sts, err := h.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Source != "stripe" {
			continue
		}
		if !st.Silent || st.Threshold != time.Minute {
			t.Fatalf("precondition: %+v, want silent with threshold 1m (min_silence)", st)
		}
		if !strings.Contains(st.Reason, "min_silence") {
			t.Errorf("reason %q for a threshold of %s set by min_silence: it names the median rule (2× 1s = 2s), not min_silence", st.Reason, st.Threshold)
		}
	}
}
