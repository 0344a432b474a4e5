package streamer_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/streamer"
)

// cutProxy is a TCP proxy to Postgres that can silently cut the
// connections open now (nothing forwarded either way, both sockets left
// open: a dead NAT/conntrack entry, a VIP that moved to a promoted standby,
// a host that lost power) while new connections go through: the network is
// fine again, only the old sockets are dead.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []*cutConn
}

type cutConn struct {
	client, server net.Conn
	cut            atomic.Bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
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

// cutExisting silently cuts every connection open now.
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
			// Dropped on the floor, as a dead path does; the sockets stay
			// open so neither end sees a FIN or RST.
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

// TestStreamerReplacesASilentlyDeadListenConnection (review helper-193; this
// describes the code before the fix; it failed then, after 90 s with
// Connected()=true and 0 reconnects).
//
// Defect: the LISTEN wake source (internal/notify Listener.session) waits in
// conn.WaitForNotification(ctx) with no deadline, no keepalive query and no
// receive timeout. A LISTEN connection only ever reads, so when its TCP path
// dies silently (a failover that moved the VIP, a NAT/conntrack entry that
// expired, a host that lost power) nothing ever fails on it: the listener
// keeps Connected() == true, never reconnects, and every NOTIFY sent to the
// (new) server is lost. Every job then waits for the poll tick for as long as
// the kernel keeps the dead socket (pgconn's 5 min TCP keepalive: tens of
// minutes), and indefinitely in this test, where keepalives reach the proxy.
// docs/pipeline.md promises the poll tick "covers a lost LISTEN connection
// (it reconnects with exponential backoff)"; this one is never seen as lost.
// The replication wake source got exactly this fix (review helper-159,
// TestReplicationConnectedStaysUpAcrossPartition: a receive timeout); LISTEN,
// the default, did not.
//
// Expected: a dead LISTEN connection is noticed within a bounded time (now
// the listener's defaults: quiet for 30 s, then no answer to a ping within
// 10 s, so about 40 s) and replaced; the reconnect's own wake-up (OnNotify
// after LISTEN) then claims what was committed meanwhile, and later NOTIFYs
// wake the streamer again. internal/notify's
// TestListenerReplacesASilentlyDeadConnection checks the same in a second
// with short timings.
func TestStreamerReplacesASilentlyDeadListenConnection(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	c := b.collect(t, "h")
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCutProxy(t, u.Host)
	pu := *u
	pu.Host = proxy.ln.Addr().String()
	proxied := pu.String()
	listenConnect := func(ctx context.Context) (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(proxied)
		if err != nil {
			return nil, err
		}
		cfg.RuntimeParams["application_name"] = "inlet-test-listen"
		return pgx.ConnectConfig(ctx, cfg)
	}
	// Polling effectively off: only the wake source can deliver in time.
	s := b.newStreamer(t, streamer.Config{PollInterval: time.Hour, ListenConnect: listenConnect, FollowUp: -1,
		// No lease expires during the test: a reaped lease wakes the claim loop too.
		LeaseDuration: time.Hour})
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitConnected(t, s, 0)
	waitStats(t, s, 5*time.Second, "the claim at start", func(st streamer.Stats) bool { return st.Claims >= 1 })
	hinter := notify.NewHinter(b.admin, 0, nil)
	defer hinter.Stop()

	// Sanity: a hinted insert is delivered through LISTEN.
	b.insertEvents(t, 1)
	hinter.Hint()
	c.wait(t, 1, 5*time.Second)

	// The LISTEN connection's path dies silently; the network itself is fine.
	if n := proxy.cutExisting(); n != 1 {
		t.Fatalf("%d connections through the proxy, want the LISTEN one", n)
	}
	b.insertEvents(t, 1)
	hinter.Hint()

	// 30 s quiet + 10 s ping + backoff, with a margin for a loaded machine.
	const within = 70 * time.Second
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		select {
		case <-c.got:
			up, n := s.Listener().Connected()
			t.Logf("delivered after %s; connected=%v reconnects=%d stats %+v", within-time.Until(deadline), up, n, s.Stats())
			return // noticed, reconnected and claimed
		case <-time.After(time.Second):
		}
		// Keep hinting, as a busy ingress would.
		hinter.Hint()
	}
	up, n := s.Listener().Connected()
	t.Fatalf("%s after the LISTEN connection's path died silently (new connections work): a hinted job is still not "+
		"published; listener Connected()=%v reconnects=%d, notify wake-ups %d; want the dead connection noticed "+
		"(a receive timeout / ping) and replaced, as the replication stream does",
		within, up, n, s.Stats().NotifyWakeups)
}
