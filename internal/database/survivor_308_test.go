package database_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// proxy308 forwards TCP connections to PostgreSQL until frozen; frozen, it
// forwards nothing more in either direction and holds every connection
// open (new ones too), as a network partition or a frozen server does.
type proxy308 struct {
	ln       net.Listener
	network  string
	addr     string
	mu       sync.Mutex
	frozen   bool
	conns    []net.Conn
	released chan struct{}
	once     sync.Once
}

func newProxy308(t *testing.T, cfg *pgx.ConnConfig) *proxy308 {
	t.Helper()
	network, addr := "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	if strings.HasPrefix(cfg.Host, "/") {
		network, addr = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", cfg.Host, cfg.Port)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy308{ln: ln, network: network, addr: addr, released: make(chan struct{})}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy308) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		frozen := p.frozen
		p.mu.Unlock()
		if frozen {
			continue // held open, nothing forwarded
		}
		go func() {
			s, err := net.Dial(p.network, p.addr)
			if err != nil {
				_ = c.Close()
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, s)
			p.mu.Unlock()
			go p.pump(c, s)
			go p.pump(s, c)
		}()
	}
}

func (p *proxy308) pump(src, dst net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		frozen := p.frozen
		p.mu.Unlock()
		if frozen {
			<-p.released // nothing crosses, not even a close
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			_ = src.Close()
			_ = dst.Close()
			return
		}
	}
}

func (p *proxy308) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
}

func (p *proxy308) close() {
	p.once.Do(func() {
		p.mu.Lock()
		close(p.released)
		conns := p.conns
		p.conns = nil
		p.mu.Unlock()
		_ = p.ln.Close()
		for _, c := range conns {
			_ = c.Close()
		}
	})
}

// TestSurvivor308_StatementReturnsSoonAfterItsContextWhenTheServerIsGone
// (mutation run, helper-308).
// Guarantee (5d25b05): a statement whose context ended waits at most
// DefaultCancelWait (1 s) for PostgreSQL to answer the cancel request
// before its connection is dropped and the call returns ("ingress writes
// its 503 within 2 s of store_timeout, and a server that answers nothing
// has been sent the cancel request all the same").
// Mutant that no existing test caught (internal/database/database.go:102):
// "const DefaultCancelWait = time.Second" made "time.Minute" (or hours):
// with the server partitioned away, a statement past its context, and the
// ingress write, the consumer's outcome or liveness write waiting on it,
// hangs that long instead of failing at once.
// Why missed: TestContextEndCancelsTheStatementServerSide and ingress's
// TestStoreTimeoutIsOutcomeUnknown talk to a server that answers the cancel
// request at once, so the wait's bound is never reached.
// Here the pool talks to PostgreSQL through a proxy that is frozen (nothing
// forwarded, connections held open) before a statement with a 300 ms
// context is sent.
func TestSurvivor308_StatementReturnsSoonAfterItsContextWhenTheServerIsGone(t *testing.T) {
	t.Parallel()
	raw := pgtest.NewDatabase(t)
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy308(t, cfg)
	u := &url.URL{Scheme: "postgres", User: url.UserPassword(cfg.User, cfg.Password), Host: p.ln.Addr().String(),
		Path: "/" + cfg.Database, RawQuery: "sslmode=disable"}
	ctx := context.Background()
	pool, err := database.Open(ctx, u.String(), database.Options{MaxConns: 1, AppName: "cancel-wait-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		done := make(chan struct{})
		go func() { pool.Close(); close(done) }()
		p.close()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the pool did not close")
		}
	}()
	var one int
	if err := pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil || one != 1 {
		t.Fatalf("through the proxy: %d, %v", one, err)
	}

	p.freeze()
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	returned := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := pool.Exec(qctx, `SELECT pg_sleep(1) /* cancel-wait-test */`)
		returned <- err
	}()
	select {
	case err := <-returned:
		took := time.Since(start)
		if err == nil {
			t.Fatal("a statement through a frozen connection succeeded")
		}
		if !database.IsUnavailable(err) {
			t.Errorf("IsUnavailable(%v) = false", err)
		}
		t.Logf("returned after %v: %v", took.Round(time.Millisecond), err)
	case <-time.After(20 * time.Second): // the documented bound is 1 s; generous for a loaded machine
		t.Fatalf("a statement whose 300 ms context ended has not returned after %v, the server answering nothing: "+
			"the cancel request's wait (DefaultCancelWait, documented 1 s) does not bound it", time.Since(start).Round(time.Second))
	}
}
