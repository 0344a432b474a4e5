//go:build !linux

package httpserve

import (
	"net"
	"time"
)

// silentFor is 0 where the kernel is not asked how long a connection waited
// in the accept queue: the grace of a connection that sends nothing runs
// from its accept.
func silentFor(net.Conn) time.Duration { return 0 }
