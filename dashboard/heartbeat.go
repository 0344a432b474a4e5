package dashboard

import (
	"context"
	"time"
)

// Heartbeats reports, per configured source, when its last event arrived and
// whether it is silent. The heartbeat monitor implements it; the dashboard
// only shows what it says.
type Heartbeats interface {
	Heartbeats(ctx context.Context) ([]Heartbeat, error)
}

// Heartbeat is one source's heartbeat.
type Heartbeat struct {
	Source   string
	LastSeen time.Time // zero: never
	Silent   bool
	Reason   string // why it is silent, e.g. "no event for 3h10m (2× the median gap 1h35m)"
}
