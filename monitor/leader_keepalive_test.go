package monitor_test

import (
	"context"
	"testing"

	"github.com/inlet-dev/inlet/monitor"
)

// TestTheElectionConnectionKeepsItselfAlive: the server probes a Leader's
// connection (over TCP, as to any remote database) and drops it within
// about 30 s of its peer going silent, so the lock of a leader cut off by
// the network passes to another replica; without keepalives the server
// held it for the OS's 2 h. A keepalive set in the URL is kept.
func TestTheElectionConnectionKeepsItselfAlive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, streamer := pools(t)
	cfg := streamer.Config().ConnConfig
	l := monitor.NewLeader(cfg)
	t.Cleanup(l.Close)
	if leading, err := l.Leading(ctx); err != nil || !leading {
		t.Fatalf("Leading: %v, %v", leading, err)
	}
	for name, want := range map[string]string{"tcp_keepalives_idle": "15", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3"} {
		if got, err := l.Show(ctx, name); err != nil || got != want {
			t.Errorf("%s on the election connection: %q (%v), want %q", name, got, err, want)
		}
	}

	own := cfg.Copy()
	own.RuntimeParams = map[string]string{"tcp_keepalives_idle": "60"}
	l2 := monitor.NewNamedLeader(own, "keepalive-test")
	t.Cleanup(l2.Close)
	if _, err := l2.Leading(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := l2.Show(ctx, "tcp_keepalives_idle"); err != nil || got != "60" {
		t.Errorf("tcp_keepalives_idle set by the operator: %q (%v), want 60", got, err)
	}
}
