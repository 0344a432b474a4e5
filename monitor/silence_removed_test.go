package monitor_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/monitor"
)

// TestARemovedSourceIsNoLongerWatched: a source taken out of the
// configuration keeps its events in the database; it is no longer judged
// (it was silent, and alerted, forever), and the silence last reported for
// it is closed once with status "removed".
func TestARemovedSourceIsNoLongerWatched(t *testing.T) {
	t.Parallel()
	super, streamer := pools(t)
	sink := newReviewSink(t)
	clock := &reviewClock{now: time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)}
	for i := range 12 { // an event every 10 minutes, the last one two hours ago
		for _, src := range []string{"stripe", "legacy"} {
			exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
				VALUES ($1, 'stripe', $2, '{}', true, $3)`, src, src+strings.Repeat("x", i), clock.Now().Add(-2*time.Hour-time.Duration(i)*10*time.Minute))
		}
	}
	detector := func(sources []string) *monitor.SilenceDetector {
		var logs strings.Builder
		var mu sync.Mutex
		h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{DB: streamer, AlertURL: sink.srv.URL,
			Metrics: prometheus.NewRegistry(), Now: clock.Now, Logger: newLogger(&logs, &mu), Sources: sources})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	reviewCheck(t, detector([]string{"stripe", "legacy"}))
	if got := sink.alerts(); !slices.Equal(got, []string{"legacy silent", "stripe silent"}) {
		t.Fatalf("alerts with both configured: %v", got)
	}

	after := detector([]string{"stripe"}) // legacy removed from the configuration
	for range 2 {
		out, err := after.Check(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != 1 || out[0].Source != "stripe" {
			t.Fatalf("judged %+v, want stripe alone", out)
		}
		clock.Set(clock.Now().Add(time.Minute))
	}
	if got := sink.alerts(); !slices.Equal(got, []string{"legacy silent", "stripe silent", "legacy removed"}) {
		t.Fatalf("alerts after legacy was removed (two checks): %v; want its silence closed once with \"removed\"", got)
	}
}
