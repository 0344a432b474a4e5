package config

import (
	"fmt"
	"net"
	"slices"
	"strconv"
)

// CheckListen returns an error naming field when addr is not an address a
// listener can bind: host:port, the host empty for every interface, the port
// 0–65535 or a service name ("http"). The values in off turn the listener
// off ("" or "off") and are accepted as they are. A port alone ("8080") is
// the usual slip: the service would fail at start, blaming the port.
func CheckListen(field, addr string, off ...string) error {
	if slices.Contains(off, addr) {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		if _, nerr := strconv.Atoi(addr); nerr == nil {
			return fmt.Errorf("%s: %q is not host:port (write \":%s\" for every interface, \"127.0.0.1:%s\" for this machine alone)", field, addr, addr, addr)
		}
		return fmt.Errorf("%s: %q is not host:port (\":8080\", \"127.0.0.1:8080\")", field, addr)
	}
	if n, err := strconv.Atoi(port); err == nil {
		if n < 0 || n > 65535 {
			return fmt.Errorf("%s: port %d of %q is not between 0 and 65535", field, n, addr)
		}
		return nil
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%s: port %q of %q is neither a number nor a known service", field, port, addr)
	}
	return nil
}
