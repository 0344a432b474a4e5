package tracing

import (
	"errors"
	"fmt"
	"net/url"
)

// Section is the tracing: section of inlet.yaml: OpenTelemetry tracing,
// spans from ingress through the streamer to each handler attempt, one trace
// per webhook. Off by default.
type Section struct {
	// OTLPEndpoint is the OTLP/HTTP collector (http://otel-collector:4318;
	// spans go to /v1/traces unless the URL has a path). Defaults to "": off.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// SampleRatio is the share of webhooks traced, 0 ≤ r ≤ 1: the share of
	// the traces Inlet starts (a webhook's at ingress; a job's at the
	// streamer when its event has none) that are sampled. 0 samples none of
	// them; a job whose stored or carried trace context is sampled (its
	// event was traced under another ratio, or by another ingress) is still
	// traced, as its parent. Defaults to 1. A pointer, so that an explicit 0
	// is kept, not taken for unset.
	SampleRatio *float64 `yaml:"sample_ratio"`
}

// WithDefaults returns a copy with every unset field at its default.
func (s Section) WithDefaults() Section {
	if s.SampleRatio == nil {
		r := 1.0
		s.SampleRatio = &r
	}
	return s
}

// Ratio is SampleRatio, 1 when unset.
func (s Section) Ratio() float64 {
	if s.SampleRatio == nil {
		return 1
	}
	return *s.SampleRatio
}

// Validate checks the section (after WithDefaults) and names the bad key.
func (s Section) Validate() error {
	if r := s.Ratio(); !(r >= 0 && r <= 1) { // NaN compares false
		return fmt.Errorf("tracing.sample_ratio: %g must be in [0, 1] (0: none of the traces Inlet starts is sampled)", r)
	}
	if s.OTLPEndpoint != "" {
		u, err := url.Parse(s.OTLPEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("tracing.otlp_endpoint: want an http:// or https:// URL")
		}
	}
	return nil
}
