package monitor_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/logvalue"
	"github.com/inlet-dev/inlet/monitor"
)

// An event type comes from an unsigned header the sender chooses (up to
// 256 bytes stored): the watcher's "new event type" line carries it cut to
// logvalue.Bytes with its length beside it, as docs/operations.md says of
// every value a request chose. (It was logged whole.)
func TestEventTypeLoggedClipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	long := strings.Repeat("t", 200)
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('github', 'github', 'd-1', $1, '{}', true)`, long)
	var logs strings.Builder
	var logMu sync.Mutex
	w, err := monitor.NewEventTypes(monitor.EventTypesConfig{DB: streamer, Metrics: prometheus.NewRegistry(), Logger: newLogger(&logs, &logMu)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	logMu.Lock()
	got := logs.String()
	logMu.Unlock()
	clipped, _ := logvalue.Clip(long, logvalue.Bytes)
	if !strings.Contains(got, `msg="new event type"`) || !strings.Contains(got, "event_type="+clipped+" ") ||
		!strings.Contains(got, "event_type_bytes=200") {
		t.Errorf("the new type's line does not carry it cut to %d bytes with event_type_bytes=200: %s", logvalue.Bytes, got)
	}
	if strings.Contains(got, long) {
		t.Errorf("the %d-byte event type is logged whole: %s", len(long), got)
	}
}
