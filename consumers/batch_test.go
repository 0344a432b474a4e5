package consumers_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestTakesAndOutcomesShareStatements starts 40 attempts together and
// finishes them at once, and counts the statements that read them (the
// service's counter) and recorded them (distinct xmin of the completed jobs):
// batched, far fewer than 40; one each with TakeBatch and CompleteBatch -1.
// Either way each job has exactly one successful attempt, on its row, and no
// history row.
func TestTakesAndOutcomesShareStatements(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		batch   int
		atMost  int
		atLeast int
	}{
		{"batched", 0, 20, 1},
		{"one transaction each", -1, 40, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n = 40
			b := setup(t)
			var running atomic.Int32
			release := make(chan struct{})
			cfg := b.config(consumers.Handler{Name: "h", Concurrency: n, Func: func(ctx context.Context, _ *consumers.Event) error {
				if running.Add(1) == n {
					close(release)
				}
				select {
				case <-release:
				case <-time.After(wait):
				}
				return nil
			}})
			cfg.CompleteBatch, cfg.TakeBatch = tc.batch, tc.batch
			svc := b.start(t, cfg)
			var jobs []int64
			for range n {
				jobs = append(jobs, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h"))
			}
			b.StartStreamer(t, consumertest.StreamerOptions{})
			for _, id := range jobs {
				b.WaitJobStatus(t, id, "completed", wait)
			}
			if running.Load() != n {
				t.Fatalf("%d attempts ran, want %d", running.Load(), n)
			}
			var txns, takes int
			if err := b.Admin.QueryRow(context.Background(),
				`SELECT count(DISTINCT xmin::text) FROM webhook_ingress.jobs WHERE id = ANY($1)`, jobs).Scan(&txns); err != nil {
				t.Fatal(err)
			}
			takes = int(svc.Stats().ReadStatements)
			if txns < tc.atLeast || txns > tc.atMost {
				t.Fatalf("%d jobs completed by %d transactions, want %d..%d", n, txns, tc.atLeast, tc.atMost)
			}
			if takes < tc.atLeast || takes > tc.atMost {
				t.Fatalf("%d attempts taken by %d statements, want %d..%d", n, takes, tc.atLeast, tc.atMost)
			}
			for _, id := range jobs {
				as := b.Attempts(t, id)
				if len(as) != 1 || as[0].Outcome != "completed" || as[0].Attempt != 1 || as[0].WorkerID == nil || *as[0].WorkerID != cfg.WorkerID {
					t.Fatalf("job %d: history %+v, want one completed attempt 1 by %q", id, as, cfg.WorkerID)
				}
			}
			t.Logf("%d attempts taken by %d statements, completed by %d transactions", n, takes, txns)
		})
	}
}

// TestAMessagesReferencesAreReadTogether: the references of one bus message
// (one claim of ten jobs) that find a free slot start together and are read
// with one statement, which waits for nothing else; with fewer slots than
// references, each group that starts together shares a statement.
func TestAMessagesReferencesAreReadTogether(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		concurrency int
		atMost      int
	}{
		{"a slot for each", 10, 1},
		{"fewer slots", 3, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n = 10
			b := setup(t)
			release := make(chan struct{})
			var calls atomic.Int32
			cfg := b.config(consumers.Handler{Name: "h", Concurrency: tc.concurrency, Func: func(ctx context.Context, _ *consumers.Event) error {
				calls.Add(1)
				select {
				case <-release:
				case <-time.After(wait):
				}
				return nil
			}})
			svc := b.start(t, cfg)
			var jobs []int64
			for range n {
				jobs = append(jobs, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h"))
			}
			b.StartStreamer(t, consumertest.StreamerOptions{})
			deadline := time.Now().Add(wait)
			for calls.Load() < int32(tc.concurrency) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if got := svc.Stats().ReadStatements; got != 1 {
				t.Fatalf("the %d references that started together were read by %d statements, want 1", tc.concurrency, got)
			}
			close(release)
			for _, id := range jobs {
				b.WaitJobStatus(t, id, "completed", wait)
			}
			if got := svc.Stats().ReadStatements; got < 1 || got > int64(tc.atMost) {
				t.Fatalf("%d references read by %d statements, want 1..%d", n, got, tc.atMost)
			}
		})
	}
}
