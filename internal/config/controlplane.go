package config

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Reporter configures the metadata reporter of inlet streamer (and inlet
// dev): attempt records (an opaque job id, outcome, attempt, duration, error
// class, start and end; provider and event type only when IncludeProvider)
// POSTed in batches to an outside control plane. Off unless URL is set.
type Reporter struct {
	// URL is the control plane's base URL (https://cp.example.com); records
	// go to {URL}/api/v1/reports. Defaults to "": no reports.
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

// ControlPlane configures `inlet control-plane`, the multi-tenant receiver of
// reporters' records, with a database of its own.
type ControlPlane struct {
	// Listen is the address of its HTTP API and pages. Defaults to ":8090".
	Listen string `yaml:"listen"`
	// DatabaseURL is the control plane's own PostgreSQL database (schema
	// control_plane, created at start), never a data plane's. Required for
	// inlet control-plane.
	DatabaseURL string `yaml:"database_url"`
	// Tenants are the data planes that report here, each with its own token.
	Tenants []Tenant `yaml:"tenants"`
}

// Tenant is one reporting data plane.
type Tenant struct {
	// Name identifies the tenant in the control plane's tables and pages.
	// Required; lower-case letters, digits, '-' and '_'.
	Name string `yaml:"name"`
	// Token is the tenant's bearer token (reports) and page password.
	// Required, at least 16 bytes; give it as ${VAR}.
	Token string `yaml:"token"`
}

// minReportToken is the shortest reporter or tenant token accepted.
const minReportToken = 16

func (c *Config) reportingDefaults() {
	c.Reporter.BatchSize = or(c.Reporter.BatchSize, 500)
	c.Reporter.Interval = or(c.Reporter.Interval, 10*time.Second)
	c.ControlPlane.Listen = or(c.ControlPlane.Listen, ":8090")
}

func (c Config) validateReporting() error {
	r := c.Reporter
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
		if len(r.Token) < minReportToken {
			return fmt.Errorf("reporter.token: at least %d bytes required when reporter.url is set", minReportToken)
		}
		if !r.SendDatabaseIDs && len(r.Key) < minReportToken {
			return fmt.Errorf("reporter.key: at least %d bytes required when reporter.url is set (or set reporter.send_database_ids)", minReportToken)
		}
	}
	return c.ControlPlane.Validate()
}

// Validate checks the tenants' names and tokens. It does not require a
// database URL or tenants: only inlet control-plane needs them (see
// ValidateForServe).
func (cp ControlPlane) Validate() error {
	names := map[string]int{}
	tokens := map[string]int{}
	for i, t := range cp.Tenants {
		field := fmt.Sprintf("control_plane.tenants[%d]", i)
		if !sourceName.MatchString(t.Name) {
			return fmt.Errorf("%s.name: %q must be 1-63 lower-case letters, digits, '-' or '_'", field, t.Name)
		}
		if j, dup := names[t.Name]; dup {
			return fmt.Errorf("%s.name: %q is already the name of control_plane.tenants[%d]", field, t.Name, j)
		}
		names[t.Name] = i
		if len(t.Token) < minReportToken {
			return fmt.Errorf("%s.token: at least %d bytes required", field, minReportToken)
		}
		if j, dup := tokens[t.Token]; dup {
			return fmt.Errorf("%s.token: the same as control_plane.tenants[%d].token; each tenant needs its own", field, j)
		}
		tokens[t.Token] = i
	}
	return nil
}

// ValidateForServe is Validate plus what running inlet control-plane needs.
func (cp ControlPlane) ValidateForServe() error {
	if cp.DatabaseURL == "" {
		return errors.New("control_plane.database_url: required (the control plane's own database)")
	}
	if len(cp.Tenants) == 0 {
		return errors.New("control_plane.tenants: at least one tenant is required")
	}
	return cp.Validate()
}
