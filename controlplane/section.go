package controlplane

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"

	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/reporter"
)

// Section is the control_plane: section of inlet.yaml, for `inlet
// control-plane`, the multi-tenant receiver of reporters' records, with a
// database of its own.
type Section struct {
	// Listen is the address of its HTTP API and pages. Defaults to ":8090".
	Listen string `yaml:"listen"`
	// DatabaseURL is the control plane's own PostgreSQL database (schema
	// control_plane, created at start), never a data plane's. Required for
	// inlet control-plane.
	DatabaseURL string `yaml:"database_url"`
	// Tenants are the data planes that report here, each with its own token.
	Tenants []Tenant `yaml:"tenants"`
}

// WithDefaults returns a copy with every unset field at its default.
func (cp Section) WithDefaults() Section {
	cp.Listen = cmp.Or(cp.Listen, ":8090")
	return cp
}

var tenantName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Validate checks the tenants' names and tokens. It does not require a
// database URL or tenants: only inlet control-plane needs them (see
// ValidateForServe).
func (cp Section) Validate() error {
	if err := config.CheckListen("control_plane.listen", cp.Listen, ""); err != nil {
		return err
	}
	tokens := map[string]int{}
	for i, t := range cp.Tenants {
		field := fmt.Sprintf("control_plane.tenants[%d]", i)
		if !tenantName.MatchString(t.Name) {
			return fmt.Errorf("%s.name: %q must be 1-63 lower-case letters, digits, '-' or '_'", field, t.Name)
		}
		// A name may come twice, with two tokens: a rotation (the new token
		// given to the data plane while the old one still answers; the
		// server takes both as the one tenant).
		if len(t.Token) < reporter.MinTokenBytes {
			return fmt.Errorf("%s.token: at least %d bytes required", field, reporter.MinTokenBytes)
		}
		if j, dup := tokens[t.Token]; dup {
			return fmt.Errorf("%s.token: the same as control_plane.tenants[%d].token; each tenant needs its own", field, j)
		}
		tokens[t.Token] = i
	}
	return nil
}

// ValidateForServe is Validate plus what running inlet control-plane needs.
func (cp Section) ValidateForServe() error {
	if cp.DatabaseURL == "" {
		return errors.New("control_plane.database_url: required (the control plane's own database)")
	}
	if len(cp.Tenants) == 0 {
		return errors.New("control_plane.tenants: at least one tenant is required")
	}
	return cp.Validate()
}
