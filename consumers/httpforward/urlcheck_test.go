package httpforward_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/httpforward"
)

// An http-forward URL without a host name, or with a port out of range, is refused.
//
// Regression test (review helper-128; fixed: the text describes the
// behaviour before the fix). the url check of an http-forward handler
// (consumers/section.go:147 `u.Host == ""`, and httpforward's own
// forward.go:65 `u.Host == ""`) tests the authority, not the host name, and
// never the port. So:
//
//   - "http://:8080/hooks" (what `url: http://${BILLING_HOST:-}:8080/hooks`
//     becomes with BILLING_HOST unset; a plain ${VAR} set to "" is refused
//     by the config loader, but a :- default or a typo is not) has
//     Host ":8080" and passes both checks, although the section's own error
//     says the url must have "a host". Go dials ":8080" as the LOCAL system:
//     the consumer silently POSTs every signed event, provider headers and
//     all, to whatever listens on that port on its own machine/pod (proved
//     below: the request arrives at a 127.0.0.1 server).
//   - "http://billing.internal:99999/hooks" passes both checks; every
//     delivery then fails with "invalid port" as class network, is retried
//     for max_attempts (25, about days of backoff) and dead-lettered, instead
//     of `inlet config check` / start-up refusing the typo.
//
// Expected: both validators reject a URL without a host name, and a port
// that is not 1-65535, with a clear error (not quoting the URL).
func TestURLWithoutHostNameOrWithBadPortIsRejected(t *testing.T) {
	t.Parallel()

	// The empty-host URL really reaches a service on this machine.
	local := newService(t, http.StatusOK)
	lu, _ := url.Parse(local.URL)
	emptyHost := "http://:" + lu.Port() + "/hooks"
	if f, err := httpforward.New(httpforward.Config{URL: emptyHost, Secret: secret}); err == nil {
		if err := f(context.Background(), event()); err == nil && len(local.requests()) == 1 {
			t.Logf("%s was accepted and delivered the signed event to a local service on 127.0.0.1:%s", emptyHost, lu.Port())
		}
	}

	for _, u := range []string{emptyHost, "https://:443/hooks", "http://billing.internal:99999/hooks", "http://billing.internal:0/hooks"} {
		if _, err := httpforward.New(httpforward.Config{URL: u, Secret: secret}); err == nil {
			t.Errorf("httpforward.New accepts url %q", u)
		}
		s := consumers.Section{Handlers: []consumers.ReadyHandler{{
			Name: "fwd", Type: "http-forward", URL: u, Secret: secret,
		}}}.WithDefaults()
		if err := s.Validate(); err == nil {
			t.Errorf("consumer.handlers[0].url %q passes Section.Validate (inlet config check)", u)
		}
	}
}
