package httpserve

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// keepAliveLog records the keep-alive switches a limitListener makes.
type keepAliveLog struct {
	mu  sync.Mutex
	got []bool
}

func (k *keepAliveLog) set(on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.got = append(k.got, on)
}

func (k *keepAliveLog) last() (on, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.got) == 0 {
		return false, false
	}
	return k.got[len(k.got)-1], true
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

func dial(t *testing.T, addr net.Addr) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Keep-alive comes back once a connection is accepted with a quarter of the
// slots free, at every cap: with max connections 1, once it had gone off it
// stayed off for good (the check was 1 slot taken <= 1*3/4).
func TestKeepAliveComesBackAtMaxConnectionsOne(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 4, 512} {
		ln := listen(t)
		var ka keepAliveLog
		l := newLimitListener(ln, n, ka.set)
		for range n {
			dial(t, ln.Addr())
		}
		var open []net.Conn
		for range n {
			c, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			open = append(open, c)
		}
		// Full: the next Accept switches keep-alive off and waits.
		dial(t, ln.Addr())
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := l.Accept()
			if err != nil {
				t.Error(err)
			}
			accepted <- c
		}()
		deadline := time.Now().Add(10 * time.Second)
		for on, ok := ka.last(); (!ok || on) && time.Now().Before(deadline); on, ok = ka.last() {
			time.Sleep(time.Millisecond)
		}
		if on, ok := ka.last(); !ok || on {
			t.Fatalf("max connections %d, full: keep-alive not switched off", n)
		}
		// Room again: every connection closes, then a new one comes.
		for _, c := range open {
			_ = c.Close()
		}
		select {
		case c := <-accepted:
			_ = c.Close()
		case <-time.After(10 * time.Second):
			t.Fatalf("max connections %d: no accept after every connection closed", n)
		}
		dial(t, ln.Addr())
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if on, _ := ka.last(); !on {
			t.Errorf("max connections %d: keep-alive still off once a connection was accepted with every other slot free", n)
		}
		_ = c.Close()
		_ = l.Close()
	}
}

// limitConn keeps the wrapped TCP connection's CloseWrite, so net/http's
// graceful close (after an error answer) half-closes: the peer reads the
// end of the answer, and the server can still read.
func TestLimitConnDelegatesCloseWrite(t *testing.T) {
	t.Parallel()
	ln := listen(t)
	l := newLimitListener(ln, 1, func(bool) {})
	peer := dial(t, ln.Addr())
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		t.Fatal("the accepted connection has no CloseWrite")
	}
	if _, err := io.WriteString(c, "answer"); err != nil {
		t.Fatal(err)
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(peer); err != nil || string(b) != "answer" {
		t.Fatalf("peer read %q, %v; want \"answer\" then EOF", b, err)
	}
	if _, err := io.WriteString(peer, "more"); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "more" {
		t.Fatalf("after CloseWrite the server read %q, %v; want the connection still open for reading", b, err)
	}

	// A wrapped connection without CloseWrite says it cannot.
	server, client := net.Pipe()
	defer client.Close()
	pc := &limitConn{Conn: server, l: l}
	if err := pc.CloseWrite(); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("CloseWrite of a pipe: %v, want errors.ErrUnsupported", err)
	}
	_ = server.Close()
}
