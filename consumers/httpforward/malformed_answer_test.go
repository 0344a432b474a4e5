package httpforward_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/httpforward"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestMalformedAnswerBoundedInErrorText (review helper-314, fixed).
// Defect: doc.go promises "Only the status and at most 200 bytes of the
// answer go into the error text", but an answer that net/http cannot parse
// (a status line or header line that is not HTTP: the wrong port, a
// non-HTTP service, a broken proxy) fails client.Do with an error that
// quotes the whole offending line ("malformed HTTP response \"...\"",
// "malformed MIME header line: ..."); forward.go:forward wraps that error
// verbatim (only *url.Error is unwrapped, unwrapURL), so the SDK stores up
// to maxErrorText (2000) bytes of the service's answer in
// attempts.error / jobs.last_error, ten times the documented bound.
// Setup: a real PostgreSQL (consumertest), the SDK with the forwarder, a
// raw TCP "service" that reads the request and answers one 3000-byte line
// of text that is not an HTTP status line; max_attempts 1.
// Expected: the stored error text carries at most 200 bytes of the answer.
// Observed: the stored error carries 1,9xx bytes of the answer (class
// network): "forward job N: net/http: HTTP/1.x transport connection
// broken: malformed HTTP response \"SSSS…".
// Fixed: a transport error's text is cut to maxAnswerText bytes in all
// (cutText), its chain kept for the timeout classification.
func TestMalformedAnswerBoundedInErrorText(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	const marker = "S"
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(c, strings.Repeat(marker, 3000)+"\r\n\r\n")
			}(c)
		}
	}()

	b := consumertest.New(t)
	svc, err := consumers.New(consumers.Config{
		Pool: b.Worker, Subscriber: b.Bus,
		Logger: slog.New(slog.DiscardHandler),
		Handlers: []consumers.Handler{{
			Name: "forward", Provider: "stripe", MaxAttempts: 1,
			Backoff: func(int) time.Duration { return 0 },
			Func:    newForwarder(t, httpforward.Config{URL: "http://" + ln.Addr().String() + "/hooks"}),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	b.StartStreamer(t, consumertest.StreamerOptions{})

	eventID := b.InsertEvent(t, consumertest.EventParams{Provider: "stripe", EventType: "invoice.paid", Body: []byte(`{"id":"evt_314"}`)})
	jobID := b.JobID(t, eventID, "forward")
	b.WaitJobStatus(t, jobID, "dead_letter", 30*time.Second)
	as := b.Attempts(t, jobID)
	if len(as) != 1 || as[0].Error == nil {
		t.Fatalf("attempts: %+v", as)
	}
	class := "<nil>"
	if as[0].ErrorClass != nil {
		class = *as[0].ErrorClass
	}
	text := *as[0].Error
	if n := strings.Count(text, marker); n > 200 {
		t.Fatalf("the stored error text carries %d bytes of the service's answer (class %s, %d bytes in all), "+
			"over the documented bound of 200: %.160q…", n, class, len(text), text)
	}
}
