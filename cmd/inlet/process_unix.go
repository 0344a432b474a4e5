//go:build unix

package main

import (
	"errors"
	"strconv"
	"syscall"
)

// processAlive reports whether the process whose id is pid (decimal) still
// exists: signal 0 checks without sending anything (EPERM: it exists, as
// another user's). An id that does not parse is taken as alive.
func processAlive(pid string) bool {
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return true
	}
	err = syscall.Kill(n, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
