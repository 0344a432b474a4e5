package monitor_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/monitor"
)

// The circuit of each limited handler, read as the streamer's role.
func TestLimitGauges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	if _, err := super.Exec(ctx, `INSERT INTO webhook_ingress.handler_limits (handler, rate_per_second, burst, breaker_failures, breaker_probe_interval, consecutive_failures, circuit)
		VALUES ('billing', 2.5, 3, 5, '30s', 5, 'open'), ('audit', NULL, NULL, NULL, NULL, 0, 'closed')`); err != nil {
		t.Fatal(err)
	}
	if _, err := super.Exec(ctx, `UPDATE webhook_ingress.handler_limits SET max_in_flight = 4 WHERE handler = 'audit'`); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(monitor.NewLimits(streamer, nil))
	want := `
# HELP inlet_handler_circuit 1 for the state of the handler's circuit breaker (closed, open: its jobs wait; half_open: a probe runs), 0 for the others.
# TYPE inlet_handler_circuit gauge
inlet_handler_circuit{handler="audit",state="closed"} 1
inlet_handler_circuit{handler="audit",state="half_open"} 0
inlet_handler_circuit{handler="audit",state="open"} 0
inlet_handler_circuit{handler="billing",state="closed"} 0
inlet_handler_circuit{handler="billing",state="half_open"} 0
inlet_handler_circuit{handler="billing",state="open"} 1
# HELP inlet_handler_consecutive_failures Consecutive failed attempts of the handler counted towards opening its circuit.
# TYPE inlet_handler_consecutive_failures gauge
inlet_handler_consecutive_failures{handler="audit"} 0
inlet_handler_consecutive_failures{handler="billing"} 5
# HELP inlet_handler_rate_limit The handler's rate limit in job starts per second across every replica; 0: none.
# TYPE inlet_handler_rate_limit gauge
inlet_handler_rate_limit{handler="audit"} 0
inlet_handler_rate_limit{handler="billing"} 2.5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "inlet_handler_circuit", "inlet_handler_consecutive_failures", "inlet_handler_rate_limit"); err != nil {
		t.Fatal(err)
	}
}
