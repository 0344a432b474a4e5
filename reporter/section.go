package reporter

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// MinTokenBytes is the shortest reporter token or key, and tenant token,
// accepted.
const MinTokenBytes = 16

// Section is the reporter: section of inlet.yaml: the metadata reporter of inlet streamer (and inlet
// dev): attempt records (an opaque job id, outcome, attempt, duration, error
// class, start and end; provider and event type only when IncludeProvider)
// POSTed in batches to an outside control plane. Off unless URL is set.
type Section struct {
	// URL is the control plane's base URL (https://cp.example.com, a path
	// prefix allowed, no query or fragment); records go to
	// {URL}/api/v1/reports. Defaults to "": no reports.
	URL string `yaml:"url"`
	// Token is this data plane's bearer token at the control plane (its
	// tenant token). Required when URL is set, at least 16 bytes.
	Token string `yaml:"token"`
	// Key is the HMAC-SHA256 key of the opaque job ids, kept per deployment
	// so the control plane cannot map an id back to a database row. Required
	// when URL is set unless SendDatabaseIDs, at least 16 bytes.
	Key string `yaml:"key"`
	// SendDatabaseIDs sends jobs.id itself instead of the opaque id.
	// Defaults to false.
	SendDatabaseIDs bool `yaml:"send_database_ids"`
	// IncludeProvider adds each attempt's source name and event type.
	// Defaults to false: neither leaves the database.
	IncludeProvider bool `yaml:"include_provider"`
	// BatchSize is the most records one POST carries. Defaults to 500.
	BatchSize int `yaml:"batch_size"`
	// Interval is how often new attempts are looked for once caught up.
	// Defaults to 10s.
	Interval time.Duration `yaml:"interval"`
}

// WithDefaults returns a copy with every unset field at its default.
func (r Section) WithDefaults() Section {
	r.BatchSize = cmp.Or(r.BatchSize, 500)
	r.Interval = cmp.Or(r.Interval, 10*time.Second)
	return r
}

// Validate checks the section (after WithDefaults) and names the first bad
// key.
func (r Section) Validate() error {
	if r.BatchSize < 1 || r.BatchSize > 1000 {
		return fmt.Errorf("reporter.batch_size: %d must be between 1 and 1000", r.BatchSize)
	}
	if r.Interval < 100*time.Millisecond {
		return fmt.Errorf("reporter.interval: %s must be at least 100ms", r.Interval)
	}
	if r.URL != "" {
		u, err := url.Parse(r.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return errors.New("reporter.url: want an http:// or https:// URL without credentials")
		}
		if strings.ContainsAny(r.URL, "?#") {
			// The reporter appends /api/v1/... to the URL: after a query or
			// a fragment that path is no path, and every request went to
			// the control plane's page, which answers 401. The URL is not
			// quoted: a query is where a secret would be put.
			return errors.New("reporter.url: want the control plane's base URL, without a query or fragment ('?', '#')")
		}
		if len(r.Token) < MinTokenBytes {
			return fmt.Errorf("reporter.token: at least %d bytes required when reporter.url is set", MinTokenBytes)
		}
		if !r.SendDatabaseIDs && len(r.Key) < MinTokenBytes {
			return fmt.Errorf("reporter.key: at least %d bytes required when reporter.url is set (or set reporter.send_database_ids)", MinTokenBytes)
		}
	}
	return nil
}

// Config is the reporter's Config with the section's settings; the caller
// adds the pool and the logger.
func (r Section) Config() Config {
	return Config{URL: r.URL, Token: r.Token, Key: []byte(r.Key), SendDatabaseIDs: r.SendDatabaseIDs,
		IncludeProvider: r.IncludeProvider, BatchSize: r.BatchSize, Interval: r.Interval}
}
