package main

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// silentServer accepts TCP connections and never answers: a database host
// whose PostgreSQL is hung, or a firewall that lets the SYN through to a
// process that never speaks. It returns the address and a func that closes
// every connection (which unblocks whoever waits on one).
func silentServer(t *testing.T) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	closeAll := func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}
	t.Cleanup(closeAll)
	return ln.Addr().String(), closeAll
}

// The owner commands (migrate, roles, backfill stored) connect through
// connectURL, which gives up after 5 s as database.Open does for every other
// command: against a database that accepts the connection and never answers
// they fail with a clear error. (Found by a review: connectURL set no
// timeout, and they hung until the server closed the socket.)
func TestOwnerCommandsFailOnAnUnansweringDatabase(t *testing.T) {
	t.Setenv("PGCONNECT_TIMEOUT", "")
	t.Chdir(t.TempDir())
	for _, args := range [][]string{
		{"migrate"},
		{"roles", "list"},
		{"backfill", "stored"},
	} {
		t.Run(args[0], func(t *testing.T) {
			addr, release := silentServer(t)
			url := "postgres://inlet:secret@" + addr + "/inlet"
			args := append(args, "--database-url", url)
			done := make(chan error, 1)
			var out, errOut bytes.Buffer
			start := time.Now()
			go func() {
				done <- run(context.Background(), &environment{stdout: &out, stderr: &errOut}, args)
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("inlet %v: no error against a database that never answers", args)
				}
				t.Logf("inlet %v failed after %s: %v", args, time.Since(start).Round(time.Millisecond), err)
			case <-time.After(12 * time.Second):
				release() // unblock the goroutine
				err := <-done
				t.Fatalf("inlet %v still waiting after 12s on a database that never answers (the services give up after 5s); after the server closed: %v", args, err)
			}
		})
	}
}
