package httpserve_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/httpserve"
)

// blocking is a handler that says when a request has arrived and answers
// only once released.
type blocking struct {
	entered  chan struct{}
	release  chan struct{}
	finished chan struct{}
}

func newBlocking() *blocking {
	return &blocking{entered: make(chan struct{}), release: make(chan struct{}), finished: make(chan struct{})}
}

func (b *blocking) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	close(b.entered)
	select {
	case <-b.release:
		_, _ = io.WriteString(w, "drained")
		close(b.finished)
	case <-r.Context().Done():
	}
}

func start(t *testing.T, h http.Handler) *httpserve.Server {
	t.Helper()
	s, err := httpserve.Start(context.Background(), httpserve.Config{Name: "test", Addr: "127.0.0.1:0", Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

type result struct {
	status int
	body   string
	err    error
}

// get sends one request in the background.
func get(url string) <-chan result {
	out := make(chan result, 1)
	go func() {
		resp, err := http.Get(url)
		if err != nil {
			out <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		out <- result{status: resp.StatusCode, body: string(b), err: err}
	}()
	return out
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s after 10s", what)
	}
	panic("unreachable")
}

func TestStopDrainsARequestInFlight(t *testing.T) {
	t.Parallel()
	h := newBlocking()
	s := start(t, h)
	got := get("http://" + s.Addr().String() + "/")
	wait(t, h.entered, "request at the handler")

	stopped := make(chan error, 1)
	finishedFirst := make(chan bool, 1)
	go func() {
		err := s.Stop(context.Background())
		select {
		case <-h.finished:
			finishedFirst <- true
		default:
			finishedFirst <- false
		}
		stopped <- err
	}()
	// Done closes once Stop has closed the listener: the drain has begun.
	wait(t, s.Done(), "end of serving")
	if _, err := net.Dial("tcp", s.Addr().String()); err == nil {
		t.Error("a new connection was accepted while draining")
	}
	close(h.release)

	r := wait(t, got, "answer")
	if r.err != nil || r.status != http.StatusOK || r.body != "drained" {
		t.Fatalf("request in flight during Stop: status %d body %q err %v; want 200 \"drained\"", r.status, r.body, r.err)
	}
	if err := wait(t, stopped, "return of Stop"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !<-finishedFirst {
		t.Fatal("Stop returned before the request in flight had its answer")
	}
}

func TestStopWithExpiredContextClosesConnections(t *testing.T) {
	t.Parallel()
	h := newBlocking()
	s := start(t, h)
	t.Cleanup(func() { close(h.release) }) // before start's Stop: cleanups run last first
	got := get("http://" + s.Addr().String() + "/")
	wait(t, h.entered, "request at the handler")

	ctx, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(ctx) }()
	if err := wait(t, stopped, "return of Stop with an expired context"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop with an expired context: %v, want context.DeadlineExceeded", err)
	}
	if r := wait(t, got, "end of the request cut off"); r.err == nil {
		t.Fatalf("request cut off by Stop got an answer: status %d body %q", r.status, r.body)
	}
}

func TestStartNamesTheAddressItCannotListenOn(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	s, err := httpserve.Start(context.Background(), httpserve.Config{Name: "ingress", Addr: addr, Handler: http.NotFoundHandler()})
	if err == nil {
		_ = s.Stop(context.Background())
		t.Fatalf("Start on %s, already in use, succeeded", addr)
	}
	if want := "ingress listen on " + addr + ": "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start with %q", err, want)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("error %q does not wrap EADDRINUSE", err)
	}
}

func TestReadHeaderTimeoutClosesASilentClient(t *testing.T) {
	t.Parallel()
	s, err := httpserve.Start(context.Background(), httpserve.Config{Name: "test", Addr: "127.0.0.1:0",
		Handler: http.NotFoundHandler(), ReadHeaderTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Stop(context.Background()) }() // the test ends with the connection cut; how Stop ends is not under test here
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n"); err != nil { // headers never end
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	began := time.Now()
	b, err := io.ReadAll(c)
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatalf("connection with unfinished headers still open after 10s (ReadHeaderTimeout 100ms); read %q", b)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("connection closed after %v, want about ReadHeaderTimeout (100ms)", took)
	}
}

func TestNilServerIsOff(t *testing.T) {
	t.Parallel()
	var s *httpserve.Server
	if s.Addr() != nil || s.Stop(context.Background()) != nil || s.Done() != nil {
		t.Fatal("a nil Server must have no address, no Done channel and stop without error")
	}
}

func TestStartRefusesNoHandler(t *testing.T) {
	t.Parallel()
	if _, err := httpserve.Start(context.Background(), httpserve.Config{Name: "admin API", Addr: "127.0.0.1:0"}); err == nil ||
		!strings.Contains(err.Error(), "admin API") {
		t.Fatalf("Start without a handler: %v, want an error naming the server", err)
	}
}
