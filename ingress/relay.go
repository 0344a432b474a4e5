package ingress

import (
	"errors"
	"net/http"
	"time"

	"github.com/inlet-dev/inlet/ingress/verify"
)

// relayReasons are the rejections of a source that takes webhooks only
// through inlet relay (relay_secrets set).
var relayReasons = []string{"relay_signature_missing", "relay_signature_mismatch",
	"relay_timestamp_outside_tolerance", "relay_headers_mismatch"}

// defaultRelayTolerance is the relay signature's window when the source sets
// none.
const defaultRelayTolerance = 5 * time.Minute

// relayCheck verifies the Inlet-Relay-Signature of a source's requests.
type relayCheck struct {
	secrets   []string
	tolerance time.Duration
}

func newRelayCheck(secrets []string, tolerance time.Duration) *relayCheck {
	if len(secrets) == 0 {
		return nil
	}
	if tolerance <= 0 {
		tolerance = defaultRelayTolerance
	}
	return &relayCheck{secrets: secrets, tolerance: tolerance}
}

// check verifies r's relay signature over body and returns the headers the
// relay signed (those Inlet-Relay-Headers lists), without Inlet-Relay-*:
// those are what the provider verifier sees and what is stored, so a relayed
// event's row is the same as a direct one's and re-verification
// (verify.Reverify) checks the provider's signature alone. A header added
// after the relay is dropped: the relay's signature does not cover it, and
// for providers whose event id or type headers are not signed (Shopify,
// GitLab) it would let whoever sits between relay and ingress choose them.
// The relay's signature is transport authentication with a short window;
// kept, it could never be checked again.
func (rc *relayCheck) check(source string, r *http.Request, body []byte, now time.Time) (http.Header, error) {
	if _, err := verify.VerifyRelay(rc.secrets, rc.tolerance, source, r.URL.RequestURI(), r.Header, body, now); err != nil {
		return nil, err
	}
	return verify.RelayListedHeaders(r.Header), nil
}

func relayReason(err error) string {
	switch {
	case errors.Is(err, verify.ErrRelaySignatureMissing):
		return "relay_signature_missing"
	case errors.Is(err, verify.ErrRelayTimestampOutsideTolerance):
		return "relay_timestamp_outside_tolerance"
	case errors.Is(err, verify.ErrRelayHeadersMismatch):
		return "relay_headers_mismatch"
	default:
		return "relay_signature_mismatch"
	}
}
