package audit

import (
	"cmp"
	"fmt"
	"time"

	"github.com/inlet-dev/inlet/schema"
)

// Section is the audit: section of inlet.yaml: the sealer, which writes
// Merkle checkpoints over the event log (webhook_ingress.audit_checkpoints;
// `inlet audit verify` checks them).
type Section struct {
	// SealEvery runs the sealer inside inlet streamer (and inlet dev) at this
	// interval. 0 leaves it to a separate `inlet audit seal --every`.
	// Defaults to 0 for inlet streamer and 10s in inlet dev.
	SealEvery time.Duration `yaml:"seal_every"`
	// Grace is how old an event must be before it is sealed. Defaults to 5s.
	Grace time.Duration `yaml:"grace"`
	// DBRole is the role the sealer assumes. Defaults to "webhook_sealer".
	DBRole *string `yaml:"db_role"`
}

// WithDefaults returns a copy with every unset field at its default.
func (s Section) WithDefaults() Section {
	s.Grace = cmp.Or(s.Grace, 5*time.Second)
	if s.DBRole == nil {
		r := schema.SealerRole
		s.DBRole = &r
	}
	return s
}

// Validate checks the section (after WithDefaults) and names the first bad
// key, only that one.
func (s Section) Validate() error {
	switch {
	case s.SealEvery < 0:
		return fmt.Errorf("audit.seal_every: must not be negative, got %s", s.SealEvery)
	case s.Grace < 0:
		return fmt.Errorf("audit.grace: must not be negative, got %s", s.Grace)
	}
	return nil
}
