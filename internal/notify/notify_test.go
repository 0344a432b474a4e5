package notify_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/internal/pgtest"
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
	deadline := time.Now().Add(10 * time.Second)
	for up, _ := l.Connected(); !up; up, _ = l.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("listener never connected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	base := got.Load() // the one OnNotify after connecting

	h := notify.NewHinter(pool, 200*time.Millisecond, nil)
	for i := 0; i < 500; i++ { // a burst well inside one interval
		h.Hint()
	}
	time.Sleep(700 * time.Millisecond)
	n := got.Load() - base
	if n < 1 || n > 2 {
		t.Fatalf("500 hints in a burst gave %d NOTIFYs, want the leading one and at most one trailing", n)
	}
	t.Logf("500 hints -> %d NOTIFYs", n)
	// A hint after a quiet spell is sent at once again.
	h.Hint()
	deadline = time.Now().Add(5 * time.Second)
	for got.Load()-base == n {
		if time.Now().After(deadline) {
			t.Fatal("a hint after the interval sent no NOTIFY")
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.Stop()
}
