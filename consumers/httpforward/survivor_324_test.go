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
	"unicode/utf8"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/httpforward"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestSurvivor324_CutTransportErrorKeepsWholeCharacters keeps the guarantee
// that a transport error's text, cut to 200 bytes (cutText), is cut between
// characters: the stored error text quotes the non-HTTP answer's own
// characters, never half of one (which the SDK's strings.ToValidUTF8 turns
// into U+FFFD, a character the service never sent).
// Mutant (mutation run 324): consumers/httpforward/forward.go:217, the loop
// `for !utf8.ValidString(cut)` that backs the cut off to a rune boundary
// disabled (`for false && …`). TestMalformedAnswerBoundedInErrorText, the
// only test of the cut, answers ASCII only ("SSS…"), where every byte is a
// boundary.
// Setup: a raw TCP "service" answers one line of 1,500 "é" (two bytes
// each), once with and once without a one-byte "X" before it, so that one
// of the two errors' 200th byte falls inside an "é" whatever the length of
// net/http's words before the quote; max_attempts 1.
// Expected: both stored texts are valid UTF-8 without U+FFFD and end with
// "é…".
func TestSurvivor324_CutTransportErrorKeepsWholeCharacters(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
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
				body, _ := io.ReadAll(req.Body)
				line := strings.Repeat("é", 1500)
				if strings.Contains(string(body), "odd") {
					line = "X" + line
				}
				_, _ = io.WriteString(c, line+"\r\n\r\n")
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

	for _, id := range []string{"evt_324_even", "evt_324_odd"} {
		eventID := b.InsertEvent(t, consumertest.EventParams{Provider: "stripe", EventType: "invoice.paid", Body: []byte(`{"id":"` + id + `"}`)})
		jobID := b.JobID(t, eventID, "forward")
		b.WaitJobStatus(t, jobID, "dead_letter", 60*time.Second)
		as := b.Attempts(t, jobID)
		if len(as) != 1 || as[0].Error == nil {
			t.Fatalf("%s: attempts: %+v", id, as)
		}
		text := *as[0].Error
		if !strings.Contains(text, "éé") {
			t.Fatalf("%s: the stored error does not quote the answer: %q", id, text)
		}
		if !utf8.ValidString(text) || strings.ContainsRune(text, utf8.RuneError) || !strings.HasSuffix(text, "é…") {
			t.Errorf("%s: the stored error text (%d bytes) is cut inside a character: it ends %q, want whole characters then \"é…\"",
				id, len(text), text[max(0, len(text)-24):])
		}
	}
}
