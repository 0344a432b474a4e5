package notify_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// cutProxy is a TCP proxy to Postgres that can silently cut the connections
// open now: nothing is forwarded either way and both sockets stay open (a
// VIP that moved, an expired NAT entry), while new connections go through.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []*cutConn
}

type cutConn struct {
	client, server net.Conn
	cut            atomic.Bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen for the test proxy: %v", err)
	}
	p := &cutProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			cc := &cutConn{client: c, server: s}
			p.mu.Lock()
			p.conns = append(p.conns, cc)
			p.mu.Unlock()
			go cc.pipe(c, s)
			go cc.pipe(s, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.client.Close()
			_ = c.server.Close()
		}
	})
	return p
}

// cutExisting silently cuts every connection open now and says how many.
func (p *cutProxy) cutExisting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.cut.Store(true)
	}
	return len(p.conns)
}

func (c *cutConn) pipe(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if c.cut.Load() {
			// Dropped, as on a dead path; no FIN or RST reaches either end.
			if err != nil {
				return
			}
			continue
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				_ = dst.Close()
			}
			return
		}
	}
}

// listenBundle is a Listener through a cutProxy, with short liveness
// timings, and a pool that sends NOTIFYs directly.
type listenBundle struct {
	l     *notify.Listener
	pool  *pgxpool.Pool
	proxy *cutProxy
	got   *atomic.Int64
}

func setupListen(t *testing.T, idleCheck time.Duration) *listenBundle {
	t.Helper()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatalf("pool for the test database: %v", err)
	}
	t.Cleanup(pool.Close)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse the test database URL: %v", err)
	}
	proxy := newCutProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	proxied := u.String()

	got := &atomic.Int64{}
	l := notify.NewListener(notify.ListenerConfig{
		Connect:     func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, proxied) },
		OnNotify:    func() { got.Add(1) },
		IdleCheck:   idleCheck,
		PingTimeout: 500 * time.Millisecond,
	})
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(lctx)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	testwait.Eventually(t, 10*time.Second, "the listener connected", func() (bool, string) {
		up, reconnects := l.Connected()
		return up, fmt.Sprintf("connected %v, %d reconnects", up, reconnects)
	})
	return &listenBundle{l: l, pool: pool, proxy: proxy, got: got}
}

func (b *listenBundle) notify(t *testing.T) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), "SELECT pg_notify($1, '')", notify.Channel); err != nil {
		t.Fatalf("pg_notify on %s: %v", notify.Channel, err)
	}
}

// A LISTEN connection whose network path dies silently is noticed (quiet for
// IdleCheck, then no answer to a ping within PingTimeout) and replaced; the
// new session's own wake-up covers what was missed, and NOTIFYs arrive again.
// Before the fix (review helper-193) the wait had no deadline: Connected()
// stayed true, nothing reconnected, every NOTIFY was lost until the kernel's
// keepalive gave up (streamer's TestListenerNeverNoticesASilentlyDeadConnection
// shows it through the streamer at the default timings).
func TestListenerReplacesASilentlyDeadConnection(t *testing.T) {
	t.Parallel()
	b := setupListen(t, 200*time.Millisecond)
	b.notify(t)
	testwait.Eventually(t, 5*time.Second, "a NOTIFY through the live connection", func() (bool, string) {
		n := b.got.Load()
		return n >= 2, fmt.Sprintf("%d wake-ups (1 is the one after LISTEN)", n)
	})

	if n := b.proxy.cutExisting(); n != 1 {
		t.Fatalf("%d connections through the proxy, want the LISTEN one", n)
	}
	before := b.got.Load()
	// 0.2 s idle + 0.5 s ping + 0.1 s backoff; generous for a loaded machine.
	testwait.Eventually(t, 10*time.Second, "the dead LISTEN connection replaced", func() (bool, string) {
		up, reconnects := b.l.Connected()
		return up && reconnects >= 1, fmt.Sprintf("connected %v, %d reconnects", up, reconnects)
	})
	testwait.Eventually(t, 5*time.Second, "the wake-up after the new LISTEN", func() (bool, string) {
		n := b.got.Load()
		return n > before, fmt.Sprintf("%d wake-ups, %d before the cut", n, before)
	})

	before = b.got.Load()
	b.notify(t)
	testwait.Eventually(t, 5*time.Second, "a NOTIFY through the new connection", func() (bool, string) {
		n := b.got.Load()
		return n > before, fmt.Sprintf("%d wake-ups, %d before the NOTIFY", n, before)
	})
}

// The liveness check leaves a healthy, quiet connection alone: the wait's
// deadline and the ping neither break it nor replace it, and a NOTIFY after
// many checks still arrives on it.
func TestListenerKeepsAQuietLiveConnection(t *testing.T) {
	t.Parallel()
	b := setupListen(t, 50*time.Millisecond)
	// About 20 idle checks, each with a ping.
	testwait.Consistently(t, time.Second, "the quiet LISTEN connection kept", func() (bool, string) {
		up, reconnects := b.l.Connected()
		return up && reconnects == 0, fmt.Sprintf("connected %v, %d reconnects", up, reconnects)
	})
	before := b.got.Load()
	b.notify(t)
	testwait.Eventually(t, 5*time.Second, "a NOTIFY after the idle checks", func() (bool, string) {
		n := b.got.Load()
		return n > before, fmt.Sprintf("%d wake-ups, %d before the NOTIFY", n, before)
	})
	if up, reconnects := b.l.Connected(); !up || reconnects != 0 {
		t.Fatalf("after the NOTIFY: connected %v, %d reconnects; want the first connection still up", up, reconnects)
	}
}
