package consumers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
)

// TestTypedNilSubscriberIsAnError (review helper-137, fixed; this describes
// the code before the fix):
//
// Config.validate checked `c.Subscriber == nil`, which a typed nil (a nil
// *natsbus.NATS in the message.Subscriber interface: `var sub
// *natsbus.NATS; if useNATS { sub, err = natsbus.New(…) }; cfg.Subscriber =
// sub`) passes. New accepted it; Start then REGISTERED the handler's
// subscriptions in PostgreSQL (so ingress's fan-out started writing jobs for
// it) and only then called Subscribe on the nil pointer, which panicked
// (nil pointer dereference in (*NATS).Subscribe) and took the process down,
// instead of returning "subscriber: required". The SDK already guarded
// handlers' typed-nil errors (notTypedNil, attempt.go); the config was not.
//
// Now: New returns an error naming the subscriber ("subscriber: required
// (got a nil *natsbus.NATS)"); nothing is registered. Config's other
// interfaces (Metrics, TracerProvider) are refused likewise
// (TestConfigValidate).
func TestTypedNilSubscriberIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var sub *natsbus.NATS // a NATS transport that was never made
	cfg := b.config(consumers.Handler{Name: "typednil", Func: ok})
	cfg.Subscriber = sub
	svc, err := consumers.New(cfg)
	if err != nil {
		if !strings.Contains(err.Error(), "subscriber: required") {
			t.Errorf("New: %v; want it to name the subscriber", err)
		}
		return
	}
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		err = svc.Start(context.Background())
	}()
	var registered int
	if qerr := b.Admin.QueryRow(context.Background(),
		`SELECT count(*) FROM webhook_ingress.subscriptions WHERE handler = 'typednil'`).Scan(&registered); qerr != nil {
		t.Fatal(qerr)
	}
	if panicked != nil {
		t.Fatalf("New accepted a nil *natsbus.NATS as Subscriber, and Start panicked (%s) after registering %d subscription(s) of the handler; want New to fail with \"subscriber: required\"",
			firstLine(fmt.Sprint(panicked)), registered)
	}
	if err == nil {
		t.Fatal("Start with a nil *natsbus.NATS as Subscriber returned nil")
	}
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}
