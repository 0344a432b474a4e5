//go:build linux

package httpserve

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// silentFor is how long c, just accepted, has been connected without its
// peer sending a byte (the time it waited in the accept queue, from its
// handshake); 0 when something has arrived, or when the kernel does not
// say. Nothing has read c yet, so its receive queue holds all it was sent.
func silentFor(c net.Conn) time.Duration {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var silent time.Duration
	_ = raw.Control(func(fd uintptr) {
		if queued, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err != nil || queued > 0 {
			return
		}
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil || info.Bytes_received > 0 {
			return
		}
		// With no data received, the kernel's last receive time is the
		// connection's creation.
		silent = time.Duration(info.Last_data_recv) * time.Millisecond
	})
	return silent
}
