package main

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// takeTerminal gives inlet the terminal's Ctrl-C to itself when it runs in
// the foreground under a wrapper that shares its process group: go run, and
// go tool task run. Ctrl-C signals the whole foreground group, and go run
// exits 1 once it has seen an interrupt, however cleanly the program it ran
// stopped (golang/go#40467), so `go run ./cmd/inlet dev` and Task reported a
// handled Ctrl-C as a failure. In a process group of its own that is the
// terminal's foreground group, inlet alone gets the interrupt, and the
// wrapper ends with inlet's exit status. restore hands the terminal back to
// the wrapper's group; it is a no-op when nothing was taken (no terminal, in
// the background, or started by a shell as a job of its own).
//
// While inlet holds the terminal, Ctrl-Z does nothing: the wrapper's shell
// does not know inlet's group, and could not resume it.
func takeTerminal() (restore func()) {
	noop := func() {}
	fd := int(os.Stdin.Fd())
	pgrp := syscall.Getpgrp()
	if pgrp == syscall.Getpid() {
		return noop // a job of its own already: Ctrl-C reaches inlet alone
	}
	if fg, err := tcgetpgrp(fd); err != nil || fg != pgrp {
		return noop // stdin is no terminal, or inlet runs in the background
	}
	// Setting the foreground group from what is then a background group
	// raises SIGTTOU; a stop from the terminal could not be undone.
	signal.Ignore(syscall.SIGTTOU, syscall.SIGTTIN, syscall.SIGTSTP)
	if err := syscall.Setpgid(0, 0); err != nil {
		return noop
	}
	if err := tcsetpgrp(fd, syscall.Getpid()); err != nil {
		_ = syscall.Setpgid(0, pgrp)
		return noop
	}
	var once sync.Once
	return func() { once.Do(func() { _ = tcsetpgrp(fd, pgrp) }) }
}

func tcgetpgrp(fd int) (int, error) { return unix.IoctlGetInt(fd, unix.TIOCGPGRP) }

func tcsetpgrp(fd, pgrp int) error { return unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, pgrp) }
