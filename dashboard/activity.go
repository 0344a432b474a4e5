package dashboard

import (
	"context"
	"time"
)

// Silence reports, per configured source, when its last event arrived and
// whether it is silent. The silence detector (package monitor) implements
// it; the dashboard only shows what it says in its source activity table.
type Silence interface {
	SourceActivity(ctx context.Context) ([]SourceActivity, error)
}

// SourceActivity is one row of the source activity table: a source's last
// event and the silence detector's judgement of it.
type SourceActivity struct {
	Source   string
	LastSeen time.Time // zero: never
	Silent   bool
	Reason   string // why it is silent, e.g. "no event for 3h10m (2× the median gap 1h35m)"
}
