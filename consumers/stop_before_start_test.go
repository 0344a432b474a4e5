package consumers_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
)

// TestStartAfterStopOfNewServiceIsRefused (review helper-151, fixed; this describes the code before the fix):
// Stop on a service that never started returns nil and leaves it in
// stateNew (service.go Stop, `case stateNew: return nil`), so a Start that
// comes after that Stop succeeds: the service registers its subscriptions,
// subscribes and runs attempts although the program already asked it to
// stop, and nothing will ever stop it (the program's one Stop has
// returned). This is the ordinary shutdown race of a program that calls
// `go svc.Start(ctx)` and Stops on SIGTERM: a signal arriving before Start
// got the lock leaves a running service (leases taken and extended, a
// consumers row alive) behind a shutdown the program believes done. Commit
// 7d758d8 made "Start after Stop" say "the service was stopped", but only for
// a service stopped after it started. The doc says "A service starts once"
// and that Stop "stops taking messages".
//
// Now: Start after any Stop fails with the "was stopped" error and
// starts nothing (as http.Server.ListenAndServe after Shutdown returns
// ErrServerClosed).
func TestStartAfterStopOfNewServiceIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, err := consumers.New(b.config(consumers.Handler{Name: "stopfirst", Func: ok}))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Stop(context.Background()); err != nil {
		t.Fatalf("Stop of a new service: %v", err)
	}
	err = svc.Start(context.Background())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
		t.Fatal("Start after Stop succeeded: the service runs although the program already stopped it; want \"the service was stopped\"")
	}
}
