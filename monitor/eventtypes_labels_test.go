package monitor_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/monitor"
)

// GitHub's X-GitHub-Event is not signed: a replayed signed delivery without
// it is stored with type "" and one with "X-GitHub-Event: _none" with type
// "_none", and metricType labels "" as "_none" too. Collect adds such rows
// into one series. (Found by a review: it emitted two series with the same
// labels, Gather failed, and the streamer's whole /metrics answered 500
// until an operator removed the rows.)
func TestEventTypeLabelsNeverCollide(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	for _, e := range [][2]string{{"d-1", ""}, {"d-2", "_none"}} {
		exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ('github', 'github', $1, $2, '{}', true)`, e[0], e[1])
	}
	reg := prometheus.NewRegistry()
	w, err := monitor.NewEventTypes(monitor.EventTypesConfig{DB: streamer, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(metrics.Handler(reg))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics with github types \"\" and \"_none\": HTTP %d: %.300s", resp.StatusCode, body)
	}
}
