package admin

import (
	"fmt"

	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/schema"
)

// Section is the admin: section of inlet.yaml: the operator tools (inlet
// events, dlq and replay) and the admin HTTP API.
type Section struct {
	// Listen is the address of the admin HTTP API, served by inlet ingress
	// and inlet dev on a listener of its own (never the webhook port).
	// Defaults to "": no admin API.
	Listen string `yaml:"listen"`
	// Token is the bearer token of the admin API. Required when Listen is
	// set, at least MinTokenBytes.
	Token string `yaml:"token"`
	// DatabaseURL is the connection string of the operator tools, for a
	// login role of its own (a member of DBRole) so the ingress login need
	// not be one. Defaults to "": database_url.
	DatabaseURL string `yaml:"database_url"`
	// DBRole is assumed after connecting. "" keeps the login role. Defaults
	// to "webhook_operator".
	DBRole *string `yaml:"db_role"`
}

// WithDefaults returns a copy with every unset field at its default.
func (s Section) WithDefaults() Section {
	if s.DBRole == nil {
		r := schema.OperatorRole
		s.DBRole = &r
	}
	return s
}

// Validate checks the section (after WithDefaults) and names the bad key.
// That admin.listen is not the webhook listener is checked where both
// sections are known (inletyaml).
func (s Section) Validate() error {
	if err := config.CheckListen("admin.listen", s.Listen, ""); err != nil {
		return err
	}
	if s.Listen != "" && len(s.Token) < MinTokenBytes {
		return fmt.Errorf("admin.token: at least %d bytes required when admin.listen is set", MinTokenBytes)
	}
	return nil
}
