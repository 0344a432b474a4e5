package httpserve_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/httpserve"
)

// MaxConnections: past it a new connection is not served (it waits in the
// accept queue, not refused) until one of those open closes; then it is.
func TestMaxConnectionsHoldsNewConnectionsBack(t *testing.T) {
	t.Parallel()
	var inside atomic.Int32
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside.Add(1)
		defer inside.Add(-1)
		if r.URL.Path == "/block" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	s, err := httpserve.Start(context.Background(), httpserve.Config{Name: "test", Addr: "127.0.0.1:0", Handler: h, MaxConnections: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	base := "http://" + s.Addr().String()
	blocked := []<-chan result{get(base + "/block"), get(base + "/block")}
	deadline := time.Now().Add(10 * time.Second)
	for inside.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := inside.Load(); n != 2 {
		t.Fatalf("%d requests at the handler, want the 2 blocked", n)
	}
	third := get(base + "/")
	select {
	case r := <-third:
		t.Fatalf("a third connection was served while 2 of 2 were open: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	for _, ch := range blocked {
		if r := wait(t, ch, "answer of a blocked request"); r.err != nil || r.status != http.StatusOK {
			t.Fatalf("blocked request: %+v", r)
		}
	}
	if r := wait(t, third, "answer of the third request"); r.err != nil || r.status != http.StatusOK || r.body != "ok" {
		t.Fatalf("third request once room was made: %+v", r)
	}
}

// Idle keep-alive connections do not keep a new one out: when every slot is
// taken, keep-alive goes off and the idle connections are closed.
func TestMaxConnectionsClosesIdleConnectionsWhenFull(t *testing.T) {
	t.Parallel()
	s, err := httpserve.Start(context.Background(), httpserve.Config{Name: "test", Addr: "127.0.0.1:0",
		Handler:        http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		MaxConnections: 2, IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	idle, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	request := fmt.Sprintf("GET / HTTP/1.1\r\nHost: %s\r\n\r\n", s.Addr())
	if _, err := io.WriteString(idle, request); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		t.Fatal("premise: the first answer closed its connection; want it kept alive (idle)")
	}

	// A second connection takes the last slot: the idle one is closed to
	// make room, and new connections are served, each well before
	// idle_timeout.
	for i := range 3 {
		began := time.Now()
		r := wait(t, get("http://"+s.Addr().String()+"/"), "answer on a new connection")
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("new connection %d while idle ones held the slots: %+v", i, r)
		}
		if took := time.Since(began); took > 5*time.Second {
			t.Errorf("new connection %d served after %s", i, took)
		}
	}
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := br.ReadByte(); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("the idle connection is still open (read %q, %v); want it closed to make room", b, err)
	}
}

func TestMaxConnectionsMustNotBeNegative(t *testing.T) {
	t.Parallel()
	s, err := httpserve.Start(context.Background(), httpserve.Config{Name: "ingress", Addr: "127.0.0.1:0", Handler: http.NotFoundHandler(), MaxConnections: -1})
	if err == nil {
		_ = s.Stop(context.Background())
		t.Fatal("Start with MaxConnections -1 succeeded")
	}
	if !strings.Contains(err.Error(), "ingress") || !strings.Contains(err.Error(), "-1") {
		t.Errorf("error %q does not name the server and the value", err)
	}
}
