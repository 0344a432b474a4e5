package httpforward_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/httpforward"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// Verify authenticates only the job id as signed, in canonical decimal: a
// captured request replayed with "Inlet-Job-Id: 042" or "+42" does not
// verify. (Found by a review: the MAC was computed over the parsed number,
// so those verified, and a receiver deduping on the header's text ran the
// replay again.)
func TestVerifyRejectsARewrittenJobID(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"evt_1"}`)
	h := signed(now, 42, body)
	if err := httpforward.Verify(secret, h, body, time.Minute, now); err != nil {
		t.Fatalf("genuine request: %v", err)
	}
	for _, id := range []string{"042", "+42", "0000042"} {
		replay := h.Clone()
		replay.Set(httpforward.HeaderJobID, id)
		if err := httpforward.Verify(secret, replay, body, time.Minute, now); err == nil {
			t.Errorf("signed for job id \"42\", replayed with %s: %q: Verify accepted it", httpforward.HeaderJobID, id)
		} else if !errors.Is(err, httpforward.ErrSignatureMismatch) && !errors.Is(err, httpforward.ErrMalformedSignature) {
			t.Errorf("job id %q: %v", id, err)
		}
	}
}

// The forwarded request carries the attempt's trace context, not the
// provider's (untrusted, unsigned) W3C trace headers: ingress starts a new
// root because trace headers from the internet are not trusted. (Found by a
// review: they were forwarded verbatim, so the internal service joined the
// trace, sampling flag, tracestate and baggage the sender chose.)
func TestForwardDoesNotPropagateTheProvidersTraceContext(t *testing.T) {
	t.Parallel()
	const (
		inletTrace    = "4bf92f3577b34da6a3ce929d0e0e4736"
		inletParent   = "00-" + inletTrace + "-00f067aa0ba902b7-01"
		providerTrace = "deadbeefdeadbeefdeadbeefdeadbeef"
	)
	b := consumertest.New(t)
	srv := newService(t, http.StatusOK)
	svc, err := consumers.New(consumers.Config{
		Pool: b.Worker, Subscriber: b.Bus,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handlers: []consumers.Handler{{
			Name: "forward", Provider: "stripe",
			Func: newForwarder(t, httpforward.Config{URL: srv.URL}),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })

	eventID := b.InsertEvent(t, consumertest.EventParams{
		Provider: "stripe", EventType: "invoice.paid", Body: []byte(`{"id":"evt_tp"}`),
		Headers: map[string][]string{
			"Content-Type": {"application/json"},
			// What the provider's request carried (nothing signs these).
			"Traceparent": {"00-" + providerTrace + "-1111111111111111-01"},
			"Tracestate":  {"attacker=" + strings.Repeat("x", 200)},
			"Baggage":     {"user.email=alice@example.com,card=4242424242424242"},
		},
	})
	refs := b.ClaimOnce(t, time.Minute)
	if len(refs) != 1 {
		t.Fatalf("claimed %d, want 1", len(refs))
	}
	msg, err := bus.NewMessage(refs[0])
	if err != nil {
		t.Fatal(err)
	}
	msg.Metadata.Set("traceparent", inletParent) // the streamer's span, as it publishes
	if err := b.Bus.Publish(bus.Topic("forward"), msg); err != nil {
		t.Fatal(err)
	}
	b.WaitJobStatus(t, b.JobID(t, eventID, "forward"), "completed", 15*time.Second)

	reqs := srv.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	h := reqs[0].header
	tp := h.Get("Traceparent")
	if strings.Contains(tp, providerTrace) {
		t.Errorf("forwarded Traceparent is the provider's %q: the internal service joins a trace the sender chose", tp)
	}
	if !strings.Contains(tp, inletTrace) {
		t.Errorf("forwarded Traceparent %q does not carry the attempt's trace %s", tp, inletTrace)
	}
	for _, k := range []string{"Tracestate", "Baggage"} {
		if v := h.Get(k); v != "" {
			t.Errorf("forwarded %s from the provider's request: %q", k, v)
		}
	}
}
