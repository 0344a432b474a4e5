package httpserve

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// closeIdleEvery is how often a full listener closes the connections gone
// idle.
const closeIdleEvery = 250 * time.Millisecond

// headerGrace is how long a connection may take to send a request's
// headers whole while the listener is full, from its accept (from its
// handshake when it had sent nothing by then: it may have waited in the
// accept queue); past it, it is closed to make room. A sender writes its
// headers as soon as it has connected (a load balancer or proxy in front
// too), so they arrive within a round trip; a connection that sent nothing,
// or only part of its headers, for a second has no request to serve soon.
// Without it such a connection would hold its slot until ReadHeaderTimeout
// (5 s), and every max connections of them queued ahead of a webhook would
// delay it 5 s more; with it those that waited in the queue longer than the
// grace without a byte are closed as soon as they are accepted, so a webhook
// waits behind them about the grace at most, however many there are.
const headerGrace = time.Second

// limitListener accepts at most cap(slots) connections open at once (a slot
// is taken on Accept and given back on the connection's Close). While every
// slot is taken, Accept makes room: keepAlive(false) is in force (net/http
// then closes its idle connections and each answer closes its connection),
// and the connections that have not sent a request's headers whole within
// headerGrace of their accept are closed, so the slots go to connections
// with a request to serve; keepAlive(true) once a quarter of the slots is
// free again.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	keepAlive func(bool)
	off       atomic.Bool // keep-alive switched off
	grace     time.Duration

	mu    sync.Mutex
	fresh map[*limitConn]struct{} // accepted, first request's headers not yet read
}

func newLimitListener(ln net.Listener, n int, keepAlive func(bool)) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{}), keepAlive: keepAlive,
		grace: headerGrace, fresh: make(map[*limitConn]struct{})}
}

// Accept waits for a free slot, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		// Full: make room by closing the idle connections, then wait,
		// closing again those that went idle meanwhile (an answer
		// written just before keep-alive went off keeps its connection)
		// and those that have not sent their headers within the grace.
		l.off.Store(true)
		l.keepAlive(false)
		idle := time.NewTicker(closeIdleEvery)
		defer idle.Stop()
		shed := time.NewTimer(l.closeSilent(time.Now()))
		defer shed.Stop()
	wait:
		for {
			select {
			case l.slots <- struct{}{}:
				break wait
			case <-idle.C:
				l.keepAlive(false)
			case now := <-shed.C:
				shed.Reset(l.closeSilent(now))
			case <-l.done:
				return nil, net.ErrClosed
			}
		}
	}
	// A quarter free, not counting the slot just taken (so a cap of 1,
	// 2 or 3 turns it back on too).
	if cap(l.slots)-len(l.slots) >= cap(l.slots)/4 && l.off.CompareAndSwap(true, false) {
		l.keepAlive(true)
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	lc := &limitConn{Conn: c, since: time.Now().Add(-silentFor(c)), l: l}
	l.mu.Lock()
	l.fresh[lc] = struct{}{}
	l.mu.Unlock()
	return lc, nil
}

// closeSilent closes the connections that have not sent a request's
// headers whole within the grace, and returns how long until the next one
// still waiting for its headers has had it.
func (l *limitListener) closeSilent(now time.Time) time.Duration {
	var late []*limitConn
	next := l.grace
	l.mu.Lock()
	for c := range l.fresh {
		if age := now.Sub(c.since); age >= l.grace {
			late = append(late, c)
		} else {
			next = min(next, l.grace-age)
		}
	}
	l.mu.Unlock()
	for _, c := range late {
		_ = c.Close() // its server goroutine's read fails, and it ends
	}
	return next
}

// connState is the http.Server's ConnState hook (then calls next, if set):
// a connection leaves the fresh ones once its first request's headers are
// read (StateActive), or it is hijacked or closed.
func (l *limitListener) connState(next func(net.Conn, http.ConnState)) func(net.Conn, http.ConnState) {
	return func(c net.Conn, st http.ConnState) {
		if lc, ok := c.(*limitConn); ok && st != http.StateNew {
			l.settle(lc)
		}
		if next != nil {
			next(c, st)
		}
	}
}

func (l *limitListener) settle(c *limitConn) {
	l.mu.Lock()
	delete(l.fresh, c)
	l.mu.Unlock()
}

// Close closes the listener and ends an Accept waiting for a slot.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back on its first Close.
type limitConn struct {
	net.Conn
	since time.Time // its grace runs from here: its accept, or its handshake if silent since
	l     *limitListener
	once  sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.settle(c)
		<-c.l.slots
	})
	return err
}

// CloseWrite half-closes the connection when the one wrapped can (a TCP
// connection), so net/http's graceful close after an error answer still
// lets the client read it before the connection is reset.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("close write of the connection from %s: %w", c.RemoteAddr(), errors.ErrUnsupported)
}
