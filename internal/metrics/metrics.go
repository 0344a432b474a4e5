// Package metrics holds what Inlet's Prometheus metrics share: the
// namespace, the registry of a process, and the /metrics handler. Each
// package defines its own metrics beside the code that counts them
// (ingress/metrics.go, streamer/metrics.go, monitor/), except the consumer
// SDK's: it counts through its consumers.Metrics interface and imports no
// metrics library, and consumers.go here exports those counts. No label ever carries an event id, a customer id, a header or
// body value: labels are configured source and handler names, reasons and
// error classes from fixed lists, and states.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every Inlet metric: inlet_ingress_stored_total.
const Namespace = "inlet"

// NewRegistry is a process's registry, with the Go runtime and process
// collectors.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Handler serves reg in the Prometheus text format.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// OrDiscard is reg, or a registry nobody reads when reg is nil, so packages
// count unconditionally.
func OrDiscard(reg prometheus.Registerer) prometheus.Registerer {
	if reg == nil {
		return prometheus.NewRegistry()
	}
	return reg
}
