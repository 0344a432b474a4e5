package consumers_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// A handler that ends its goroutine with runtime.Goexit (t.FailNow, a
// library that calls Goexit, testify's require in a handler under test)
// returns neither a value nor a panic. The SDK's lease extension went on:
// the lease was pushed out forever, no outcome recorded, the reaper never
// saw it expire, and the job stayed "leased" until the service stopped (a
// review proved it). Now each such attempt is recorded as failed, class
// panic, and the job dead-letters after its attempts.
func TestHandlerGoexitIsARecordedFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const lease = time.Second
	var calls atomic.Int32
	cfg := b.config(consumers.Handler{Name: "goexit", Backoff: noBackoff, MaxAttempts: 2,
		Func: func(context.Context, *consumers.Event) error {
			calls.Add(1)
			runtime.Goexit()
			return nil
		}})
	cfg.LeaseExtend = lease
	b.start(t, cfg)
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: lease})

	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "goexit")
	consumertest.WaitFor(t, wait, "the handler to be called", func() bool { return calls.Load() >= 1 })

	j := b.WaitJobStatus(t, jobID, "dead_letter", wait)
	if deref(j.LastErrorClass) != "panic" || !strings.Contains(deref(j.LastError), "runtime.Goexit") || calls.Load() != 2 {
		t.Fatalf("job %d: class %q, error %q, %d handler calls; want class panic naming runtime.Goexit, 2 calls",
			jobID, deref(j.LastErrorClass), deref(j.LastError), calls.Load())
	}
	if got := b.Outcomes(t, jobID); !slices.Equal(got, []string{"failed", "dead_letter"}) {
		t.Errorf("attempts %v, want [failed dead_letter]", got)
	}
}

// badErr is a handler's error type whose Error method needs a non-nil
// receiver: returning a typed nil (`var e *badErr; return e`) is the
// classic Go mistake.
type badErr struct{ msg string }

func (e *badErr) Error() string { return e.msg }

// A handler returning a typed-nil error made the SDK call its Error method
// outside the handler's recover (errorText in record): the panic was on the
// attempt's goroutine and killed the whole consumer process, every handler
// with it (a review proved it). Now it is a recorded failure saying so. The
// service runs in a child process, so that a crash fails this test instead
// of the test binary.
func TestHandlerReturningATypedNilErrorIsARecordedFailure(t *testing.T) {
	if os.Getenv("INLET_TYPED_NIL_CHILD") == "1" {
		b := setup(t)
		b.start(t, b.config(consumers.Handler{Name: "typednil", Backoff: noBackoff, MaxAttempts: 1,
			Func: func(context.Context, *consumers.Event) error {
				var e *badErr
				return e
			}}))
		b.StartStreamer(t, consumertest.StreamerOptions{})
		jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "typednil")
		j := b.WaitJobStatus(t, jobID, "dead_letter", wait)
		if deref(j.LastErrorClass) != "handler_error" || !strings.Contains(deref(j.LastError), "typed nil") {
			t.Fatalf("job %d: class %q, error %q; want a handler_error saying it was a typed nil", jobID, deref(j.LastErrorClass), deref(j.LastError))
		}
		return
	}
	t.Parallel()
	if why, err := runChild(t, "TestHandlerReturningATypedNilErrorIsARecordedFailure", "INLET_TYPED_NIL_CHILD"); err != nil {
		t.Fatalf("the consumer service's process failed (%v) when a handler returned a typed-nil error:\n%s", err, why)
	}
}

// runChild runs test name of this binary in a child process, with
// environment variable env set to 1, for a test whose failure would end the
// process (a panic on one of the service's goroutines) and with it every
// other test. It returns the part of the child's output that says why it
// failed (from the panic on, else its last 4,000 bytes) and its error.
func runChild(t *testing.T, name, env string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		err = <-done
	}
	s := out.String()
	if i := strings.Index(s, "panic: "); i >= 0 {
		s = s[i:min(len(s), i+2500)]
	} else if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s, err
}
