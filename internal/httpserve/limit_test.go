package httpserve_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
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

// startFull starts a server of MaxConnections n whose requests to /block
// wait for release, and fills n-1 slots with such requests, so the next
// connection fills it. ReadHeaderTimeout is a minute: any connection closed
// sooner was closed to make room.
func startFull(t *testing.T, n int) (s *httpserve.Server, releaseAll func()) {
	t.Helper()
	var inside atomic.Int32
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			inside.Add(1)
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	s, err := httpserve.Start(context.Background(), httpserve.Config{Name: "test", Addr: "127.0.0.1:0", Handler: h,
		MaxConnections: n, ReadHeaderTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	var once sync.Once
	releaseAll = func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseAll) // runs before Stop
	for range n - 1 {
		get("http://" + s.Addr().String() + "/block")
	}
	deadline := time.Now().Add(10 * time.Second)
	for inside.Load() < int32(n-1) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := inside.Load(); got != int32(n-1) {
		t.Fatalf("premise: %d requests at the handler, want %d", got, n-1)
	}
	return s, releaseAll
}

// closed reports whether c is closed by the server within d (read ends
// without a timeout).
func closed(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	ne, ok := errors.AsType[net.Error](err)
	return err != nil && (!ok || !ne.Timeout())
}

// A connection that sends nothing does not keep a new one out for long:
// while the listener is full it is closed about a second after its accept,
// not after ReadHeaderTimeout (a minute here), and the next connection is
// served.
func TestMaxConnectionsClosesSilentConnectionsWhenFull(t *testing.T) {
	t.Parallel()
	s, _ := startFull(t, 2)
	silent, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	time.Sleep(100 * time.Millisecond) // accepted: the listener is full
	began := time.Now()
	r := wait(t, get("http://"+s.Addr().String()+"/"), "answer on a new connection")
	took := time.Since(began)
	if r.err != nil || r.status != http.StatusOK {
		t.Fatalf("new connection while a silent one held the last slot: %+v", r)
	}
	if took > 3*time.Second {
		t.Errorf("new connection served after %s, want about a second (the grace of the silent one)", took)
	}
	if !closed(silent, 5*time.Second) {
		t.Error("the connection that sent nothing is still open; want it closed to make room")
	}
}

// Headers sent whole within the grace, even in pieces, are served while the
// listener is full: only a connection with no request to serve is cut.
func TestMaxConnectionsServesHeadersSentWithinTheGrace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		first, after string
		delay        time.Duration
	}{
		{"all after 600ms", "", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 600 * time.Millisecond},
		{"the end after 700ms", "GET / HTTP/1.1\r\nHost: x\r\n", "X-Late: 1\r\n\r\n", 700 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := startFull(t, 2)
			c, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// A connection waiting behind it keeps the listener wanting a slot.
			queued := get("http://" + s.Addr().String() + "/")
			if _, err := io.WriteString(c, tc.first); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tc.delay)
			if _, err := io.WriteString(c, tc.after); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("headers sent whole %s after connecting to a full listener: %v; want an answer", tc.delay, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", resp.StatusCode)
			}
			if r := wait(t, queued, "answer of the queued request"); r.err != nil || r.status != http.StatusOK {
				t.Fatalf("queued request: %+v", r)
			}
		})
	}
}

// A connection that waited in the accept queue longer than the grace
// without sending a byte is closed as soon as it is accepted (Linux, where
// the kernel says how long it was silent), so a webhook queued behind any
// number of them waits about the grace at most.
func TestMaxConnectionsClosesConnectionsSilentInTheQueueAtOnce(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the time a connection waited in the accept queue is read from Linux's TCP_INFO")
	}
	s, release := startFull(t, 2)
	// The last slot: a request that holds it until release.
	last := get("http://" + s.Addr().String() + "/block")
	time.Sleep(100 * time.Millisecond)
	var silent []net.Conn
	for range 8 {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	time.Sleep(50 * time.Millisecond)
	behind := make(chan time.Time, 1)
	go func() {
		r := <-get("http://" + s.Addr().String() + "/")
		if r.err != nil || r.status != http.StatusOK {
			t.Errorf("request queued behind the silent connections: %+v", r)
		}
		behind <- time.Now()
	}()
	time.Sleep(1500 * time.Millisecond) // the silent ones pass their grace in the queue
	released := time.Now()
	release()
	if r := wait(t, last, "answer of a blocked request"); r.err != nil || r.status != http.StatusOK {
		t.Fatalf("blocked request: %+v", r)
	}
	if took := wait(t, behind, "answer of the request behind the silent connections").Sub(released); took > 500*time.Millisecond {
		t.Errorf("request queued behind 8 connections silent for 1.5 s served %s after a slot freed; want them closed at once", took)
	}
	for i, c := range silent {
		if !closed(c, 5*time.Second) {
			t.Errorf("silent connection %d still open", i)
		}
	}
}
