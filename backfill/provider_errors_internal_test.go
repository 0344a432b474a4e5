package backfill

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// answer runs c.get against a real HTTP server that answers every request
// with status, header and body, with the client's default retries, and
// returns the waits it would have made (c.sleep records them), whether
// each was counted a rate limit, how many requests the server saw, and the
// error.
func answer(t *testing.T, status int, header http.Header, body string) (ds []time.Duration, limited []bool, requests int64, err error) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	d := Config{}.WithDefaults()
	c := &client{http: srv.Client(), auth: func(r *http.Request) { r.Header.Set("Authorization", "Bearer ghp_internalSECRETtoken") },
		maxRetries: d.MaxRetries, backoff: d.Backoff, maxBackoff: d.MaxBackoff, maxWait: d.MaxRateLimitWait,
		onWait: func(rateLimited bool, d time.Duration, _ error) {
			ds = append(ds, d)
			limited = append(limited, rateLimited)
		},
		sleep: func(context.Context, time.Duration) error { return nil }}
	_, _, err = c.get(context.Background(), srv.URL+"/repos/acme/widgets/hooks/42/deliveries?cursor=v1_secretcursor")
	if err == nil {
		t.Fatal("an API that always refuses was read")
	}
	return ds, limited, n.Load(), err
}

// GitHub's secondary rate limit with requests left and no Retry-After is
// waited out from a minute, backing off (GitHub: "Otherwise, wait for at
// least one minute"), not until X-RateLimit-Reset (the primary limit's
// reset, 40 minutes away here: the default cap of 15 minutes would have
// been spent on every retry). Before the fix it was final: one request.
func TestGitHubSecondaryLimitWaitsFromAMinuteNotTheReset(t *testing.T) {
	t.Parallel()
	h := http.Header{
		"X-Ratelimit-Remaining": {"4987"},
		"X-Ratelimit-Reset":     {strconv.FormatInt(time.Now().Add(40*time.Minute).Unix(), 10)},
		"X-Github-Request-Id":   {"CAFE:1:2"},
	}
	ds, limited, requests, err := answer(t, http.StatusForbidden, h,
		`{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","status":"403"}`)
	if requests != 9 || len(ds) != 8 {
		t.Fatalf("%d requests, %d waits (%v); want 9 and 8 (the default retries)", requests, len(ds), ds)
	}
	for i, d := range ds {
		if !limited[i] || d < time.Minute || d > 15*time.Minute {
			t.Errorf("wait %d: %s (rate limit %v), want a rate-limit wait between 1m and 15m (all: %v)", i, d, limited[i], ds)
		}
	}
	if ds[0] >= 15*time.Minute {
		t.Errorf("the first wait is %s: the primary limit's reset was waited for, not GitHub's minute", ds[0])
	}
	// The error after the last retry says why.
	if !strings.Contains(err.Error(), "secondary rate limit") {
		t.Errorf("error %q does not quote GitHub's message", err)
	}
}

// A 403 for a permission the token lacks stays final: one request, no
// wait, and the error quotes GitHub's message and the permission it names.
func TestGitHubPermission403StaysFinal(t *testing.T) {
	t.Parallel()
	h := http.Header{"X-Ratelimit-Remaining": {"4999"}, "X-Github-Request-Id": {"CAFE:1:3"},
		"X-Accepted-Github-Permissions": {"repository_hooks=read"}}
	ds, _, requests, err := answer(t, http.StatusForbidden, h, `{"message":"Resource not accessible by personal access token","status":"403"}`)
	if requests != 1 || len(ds) != 0 {
		t.Fatalf("%d requests, waits %v: a refused permission was retried", requests, ds)
	}
	if !errors.Is(err, ErrStatus) || statusCode(err) != http.StatusForbidden {
		t.Errorf("error %v: want ErrStatus with status 403", err)
	}
	want := `GET /repos/acme/widgets/hooks/42/deliveries: provider answered with an error status: 403 Forbidden: ` +
		`the provider says "Resource not accessible by personal access token"; GitHub accepts the permissions "repository_hooks=read"`
	if err.Error() != want {
		t.Errorf("error\n%s\nwant\n%s", err, want)
	}
}

// Of an error body only the message is kept: other fields (an id, a
// customer) and a body that is not JSON (an HTML error page) are not
// quoted; nor is the query of the URL (a cursor).
func TestRefusalKeepsOnlyTheProviderMessage(t *testing.T) {
	t.Parallel()
	_, _, _, stripeErr := answer(t, http.StatusBadRequest, nil,
		`{"error":{"message":"No such event","param":"starting_after","customer":"cus_PRIVATE","type":"invalid_request_error"}}`)
	if !strings.HasSuffix(stripeErr.Error(), `400 Bad Request: the provider says "No such event"`) {
		t.Errorf("error %q, want it to end with the message only", stripeErr)
	}
	_, _, _, htmlErr := answer(t, http.StatusNotFound, nil, "<html><body>Not Found cus_PRIVATE</body></html>")
	if !strings.HasSuffix(htmlErr.Error(), ": 404 Not Found") {
		t.Errorf("error %q quotes a body that is not a provider's error object", htmlErr)
	}
	// A message that quotes the credential has it replaced.
	_, _, _, echoErr := answer(t, http.StatusUnauthorized, nil, `{"message":"Bad credentials: ghp_internalSECRETtoken\n"}`)
	if !strings.HasSuffix(echoErr.Error(), `401 Unauthorized: the provider says "Bad credentials: [credential]"`) {
		t.Errorf("error %q, want the message with the credential replaced", echoErr)
	}
	for _, err := range []error{stripeErr, htmlErr, echoErr} {
		for _, leak := range []string{"cus_PRIVATE", "v1_secretcursor", "ghp_internalSECRETtoken"} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("error %q shows %s", err, leak)
			}
		}
	}
}

// A provider's text quoted in an error is one line of at most
// maxProviderText bytes (and the ellipsis), without control or format
// characters (a terminal escape, a bidi override) and without the
// credential.
func TestProviderTextIsOneBoundedLine(t *testing.T) {
	t.Parallel()
	const secret = "sk_live_51PROVIDERTEXTsecret"
	got := providerText("bad key "+secret+"\r\n\x1b[31mred\x1b[0m\t\u202eevil\u200b "+strings.Repeat("é", 400)+"\xff", secret)
	if strings.Contains(got, secret) || !strings.Contains(got, "bad key [credential] ") {
		t.Errorf("the credential is not replaced: %q", got)
	}
	for _, r := range got {
		if r < 0x20 || r == 0x7f || r == '\u202e' || r == '\u200b' || r == '\ufffd' {
			t.Fatalf("%q holds the character %U", got, r)
		}
	}
	if len(got) > maxProviderText+len("…") {
		t.Errorf("%d bytes, want at most %d", len(got), maxProviderText+len("…"))
	}
	if !strings.HasSuffix(got, "…") {
		t.Errorf("a long text is not marked cut: %q", got)
	}
	if got := providerText("  one\n\n  two  ", ""); got != "one two" {
		t.Errorf("providerText = %q, want %q", got, "one two")
	}
}

// A Stripe backfill's state key names the key's mode, read from its prefix
// only: a cursor (an event id of one mode) is never resumed with a key of
// the other mode, while a secret and a restricted key of one mode, or a
// rotated key, share it; the key itself is never in it.
func TestStripeStateKeyNamesTheKeyMode(t *testing.T) {
	t.Parallel()
	key := func(apiKey string) string {
		t.Helper()
		s, err := NewStripe(StripeConfig{APIKey: apiKey})
		if err != nil {
			t.Fatal(err)
		}
		k := s.key()
		if rest := strings.TrimLeft(apiKey[min(len(apiKey), 8):], "_"); rest != "" && strings.Contains(k, rest) {
			t.Errorf("state key %q holds the API key", k)
		}
		return k
	}
	testKey, liveKey := key("sk_test_51AAAAsecret"), key("sk_live_51BBBBsecret")
	if testKey == liveKey {
		t.Errorf("test and live keys share the state key %q", testKey)
	}
	if !strings.Contains(testKey, "mode=test") || !strings.Contains(liveKey, "mode=live") {
		t.Errorf("state keys %q, %q do not name the mode", testKey, liveKey)
	}
	if k := key("rk_test_51CCCCsecret"); k != testKey {
		t.Errorf("a restricted test key's state key %q differs from a secret test key's %q", k, testKey)
	}
	if k := key("rk_live_51DDDDsecret"); k != liveKey {
		t.Errorf("a restricted live key's state key %q differs from a secret live key's %q", k, liveKey)
	}
	if k := key("whatever_proxykey"); strings.Contains(k, "mode=") {
		t.Errorf("a key of no known form got a mode: %q", k)
	}
}
