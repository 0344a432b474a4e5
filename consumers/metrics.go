package consumers

import (
	"slices"
	"time"
)

// Metrics counts finished attempts for the metrics system the program
// chooses: the SDK imports none. inlet consumer and inlet dev export them to
// Prometheus as inlet_consumer_attempts_total, inlet_consumer_failures_total
// and inlet_consumer_attempt_duration_seconds. The service calls it from many
// goroutines at once.
type Metrics interface {
	// AttemptFinished counts one attempt of handler: its outcome (one of
	// [Outcomes]), its error class (empty when it succeeded, one of
	// [Classes] otherwise) and how long it took from taking the attempt to
	// recording its outcome.
	AttemptFinished(handler, outcome string, class ErrorClass, took time.Duration)
}

// The outcomes an attempt is counted with: "lost" is an attempt whose lease
// was gone when it reported (its outcome was not recorded); "record_error"
// one whose outcome could not be written; "given_back" a transactional
// attempt whose handler never ran for want of a transaction slot (class
// transaction: the slots were held past every Timeout, by a handler that
// ignores its context or a commit that does not end), its lease given back
// and the attempt not counted.
var attemptOutcomes = []string{"completed", "failed", "dead_letter", "lost", "record_error", "given_back"}

// Outcomes returns every outcome [Metrics] is told, a fresh slice each call,
// so an exporter can start each series at zero.
func Outcomes() []string { return slices.Clone(attemptOutcomes) }

// noMetrics counts nothing: Config.Metrics is nil.
type noMetrics struct{}

func (noMetrics) AttemptFinished(string, string, ErrorClass, time.Duration) {}
