package consumers_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// Config.TakeBatch bounds the attempts one read statement takes, also when
// one bus message carries more references than that and all find a slot
// (found by review helper-90: the references of a message that start
// together shared one statement, whatever TakeBatch said).
func TestTakeBatchBoundsAttemptsPerReadStatement(t *testing.T) {
	t.Parallel()
	const n, takeBatch = 10, 2
	b := setup(t)
	release := make(chan struct{})
	var calls atomic.Int32
	cfg := b.config(consumers.Handler{Name: "h", Concurrency: n, Func: func(ctx context.Context, _ *consumers.Event) error {
		calls.Add(1)
		select {
		case <-release:
		case <-time.After(wait):
		}
		return nil
	}})
	cfg.TakeBatch = takeBatch
	svc := b.start(t, cfg)
	var jobs []int64
	for range n {
		jobs = append(jobs, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h"))
	}
	// One claim of the ten jobs: one bus message of ten references.
	b.StartStreamer(t, consumertest.StreamerOptions{})
	deadline := time.Now().Add(wait)
	for calls.Load() < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	for _, id := range jobs {
		b.WaitJobStatus(t, id, "completed", wait)
	}
	st := svc.Stats()
	if st.Reads < n {
		t.Fatalf("only %d attempts read, want %d", st.Reads, n)
	}
	if want := int64((n + takeBatch - 1) / takeBatch); st.ReadStatements < want {
		t.Fatalf("TakeBatch %d: %d attempts were read by %d statement(s) (%.1f attempts per statement); "+
			"TakeBatch is documented as the most attempts one read statement takes, so at least %d statements were due",
			takeBatch, st.Reads, st.ReadStatements, float64(st.Reads)/float64(st.ReadStatements), want)
	}
}
