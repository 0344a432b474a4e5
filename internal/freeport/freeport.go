// Package freeport picks a free TCP port on 127.0.0.1 for a server that will
// bind it later (and again after a restart). It picks below the kernel's
// ephemeral range, so no outgoing connection can take the port in between,
// as one can with a port the kernel handed out for ":0".
package freeport

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// The span picked from: under Linux's default ephemeral range (32768-60999)
// and above the usual fixed service ports.
const (
	low  = 20000
	high = 32000
)

// given are the ports Pick returned in this process: a port is handed out
// once, as two servers picked one after the other (before either binds)
// could otherwise get the same port (one in 12,000 pairs; it happened).
var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Pick returns a port that was free on 127.0.0.1 a moment ago, and that
// Pick has not returned before in this process.
func Pick() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	for i := 0; i < 200; i++ {
		port := low + rand.N(high-low) //nolint:gosec // G404: a port to try, not a secret
		if given[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		given[port] = true
		return port, nil
	}
	return 0, errors.New("no free port on 127.0.0.1 in 20000-32000")
}
