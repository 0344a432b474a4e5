package retention

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Section is the retention: section of inlet.yaml, for inlet retention,
// which runs as the owner of webhook_ingress (the role of inlet migrate): it
// creates the period partitions of events, jobs and job_attempts ahead of
// time and drops whole periods older than MaxAge once their jobs are
// finished and their events sealed. inlet migrate and inlet dev create
// partitions ahead too.
type Section struct {
	// MaxAge is how long events are kept: days (90d), weeks (13w) or a Go
	// duration (2160h). Defaults to "": kept forever.
	MaxAge string `yaml:"max_age"`
	// PartitionInterval is the length of new partitions: day, week or month
	// (UTC). Existing partitions keep theirs. Defaults to week.
	PartitionInterval string `yaml:"partition_interval"`
	// Ahead is how many periods past the current one get partitions; an
	// event whose period has none lands in the default partition, which is
	// kept forever. Defaults to 4.
	Ahead *int `yaml:"ahead"`
	// LockTimeout bounds each wait for partition locks (creating or dropping
	// a partition briefly locks the table ingress writes). Defaults to 5s.
	LockTimeout time.Duration `yaml:"lock_timeout"`
}

// WithDefaults returns a copy with every unset field at its default.
func (s Section) WithDefaults() Section {
	s.PartitionInterval = cmp.Or(s.PartitionInterval, DefaultInterval)
	if s.Ahead == nil {
		n := DefaultAhead
		s.Ahead = &n
	}
	s.LockTimeout = cmp.Or(s.LockTimeout, DefaultLockTimeout)
	return s
}

// Validate checks the section (after WithDefaults) and names the first bad
// key.
func (s Section) Validate() error {
	if _, err := s.MaxAgeDuration(); err != nil {
		return err
	}
	if !slices.Contains(Intervals, s.PartitionInterval) {
		return fmt.Errorf("retention.partition_interval: %q must be day, week or month", s.PartitionInterval)
	}
	if s.Ahead != nil && (*s.Ahead < 0 || *s.Ahead > 366) {
		return fmt.Errorf("retention.ahead: %d must be 0..366", *s.Ahead)
	}
	if s.LockTimeout < 0 {
		return fmt.Errorf("retention.lock_timeout: must not be negative, got %s", s.LockTimeout)
	}
	return nil
}

// MaxAgeDuration is MaxAge parsed; 0 when unset.
func (s Section) MaxAgeDuration() (time.Duration, error) {
	if s.MaxAge == "" {
		return 0, nil
	}
	d, err := ParseAge(s.MaxAge)
	if err != nil {
		return 0, fmt.Errorf("retention.max_age: %w", err)
	}
	return d, nil
}

// Options are the Run options the section says (Ahead defaults to
// DefaultAhead when unset).
func (s Section) Options() (Options, error) {
	age, err := s.MaxAgeDuration()
	if err != nil {
		return Options{}, err
	}
	o := Options{MaxAge: age, Interval: s.PartitionInterval, Ahead: DefaultAhead, LockTimeout: s.LockTimeout}
	if s.Ahead != nil {
		o.Ahead = *s.Ahead
	}
	return o, nil
}

// maxAge is the longest age ParseAge takes: 106,751 days, the most whole
// days a time.Duration holds.
const maxAge = time.Duration(106751) * 24 * time.Hour

// ParseAge reads an age: a whole number of days (90d) or weeks (13w), or a Go
// duration (2160h).
func ParseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.Atoi(n)
			if err != nil || v < 0 {
				return 0, fmt.Errorf("age %q: want a whole number before %q (90d, 13w) or a duration (2160h)", s, suffix)
			}
			// time.Duration holds about 292 years: more would wrap around
			// (213505d became a day, and retention dropped recent history).
			if int64(v) > int64(maxAge/unit) {
				return 0, fmt.Errorf("age %q: at most %dd (about 290 years); leave max_age unset to keep everything", s, int64(maxAge/(24*time.Hour)))
			}
			return time.Duration(v) * unit, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("age %q: want days (90d), weeks (13w) or a duration (2160h)", s)
	}
	return d, nil
}
