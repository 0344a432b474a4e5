package consumers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// Found by review helper-79: since 06283c1 a transactional handler's
// transaction holds its job by the row lock from its first statement
// (consumers/tx.go:99-100), and the SDK stops extending the lease then
// (stopExtending, tx.go:99): the lease as committed runs out while the
// handler runs, and the reaper skips the locked row (ReapExpiredLeases: FOR
// UPDATE … SKIP LOCKED). That is fine while the consumer is alive, but
// when the consumer host is cut off from PostgreSQL without its TCP
// connection being closed (a network partition, a frozen VM or container,
// SIGSTOP, a NAT or firewall dropping the flow), the server keeps the
// backend "idle in transaction" and the job's row lock with it, for as long
// as TCP takes to notice (kernel keepalive: over two hours by default), and
// nothing in Inlet bounds it (no idle_in_transaction_session_timeout, no
// keepalive or tcp_user_timeout on the pool). The job stays 'leased' with
// an expired lease, the reaper skips it on every pass, and no other replica
// can run it. With a plain Func handler (and with a transactional one before
// this change) the same partition costs one lease: the extensions stop,
// the lease expires and the reaper hands the job on. The design's "a lost
// bus message costs latency, never data: its lease expires and the streamer
// publishes it again" and the lease itself (Config.LeaseExtend) no longer
// bound how long a dead consumer holds a job.
//
// Expected: once the consumer is cut off, the job is reaped within a bound
// set by the lease and the handler's Timeout (here: LeaseExtend 1s,
// Timeout 2s; the test allows 30s).
func TestTxConsumerCutOffDoesNotHoldItsJobPastTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	proxy := newPartitionProxy(t, b.Worker.Config())
	pcfg := b.Worker.Config().Copy()
	pcfg.ConnConfig.Host, pcfg.ConnConfig.Port = "127.0.0.1", proxy.port
	pcfg.ConnConfig.Fallbacks = nil
	pcfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}

	entered := make(chan int64, 10)
	cfg := b.config(consumers.Handler{Name: "ledger", MaxAttempts: 5, Backoff: noBackoff, Timeout: 2 * time.Second,
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			entered <- e.JobID
			<-ctx.Done() // a well-behaved handler: it honours its deadline
			return ctx.Err()
		}})
	cfg.Pool = pool
	cfg.LeaseExtend = time.Second
	svc, err := consumers.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = svc.Stop(sctx) // the consumer was cut off: its outcome is not the point here
		pool.Close()
	})
	// Runs before the Stop above: the partition heals (every connection
	// through the proxy is closed) when the test ends.
	t.Cleanup(proxy.close)

	b.StartStreamer(t, consumertest.StreamerOptions{Lease: 2 * time.Second})
	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("the handler did not start")
	}
	// The handler runs inside its transaction, which holds the job's row.
	// Now the consumer host is cut off from the database.
	proxy.freeze()
	cutAt := time.Now()
	leasedAt := func() (at time.Time) {
		if err := b.Admin.QueryRow(ctx, `SELECT attempted_at FROM webhook_ingress.jobs WHERE id = $1`, jobID).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	token := leasedAt()

	// Reaped: the lease the cut-off consumer held is gone (the reaper put
	// the job back, and the test streamer leased it again at once, or its
	// attempt was closed as lease_expired).
	reaped := func() bool {
		for _, a := range b.Attempts(t, jobID) {
			if a.Outcome == "lease_expired" {
				return true
			}
		}
		return b.Job(t, jobID).Status != "leased" || !leasedAt().Equal(token)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !reaped() {
		if time.Now().After(deadline) {
			j := b.Job(t, jobID)
			var held string
			_ = b.Admin.QueryRow(ctx, `SELECT coalesce(string_agg(state || ' for ' || (now() - state_change)::text, ', '), 'none')
				FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'consumertest-worker' AND state LIKE 'idle in transaction%'`).Scan(&held)
			t.Fatalf("%s after the consumer was cut off (lease_extend 1s, handler timeout 2s) job %d is still %s, lease expired at %v (%s ago), never reaped: "+
				"the cut-off consumer's server session still holds its row lock (sessions idle in transaction: %s)",
				time.Since(cutAt).Round(time.Second), jobID, j.Status, j.LeaseExpiresAt, time.Since(*j.LeaseExpiresAt).Round(time.Second), held)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// partitionProxy forwards TCP connections to the test database until
// frozen; then, as a network partition does (or a frozen process or host),
// it forwards nothing in either direction, connects nothing new, and closes
// nothing (the server sees neither data nor FIN) until close. It freezes
// when freeze is called, or, given a marker (newFreezeProxy), once a
// connection has sent the marker and then a COMMIT (a simple-protocol Query
// "commit", as pgx sends it): that message and everything after is dropped.
type partitionProxy struct {
	t        *testing.T
	ln       net.Listener
	port     uint16
	network  string
	addr     string
	marker   []byte // nil: frozen only by freeze
	mu       sync.Mutex
	frozen   bool
	frozenCh chan struct{} // closed once frozen
	released chan struct{}
	conns    []net.Conn
	once     sync.Once
}

// commitQuery is the Query message pgx's Tx.Commit sends.
var commitQuery = append([]byte{'Q', 0, 0, 0, byte(4 + len("commit") + 1)}, "commit\x00"...)

func newPartitionProxy(t *testing.T, cfg *pgxpool.Config) *partitionProxy {
	t.Helper()
	return startProxy(t, cfg, nil)
}

// newFreezeProxy is a partitionProxy that freezes at the first COMMIT a
// connection sends after marker.
func newFreezeProxy(t *testing.T, cfg *pgxpool.Config, marker []byte) *partitionProxy {
	t.Helper()
	return startProxy(t, cfg, marker)
}

func startProxy(t *testing.T, cfg *pgxpool.Config, marker []byte) *partitionProxy {
	t.Helper()
	network, addr := "tcp", net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	if strings.HasPrefix(cfg.ConnConfig.Host, "/") {
		network, addr = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partitionProxy{t: t, ln: ln, port: uint16(ln.Addr().(*net.TCPAddr).Port), network: network, addr: addr,
		marker: marker, frozenCh: make(chan struct{}), released: make(chan struct{})}
	go p.accept()
	return p
}

func (p *partitionProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		go func() {
			if p.isFrozen() {
				<-p.released
				return
			}
			s, err := net.Dial(p.network, p.addr)
			if err != nil {
				_ = c.Close()
				return
			}
			if !p.track(s) {
				return
			}
			go p.pump(c, s, true)
			go p.pump(s, c, false)
		}()
	}
}

func (p *partitionProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.released:
		_ = c.Close()
		return false
	default:
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *partitionProxy) isFrozen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen
}

// pump copies src to dst; from the client (fromClient), given a marker, it
// watches for the marker and then for the COMMIT that freezes the proxy.
func (p *partitionProxy) pump(src, dst net.Conn, fromClient bool) {
	buf := make([]byte, 32<<10)
	keep := max(len(p.marker), len(commitQuery))
	var tail []byte
	marked := false
	for {
		n, err := src.Read(buf)
		if p.isFrozen() {
			<-p.released // dropped: nothing crosses a partition, not even a close
			return
		}
		if p.marker != nil && fromClient && n > 0 {
			window := append(tail, buf[:n]...)
			if !marked && bytes.Contains(window, p.marker) {
				marked = true
				window = window[bytes.Index(window, p.marker)+len(p.marker):]
			}
			if marked && bytes.Contains(window, commitQuery) {
				p.freeze()
				<-p.released
				return
			}
			tail = append([]byte(nil), window[max(0, len(window)-keep):]...)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				p.t.Logf("proxy: %v", err)
			}
			_ = src.Close()
			_ = dst.Close()
			return
		}
	}
}

func (p *partitionProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		p.frozen = true
		close(p.frozenCh)
	}
}

func (p *partitionProxy) close() {
	p.once.Do(func() {
		p.mu.Lock()
		close(p.released)
		conns := p.conns
		p.mu.Unlock()
		_ = p.ln.Close()
		for _, c := range conns {
			_ = c.Close()
		}
	})
}
