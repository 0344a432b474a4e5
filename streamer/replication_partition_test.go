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

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// blackhole is a TCP proxy to Postgres that can stop forwarding in both
// directions while keeping both sockets open: a network partition (a dead
// NAT/conntrack entry, a failed-over VIP, a cable pulled between hosts).
type blackhole struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blackhole{ln: ln, target: target}
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
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go p.pipe(c, s)
			go p.pipe(s, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.frozen.Store(false)
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *blackhole) pipe(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		for p.frozen.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		n, err := src.Read(buf)
		for p.frozen.Load() { // read just before the cut: held back too
			time.Sleep(10 * time.Millisecond)
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

// TestReplicationConnectedStaysUpAcrossPartition (review helper-159, fixed; this describes the code before the fix):
// the replication stream has no receive timeout. stream() waits in
// ReceiveMessage with a deadline only to send its own status every 10 s
// (idleStatusInterval) and then `continue`s on the timeout; writes into a
// partitioned TCP connection succeed (they sit in the socket buffer), and it
// never asks the server for a reply (StandbyStatusUpdate.ReplyRequested is
// never set). So after a network partition the stream never ends: the server
// ends its walsender after wal_sender_timeout (60 s; the slot goes inactive),
// but the streamer keeps Connected() == true and
// inlet_streamer_replication_connected{slot} == 1 (the gauge docs/operations.md
// tells operators to alert on), no replication wake-up ever comes again, and
// it does not reconnect until the kernel gives up retransmitting (~15 min with
// tcp_retries2 defaults, and never if nothing unacknowledged is queued).
// The gauge added by dd24f25 thus reports "up" for a dead stream.
//
// Now: like PostgreSQL's own walreceiver (wal_receiver_timeout, 60 s;
// it requests a reply at half of it), the stream ends when nothing at all has
// come from the server for a bounded time; the gauge drops to 0 and it
// reconnects with backoff.
func TestReplicationConnectedStaysUpAcrossPartition(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	r := b.replication(t)
	u, err := url.Parse(r.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newBlackhole(t, u.Host)
	pu := *u
	pu.Host = proxy.ln.Addr().String()
	// The stream's receive timeout follows the server's wal_sender_timeout
	// (askAfter 30 s + it + 10 s, at least 60 s): 10 s here gives 60 s.
	if pu.RawQuery != "" {
		pu.RawQuery += "&"
	}
	pu.RawQuery += "options=-c%20wal_sender_timeout%3D10s"
	proxied := pu.String()

	reg := prometheus.NewRegistry()
	cfg := r.config(time.Hour) // no poll: replication alone wakes it
	cfg.Metrics = reg
	cfg.ReplicationConnect = func(ctx context.Context) (*pgconn.PgConn, error) { return pgconn.Connect(ctx, proxied) }
	s := b.newStreamer(t, cfg)
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitReplicationConnected(t, s, 0)
	gauge := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "inlet_streamer_replication_connected" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}

	// The network between the streamer and Postgres goes dark.
	proxy.frozen.Store(true)
	b.insertEvents(t, 1)
	wakes := s.Stats().ReplicationWakeups

	// 75 s: past the stream's receive timeout (60 s with the server's
	// wal_sender_timeout of 10 s), after which the server itself has
	// ended the walsender too.
	deadline := time.Now().Add(75 * time.Second)
	for time.Now().Before(deadline) {
		if up, n := s.Replication().Connected(); !up || n > 0 {
			return // noticed: it is reconnecting
		}
		time.Sleep(250 * time.Millisecond)
	}
	var active bool
	_ = b.admin.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, r.slot).Scan(&active)
	up, n := s.Replication().Connected()
	t.Fatalf("75 s after the network to Postgres went dark: Connected()=%v (reconnects %d), inlet_streamer_replication_connected=%v, "+
		"replication wake-ups since %d (a job was inserted), server side slot active=%v:\n"+
		"the streamer reports a stream that is dead (the server already ended its walsender) as up, and never reconnects; "+
		"want a receive timeout that ends the stream and drops the gauge to 0",
		up, n, gauge(), s.Stats().ReplicationWakeups-wakes, active)
}
