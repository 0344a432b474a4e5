package tracing

import (
	"cmp"
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
	// SampleRatio is the share of webhooks traced, 0 < r ≤ 1. Defaults to 1.
	SampleRatio float64 `yaml:"sample_ratio"`
}

// WithDefaults returns a copy with every unset field at its default.
func (s Section) WithDefaults() Section {
	s.SampleRatio = cmp.Or(s.SampleRatio, 1)
	return s
}

// Validate checks the section (after WithDefaults) and names the bad key.
func (s Section) Validate() error {
	if !(s.SampleRatio > 0 && s.SampleRatio <= 1) { // NaN compares false
		return fmt.Errorf("tracing.sample_ratio: %g must be in (0, 1]", s.SampleRatio)
	}
	if s.OTLPEndpoint != "" {
		u, err := url.Parse(s.OTLPEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("tracing.otlp_endpoint: want an http:// or https:// URL")
		}
	}
	return nil
}
