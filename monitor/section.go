package monitor

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"time"

	"github.com/inlet-dev/inlet/internal/config"
)

// Section is the silence: section of inlet.yaml (its old name heartbeat: is
// still read, with a warning): the silent-source detector, run by inlet
// streamer (and inlet dev). A source is silent when the time since its last
// event exceeds Factor × the median gap between its recent events, or its
// fixed MaxSilence. TypesEvery and MaxTypesPerSource tune the event-type
// watcher that runs beside the detector (even when it is disabled) and
// shares its AlertURL.
type Section struct {
	// CheckEvery is how often sources are judged. Defaults to 1m.
	CheckEvery time.Duration `yaml:"check_every"`
	// Disabled turns the detector off (not the event-type watcher).
	Disabled bool `yaml:"disabled"`
	// Factor multiplies the median gap. Defaults to 2.
	Factor float64 `yaml:"factor"`
	// History is how many recent events the median is taken over. Defaults to 50.
	History int `yaml:"history"`
	// MinEvents is the fewest events a median needs. Defaults to 10.
	MinEvents int `yaml:"min_events"`
	// MinSilence is the shortest silence ever reported. Defaults to 1m.
	MinSilence time.Duration `yaml:"min_silence"`
	// MaxSilence is a fixed limit per source name: {stripe: 6h}. A source
	// named here is watched before its first event.
	MaxSilence map[string]time.Duration `yaml:"max_silence"`
	// AlertURL receives a JSON POST when a source goes silent or resumes
	// (alert_id, source, status, last_seen, threshold_seconds, reason;
	// alert_id is the same on every POST of one change). Defaults to
	// "": log line and metric only. New event types are POSTed here too
	// (status new_event_type).
	AlertURL string `yaml:"alert_url"`
	// TypesEvery is how often the streamer folds the event types stored
	// into event_types, refreshes inlet_events_unrouted_total and reports
	// types never seen before. Defaults to 10s.
	TypesEvery time.Duration `yaml:"types_every"`
	// MaxTypesPerSource caps the distinct event types a source keeps in
	// event_types, the metrics and the alerts; later new types are counted
	// as _other (GitHub's and Shopify's type headers are not signed).
	// Defaults to 100.
	MaxTypesPerSource int `yaml:"max_types_per_source"`
}

// WithDefaults returns a copy with every unset field at its default.
func (s Section) WithDefaults() Section {
	s.CheckEvery = cmp.Or(s.CheckEvery, time.Minute)
	s.Factor = cmp.Or(s.Factor, 2)
	s.History = cmp.Or(s.History, 50)
	s.MinEvents = cmp.Or(s.MinEvents, 10)
	s.MinSilence = cmp.Or(s.MinSilence, time.Minute)
	s.TypesEvery = cmp.Or(s.TypesEvery, 10*time.Second)
	s.MaxTypesPerSource = cmp.Or(s.MaxTypesPerSource, DefaultMaxTypesPerSource)
	return s
}

// maxFactor bounds silence.factor: beyond it no source is ever silent.
const maxFactor = 1000

// Validate checks the section (after WithDefaults) and names the first bad
// key.
func (s Section) Validate() error {
	switch {
	case s.CheckEvery < time.Second:
		return fmt.Errorf("silence.check_every: %s must be at least 1s", s.CheckEvery)
	case !(s.Factor >= 1 && s.Factor <= maxFactor): // NaN compares false
		return fmt.Errorf("silence.factor: %g must be between 1 and %g", s.Factor, float64(maxFactor))
	case s.MinEvents < 2 || s.History < s.MinEvents:
		return fmt.Errorf("silence.min_events: %d must be at least 2 and at most silence.history (%d)", s.MinEvents, s.History)
	case s.MinSilence < 0:
		return fmt.Errorf("silence.min_silence: must not be negative, got %s", s.MinSilence)
	case s.TypesEvery < 100*time.Millisecond:
		return fmt.Errorf("silence.types_every: %s must be at least 100ms", s.TypesEvery)
	case s.MaxTypesPerSource < 1:
		return fmt.Errorf("silence.max_types_per_source: %d must be at least 1", s.MaxTypesPerSource)
	}
	// In name order, so the key named is the same on every run. The path
	// travels typed: a source name may hold '-'.
	for _, name := range slices.Sorted(maps.Keys(s.MaxSilence)) {
		if d := s.MaxSilence[name]; d <= 0 {
			return config.KeyErrorf("silence.max_silence."+name, "%s must be positive", d)
		}
	}
	if s.AlertURL != "" {
		u, err := url.Parse(s.AlertURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("silence.alert_url: want an http:// or https:// URL")
		}
	}
	return nil
}

// SilenceConfig is the detector's config with the section's settings;
// the caller adds the database, logger, metrics and leader.
func (s Section) SilenceConfig() SilenceConfig {
	return SilenceConfig{Factor: s.Factor, History: s.History, MinEvents: s.MinEvents, MinSilence: s.MinSilence,
		MaxSilence: s.MaxSilence, AlertURL: s.AlertURL}
}

// EventTypesConfig is the event-type watcher's config with the section's
// settings; the caller adds the database, logger, metrics and leader.
func (s Section) EventTypesConfig() EventTypesConfig {
	return EventTypesConfig{MaxTypesPerSource: s.MaxTypesPerSource, AlertURL: s.AlertURL}
}
