package reporter

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestRetryStopsTheGapClock: the tries of a step that fail, and the waits
// after them, are left out of the clock gaps age by before the next try
// runs, so the try that gets through (a read after a database outage) looks
// for gaps as if no time had passed; a step that succeeds at once stops
// nothing. (TestAControlPlaneOutageDoesNotExpireGaps is the end-to-end case.)
func TestRetryStopsTheGapClock(t *testing.T) {
	t.Parallel()
	const try = 10 * time.Millisecond
	r := &Reporter{
		cfg:       Config{MinBackoff: 20 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		failures:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "f"}, []string{"step"}),
		succeeded: prometheus.NewGauge(prometheus.GaugeOpts{Name: "s"}),
	}
	if err := r.retry(context.Background(), "read", func() error { return nil }); err != nil || r.stalled != 0 {
		t.Fatalf("a step that succeeded at once: err %v, stalled %s, want none", err, r.stalled)
	}

	start := time.Now()
	var tries int
	var lag time.Duration // how far the gap clock is behind, in the try that gets through
	err := r.retry(context.Background(), "read", func() error {
		tries++
		if tries <= 3 {
			time.Sleep(try)
			return errors.New("database unavailable")
		}
		lag = time.Since(r.clock())
		return nil
	})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	// Three failed tries of at least 10ms, each followed by a wait of at
	// least half of MinBackoff.
	if least := 3 * (try + 10*time.Millisecond); lag < least || lag > elapsed {
		t.Fatalf("gap clock %s behind in the try that got through, want %s..%s (the failed tries and waits)", lag, least, elapsed)
	}
}
