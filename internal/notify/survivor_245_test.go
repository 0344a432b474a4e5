package notify_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// TestSurvivor245_HinterSendsTheTrailingHint guards the debounce's trailing
// edge (DESIGN: NOTIFY is a debounced hint; Hinter: "later ones within
// Interval are folded into one sent when it ends"): a hint that arrives while
// the Hinter waits out its interval must still produce a NOTIFY when the
// interval ends, else the job it announces waits for the poll tick.
//
// Mutant (helper-245): internal/notify/notify.go, Hinter.run, after the
// interval's select, drain h.hints (select { case <-h.hints: default: }):
// every hint sent during an interval is dropped. TestHinterDebouncesABurst
// accepts 1 or 2 NOTIFYs for a burst (it bounds the count from above only),
// and the e2e latency tests space their events past the debounce, so only
// leading-edge NOTIFYs were ever checked.
func TestSurvivor245_HinterSendsTheTrailingHint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	var got atomic.Int64
	l := notify.NewListener(notify.ListenerConfig{
		Connect:  func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) },
		OnNotify: func() { got.Add(1) },
	})
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	go l.Run(lctx)
	testwait.Eventually(t, 15*time.Second, "the listener connected", func() (bool, string) {
		up, reconnects := l.Connected()
		return up, fmt.Sprintf("connected %v, %d reconnects", up, reconnects)
	})
	// The one OnNotify after connecting (ListenerConfig.OnNotify) comes
	// first; count from after it.
	testwait.Eventually(t, 15*time.Second, "the OnNotify after connecting", func() (bool, string) {
		n := got.Load()
		return n >= 1, fmt.Sprintf("%d calls", n)
	})
	base := got.Load()

	// A long interval, so the second hint lands inside it even on a slow
	// machine: the leading NOTIFY is sent and received well before it ends.
	const interval = 4 * time.Second
	h := notify.NewHinter(pool, interval, nil)
	defer h.Stop()
	start := time.Now()
	h.Hint()
	testwait.Eventually(t, 10*time.Second, "the leading NOTIFY", func() (bool, string) {
		n := got.Load() - base
		return n >= 1, fmt.Sprintf("%d NOTIFYs", n)
	})
	if took := time.Since(start); took >= interval {
		t.Skipf("the leading NOTIFY took %s, over the %s interval: the next hint would lead too", took, interval)
	}
	h.Hint() // inside the interval: must be folded into the trailing NOTIFY, not dropped
	testwait.Eventually(t, interval+15*time.Second, "the trailing NOTIFY for a hint inside the interval", func() (bool, string) {
		n := got.Load() - base
		return n >= 2, fmt.Sprintf("%d NOTIFYs", n)
	})
}
