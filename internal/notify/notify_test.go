package notify_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// DESIGN's rule: NOTIFY is a debounced hint, at most one per interval, never
// one per insert. A burst of hints becomes a leading NOTIFY and one trailing.
func TestHinterDebouncesABurst(t *testing.T) {
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
	testwait.Eventually(t, 10*time.Second, "the listener connected", func() (bool, string) {
		up, reconnects := l.Connected()
		return up, fmt.Sprintf("connected %v, %d reconnects", up, reconnects)
	})
	base := got.Load() // the one OnNotify after connecting

	h := notify.NewHinter(pool, 200*time.Millisecond, nil)
	for i := 0; i < 500; i++ { // a burst well inside one interval
		h.Hint()
	}
	// Over three intervals: the leading NOTIFY, at most one trailing, no more.
	testwait.Consistently(t, 700*time.Millisecond, "at most two NOTIFYs for the burst", func() (bool, string) {
		n := got.Load() - base
		return n <= 2, fmt.Sprintf("%d NOTIFYs", n)
	})
	n := got.Load() - base
	if n < 1 || n > 2 {
		t.Fatalf("500 hints in a burst gave %d NOTIFYs, want the leading one and at most one trailing", n)
	}
	t.Logf("500 hints -> %d NOTIFYs", n)
	// A hint after a quiet spell is sent at once again.
	h.Hint()
	testwait.Eventually(t, 5*time.Second, "a NOTIFY for a hint after the interval", func() (bool, string) {
		m := got.Load() - base
		return m > n, fmt.Sprintf("%d NOTIFYs, as before it", m)
	})
	h.Stop()
}
