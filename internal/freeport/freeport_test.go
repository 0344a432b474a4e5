package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPickIsBindableAndOutsideTheEphemeralRange(t *testing.T) {
	for i := 0; i < 20; i++ {
		p, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if p < low || p >= high {
			t.Fatalf("port %d outside %d-%d", p, low, high)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("picked port %d does not bind: %v", p, err)
		}
		l.Close()
	}
}

// Two servers picking one after the other, before either binds, get
// different ports.
func TestPickNeverGivesAPortTwice(t *testing.T) {
	seen := map[int]bool{}
	for i := 0; i < 500; i++ {
		p, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d picked twice", p)
		}
		seen[p] = true
	}
}
