package httpserve

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// closeIdleEvery is how often a full listener closes the connections gone
// idle.
const closeIdleEvery = 250 * time.Millisecond

// limitListener accepts at most cap(slots) connections open at once (a slot
// is taken on Accept and given back on the connection's Close). While every
// slot is taken, keepAlive(false) is in force: net/http then closes its idle
// connections and each answer closes its connection, so the slots go to
// connections with a request to serve; keepAlive(true) once a quarter of the
// slots is free again.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	keepAlive func(bool)
	off       atomic.Bool // keep-alive switched off
}

func newLimitListener(ln net.Listener, n int, keepAlive func(bool)) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{}), keepAlive: keepAlive}
}

// Accept waits for a free slot, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		// Full: make room by closing the idle connections, then wait,
		// closing again those that went idle meanwhile (an answer
		// written just before keep-alive went off keeps its connection).
		l.off.Store(true)
		l.keepAlive(false)
		tick := time.NewTicker(closeIdleEvery)
		defer tick.Stop()
	wait:
		for {
			select {
			case l.slots <- struct{}{}:
				break wait
			case <-tick.C:
				l.keepAlive(false)
			case <-l.done:
				return nil, net.ErrClosed
			}
		}
	}
	if len(l.slots) <= cap(l.slots)*3/4 && l.off.CompareAndSwap(true, false) {
		l.keepAlive(true)
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

// Close closes the listener and ends an Accept waiting for a slot.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back on its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
