// Package sources is the sources: section of inlet.yaml: the webhook
// senders inlet ingress accepts (POST /webhooks/{name}), each with its
// verifier's settings (package verify) and what ingress does with what it
// verified. inlet relay verifies the same entries.
package sources

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/ingress/verify"
)

// Source is one entry of the sources: section, a webhook sender: its name plus the verifier's settings (type, secrets, tolerance
// and the scheme's own fields; see verify.Config for each one and its
// default). inlet relay reads the same entries.
type Source struct {
	// Name is the URL path segment and the events.provider value. Required;
	// lower-case letters, digits, '-' and '_'.
	Name          string `yaml:"name"`
	verify.Config `yaml:",inline"`
	// RelaySecrets, when set, make ingress accept this source only through
	// inlet relay: each request must carry a valid Inlet-Relay-Signature
	// from one of these secrets (the relay's relay.secrets), checked before
	// the provider's signature, which is verified too. Each at least
	// MinRelaySecretBytes. Defaults to none: direct delivery, no relay
	// trusted, and any Inlet-Relay-* headers dropped before verification
	// and storage (anyone can send them).
	RelaySecrets []string `yaml:"relay_secrets"`
	// RelayTolerance is how far the relay signature's timestamp may be from
	// now, in either direction. Defaults to 5m.
	RelayTolerance time.Duration `yaml:"relay_tolerance"`
	// StoreJSON keeps a parsed copy of each body in events.payload (jsonb,
	// GIN-indexed) for auditors' JSON-path queries (inlet events list
	// --where). A body that is not JSON PostgreSQL accepts, or is over
	// StoreJSONMaxBytes, gets NULL there and is still stored and delivered.
	// Costs ingest time and disk (the bench measures it). Defaults to true,
	// except for twilio, whose webhooks are form-encoded.
	StoreJSON *bool `yaml:"store_json"`
	// StoreJSONMaxBytes is the largest body copied to payload. Defaults to
	// 256 KiB (DefaultStoreJSONMaxBytes).
	StoreJSONMaxBytes int `yaml:"store_json_max_bytes"`
}

// DefaultStoreJSONMaxBytes is Source.StoreJSONMaxBytes's default.
const DefaultStoreJSONMaxBytes = 256 << 10

// MinRelaySecretBytes is the shortest relay secret accepted, on either side
// (sources' relay_secrets, the relay's relay.secrets).
const MinRelaySecretBytes = 16

// JSONCopy says whether the source keeps a payload copy and up to what size,
// its defaults applied.
func (s Source) JSONCopy() (keep bool, maxBytes int) {
	keep = s.Type != "twilio"
	if s.StoreJSON != nil {
		keep = *s.StoreJSON
	}
	return keep, cmp.Or(s.StoreJSONMaxBytes, DefaultStoreJSONMaxBytes)
}

var sourceName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Validate checks the sources: section and names the first bad key
// (`sources[1].name: ...`), the scheme-specific checks of the verifier
// (type, secret formats) included.
func Validate(sources []Source) error {
	seen := map[string]int{}
	for i, s := range sources {
		field := fmt.Sprintf("sources[%d]", i)
		if !sourceName.MatchString(s.Name) {
			return fmt.Errorf("%s.name: %q must be 1-63 lower-case letters, digits, '-' or '_'", field, s.Name)
		}
		if j, dup := seen[s.Name]; dup {
			return fmt.Errorf("%s.name: %q is already the name of sources[%d]", field, s.Name, j)
		}
		seen[s.Name] = i
		if s.Type == "" {
			return fmt.Errorf("%s.type: required", field)
		}
		if !slices.Contains(verify.Types(), s.Type) && s.Type != "svix" {
			return fmt.Errorf("%s.type: %q is not one of %s", field, s.Type, strings.Join(verify.Types(), ", "))
		}
		if s.StoreJSONMaxBytes < 0 {
			return fmt.Errorf("%s.store_json_max_bytes: must not be negative, got %d", field, s.StoreJSONMaxBytes)
		}
		if len(s.Secrets) == 0 {
			return fmt.Errorf("%s.secrets: at least one secret is required", field)
		}
		for k, sec := range s.Secrets {
			if strings.TrimSpace(sec) == "" {
				return fmt.Errorf("%s.secrets[%d]: empty", field, k)
			}
		}
		if s.Tolerance < 0 {
			return fmt.Errorf("%s.tolerance: must not be negative", field)
		}
		for k, sec := range s.RelaySecrets {
			if len(strings.TrimSpace(sec)) < MinRelaySecretBytes {
				return fmt.Errorf("%s.relay_secrets[%d]: at least %d bytes required", field, k, MinRelaySecretBytes)
			}
		}
		if s.RelayTolerance < 0 {
			return fmt.Errorf("%s.relay_tolerance: must not be negative", field)
		}
		if s.RelayTolerance > 0 && len(s.RelaySecrets) == 0 {
			return fmt.Errorf("%s.relay_tolerance: only used with relay_secrets", field)
		}
		// The scheme's own checks (its type, secret formats), as ingress and
		// the relay make them when they start, so every command sees them.
		if _, err := verify.New(s.Config); err != nil {
			return fmt.Errorf("%s.%w", field, err)
		}
	}
	return nil
}
