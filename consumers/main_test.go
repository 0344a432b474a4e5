package consumers_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/filter"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

type testBundle struct {
	*consumertest.Bundle
	logs *consumertest.LockedBuffer
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{Bundle: consumertest.New(t), logs: &consumertest.LockedBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service logs:\n%s", b.logs.String())
		}
	})
	return b
}

// waitLogged waits until the service has logged msg n times.
func (b *testBundle) waitLogged(t *testing.T, msg string, n int) {
	t.Helper()
	testwait.Eventually(t, wait, fmt.Sprintf("%d× %q in the service log", n, msg), func() (bool, string) {
		got := strings.Count(b.logs.String(), msg)
		return got >= n, fmt.Sprintf("%d so far", got)
	})
}

// config fills in what every test's service needs.
func (b *testBundle) config(handlers ...consumers.Handler) consumers.Config {
	return consumers.Config{
		Pool:       b.Worker,
		Subscriber: b.Bus,
		Handlers:   handlers,
		WorkerID:   "test-worker",
		// As inlet consumer does: filters are compiled before they are registered.
		CheckFilter: filter.Check,
		Logger:      slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// start runs a service on cfg until the test ends.
func (b *testBundle) start(t *testing.T, cfg consumers.Config) *consumers.Service {
	t.Helper()
	svc, err := consumers.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return svc
}

// call is one handler invocation.
type call struct {
	ev         consumers.Event
	start, end time.Time
}

// recorder wraps a handler func and keeps every call.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

func (r *recorder) wrap(f consumers.HandlerFunc) consumers.HandlerFunc {
	return func(ctx context.Context, e *consumers.Event) error {
		c := call{ev: *e, start: time.Now()}
		defer func() {
			c.end = time.Now()
			r.mu.Lock()
			r.calls = append(r.calls, c)
			r.mu.Unlock()
		}()
		return f(ctx, e)
	}
}

func (r *recorder) Calls() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

func (r *recorder) callsOf(jobID int64) []call {
	var out []call
	for _, c := range r.Calls() {
		if c.ev.JobID == jobID {
			out = append(out, c)
		}
	}
	return out
}

func ok(context.Context, *consumers.Event) error { return nil }

func noBackoff(int) time.Duration { return 0 }

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// workerPool is a pool of the bundle's worker role with at most maxConns
// connections, closed when the test ends.
func (b *testBundle) workerPool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	pcfg := b.Worker.Config().Copy()
	pcfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
