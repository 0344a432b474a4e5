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
)

// The span picked from: under Linux's default ephemeral range (32768-60999)
// and above the usual fixed service ports.
const (
	low  = 20000
	high = 32000
)

// Pick returns a port that was free on 127.0.0.1 a moment ago.
func Pick() (int, error) {
	for i := 0; i < 200; i++ {
		port := low + rand.N(high-low) //nolint:gosec // G404: a port to try, not a secret
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, errors.New("no free port on 127.0.0.1 in 20000-32000")
}
