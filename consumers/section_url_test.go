package consumers_test

import (
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/httpforward"
)

// consumer.handlers[].url is never quoted in the error that stops the
// service (inlet prints it as its one-line reason, into the service's log):
// it may carry credentials. An upper-case scheme (RFC 3986 §3.1) is
// accepted, as httpforward accepts it. (Found by a review: the URL was
// quoted whole, password included.)
func TestReadyHandlerURLErrorDoesNotQuoteCredentials(t *testing.T) {
	t.Parallel()
	const pass = "s3cr3t-Passw0rd"
	for _, u := range []string{
		"HTTPS://svc:" + pass + "@billing.internal/hooks",
		"htps://svc:" + pass + "@billing.internal/hooks",
		" https://svc:" + pass + "@billing.internal/hooks?token=" + pass,
	} {
		s := consumers.Section{Handlers: []consumers.ReadyHandler{{
			Name: "fwd", Type: "http-forward", URL: u, Secret: "0123456789abcdef",
		}}}.WithDefaults()
		err := s.Validate()
		if err != nil && strings.Contains(err.Error(), pass) {
			t.Errorf("url %q: the error carries the URL's credentials: %v", u, err)
		}
	}
	// The first one is a URL the forwarder itself takes.
	if _, err := httpforward.New(httpforward.Config{URL: "HTTPS://svc:" + pass + "@billing.internal/hooks", Secret: "0123456789abcdef"}); err != nil {
		t.Errorf("httpforward.New: %v", err)
	}
}
