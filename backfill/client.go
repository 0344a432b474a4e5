package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/inlet-dev/inlet/internal/logvalue"
)

// ErrStatus is wrapped by the error of a request the provider refused for
// good (a 4xx other than a rate limit, or 5xx after every retry).
var ErrStatus = errors.New("provider answered with an error status")

// statusError is a provider's answer with an error status: the path asked
// (never the query, which may hold a cursor or filters), the status, and
// for a 4xx what the provider said of it (detail), so that a refused key or
// token names the permission it lacks. It wraps ErrStatus.
type statusError struct {
	path   string
	status string // "403 Forbidden"
	code   int
	// detail is the provider's own message and, from GitHub, the
	// permissions and scopes its headers name: one line, bounded, without
	// control characters or the credential (providerText); "" when it said
	// none. Never the rest of the body.
	detail string
}

func (e *statusError) Error() string {
	s := "GET " + e.path + ": " + ErrStatus.Error() + ": " + e.status
	if e.detail != "" {
		s += ": " + e.detail
	}
	return s
}

func (e *statusError) Unwrap() error { return ErrStatus }

// statusCode is the HTTP status of the provider's answer err reports, 0 when
// err is not one.
func statusCode(err error) int {
	var se *statusError
	if errors.As(err, &se) {
		return se.code
	}
	return 0
}

// maxProviderText bounds one provider message or header value quoted in an
// error: enough for Stripe's permission sentence, not for a body.
const maxProviderText = 300

// maxErrorBody bounds the error body read for its message; a provider's
// error object is a few hundred bytes.
const maxErrorBody = 64 << 10

// maxResponseBytes bounds one API response; a page of 100 events is far less.
const maxResponseBytes = 64 << 20

// client GETs provider API pages, waiting out rate limits and retrying
// server errors and network failures with exponential backoff.
type client struct {
	http       *http.Client
	auth       func(*http.Request) // sets the credentials; they are never logged
	maxRetries int
	backoff    time.Duration
	maxBackoff time.Duration
	maxWait    time.Duration
	onWait     func(rateLimited bool, d time.Duration, cause error) // before each wait: why and how long
	// sleep waits d or until ctx is done; nil: a timer. Tests set it to
	// see the waits without spending them.
	sleep func(ctx context.Context, d time.Duration) error
}

// retry is what try says of a failed request.
type retry struct {
	final       bool          // no retry: the error is the answer
	rateLimited bool          // a rate limit (counted apart from other retries)
	asked       time.Duration // the wait the provider asked for (Retry-After, X-RateLimit-Reset), capped; 0: none
	atLeast     time.Duration // the least wait when it asked none (GitHub's minute)
}

// githubMinWait is GitHub's least wait after a rate limit whose answer
// names no time: "Otherwise, wait for at least one minute before retrying"
// (docs.github.com, "Best practices for using the REST API").
const githubMinWait = time.Minute

// get returns the body and headers of a 2xx answer to GET url.
func (c *client) get(ctx context.Context, url string) ([]byte, http.Header, error) {
	for attempt := 0; ; attempt++ {
		body, header, r, err := c.try(ctx, url)
		if err == nil {
			return body, header, nil
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if r.final || attempt >= c.maxRetries {
			return nil, nil, err
		}
		wait := r.asked
		switch {
		case wait > 0:
		case r.rateLimited:
			// No time named (Stripe names none): back off, as from a 5xx
			// but up to the rate-limit cap, so that the retries outlast a
			// limit that lifts after seconds or minutes (a fixed second
			// spent all eight in eight seconds).
			wait = c.rateLimitBackoff(attempt, r.atLeast)
		default:
			wait = c.backoffFor(attempt)
		}
		if c.onWait != nil {
			c.onWait(r.rateLimited, wait, err)
		}
		sleepFn := c.sleep
		if sleepFn == nil {
			sleepFn = sleep
		}
		if err := sleepFn(ctx, wait); err != nil {
			return nil, nil, err
		}
	}
}

// try makes one request and, when it fails, says whether and how to retry.
func (c *client) try(ctx context.Context, url string) (body []byte, header http.Header, r retry, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, retry{final: true}, err
	}
	c.auth(req)
	resp, err := c.http.Do(req)
	if err != nil {
		// The *url.Error repeats the method and the whole URL (its query
		// too); the path is enough beside the cause (dial tcp …: connection
		// refused).
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, nil, retry{}, fmt.Errorf("GET %s: %w", req.URL.Path, err) // network: retry
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, nil, retry{}, fmt.Errorf("GET %s: read response: %w", req.URL.Path, err)
	}
	if resp.StatusCode/100 == 2 {
		return body, resp.Header, retry{}, nil
	}
	// The status as Go names the code, not the server's own reason phrase,
	// which a provider or a proxy before it chooses: unbounded, and it may
	// carry control characters or the credential (review helper-290).
	se := &statusError{path: req.URL.Path, status: strings.TrimSpace(strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode)), code: resp.StatusCode}
	var message string
	if resp.StatusCode/100 == 4 {
		message = providerMessage(body)
		se.detail = refusalDetail(message, resp.Header, bearer(req))
	}
	now := time.Now()
	h := resp.Header
	if rem := h.Get("X-RateLimit-Remaining"); rem != "" && rem != "0" {
		// Requests left: X-RateLimit-Reset is when the primary limit
		// resets, not when this one lifts (GitHub: "If the
		// x-ratelimit-remaining header is 0, … wait until … the
		// x-ratelimit-reset header. Otherwise, wait for at least one
		// minute").
		h = h.Clone()
		h.Del("X-RateLimit-Reset")
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests,
		// GitHub's primary rate limit (no requests left), and its
		// secondary one (too many at once, requests left), a 403 with
		// Retry-After or, without one, a message saying so. Any other 403
		// (a permission the token lacks) stays final.
		resp.StatusCode == http.StatusForbidden && (h.Get("X-RateLimit-Remaining") == "0" || h.Get("Retry-After") != "" || githubSecondaryLimit(message)):
		r = retry{rateLimited: true}
		if _, ok := askedWait(h, now); ok {
			r.asked = c.rateLimitWait(h, now)
		} else if h.Get("X-GitHub-Request-Id") != "" || githubSecondaryLimit(message) { // every answer of GitHub's API carries the id
			r.atLeast = githubMinWait
		}
		return nil, nil, r, se
	case resp.StatusCode >= 500:
		// A 503 may say when to come back (maintenance, overload); a
		// sooner retry would only be refused again.
		if h.Get("Retry-After") != "" {
			if _, ok := askedWait(h, now); ok {
				r.asked = c.rateLimitWait(h, now)
			}
		}
		return nil, nil, r, se
	}
	return nil, nil, retry{final: true}, se
}

// githubSecondaryLimit reports whether a 403's message is GitHub's
// secondary rate limit ("You have exceeded a secondary rate limit"; "…
// triggered an abuse detection mechanism" on older GitHub Enterprise
// Servers).
func githubSecondaryLimit(message string) bool {
	m := strings.ToLower(message)
	return strings.Contains(m, "secondary rate limit") || strings.Contains(m, "abuse detection")
}

// providerMessage is the message of a provider's JSON error body: Stripe's
// error.message, GitHub's message; "" when it has none. Nothing else of the
// body is kept.
func providerMessage(body []byte) string {
	if len(body) > maxErrorBody {
		return ""
	}
	var v struct {
		Message string `json:"message"` // GitHub
		Error   struct {
			Message string `json:"message"` // Stripe
		} `json:"error"`
	}
	// A field of another type ("error": "…") fails the decode but leaves
	// the fields read before and after it.
	_ = json.Unmarshal(body, &v)
	if v.Error.Message != "" {
		return v.Error.Message
	}
	return v.Message
}

// refusalDetail is what a 4xx answer says of the refusal: the provider's
// message, and GitHub's headers naming the fine-grained permissions and the
// OAuth scopes the endpoint accepts and the scopes the token has. Each is
// made one bounded line without secret (providerText).
func refusalDetail(message string, h http.Header, secret string) string {
	var parts []string
	if m := providerText(message, secret); m != "" {
		parts = append(parts, "the provider says "+strconv.Quote(m))
	}
	for _, hd := range []struct{ name, says string }{
		{"X-Accepted-GitHub-Permissions", "GitHub accepts the permissions"},
		{"X-Accepted-OAuth-Scopes", "GitHub accepts the OAuth scopes"},
		{"X-OAuth-Scopes", "the token has the scopes"},
	} {
		if _, ok := h[http.CanonicalHeaderKey(hd.name)]; !ok {
			continue
		}
		v := providerText(h.Get(hd.name), secret)
		if v == "" {
			v = "(none)"
		}
		parts = append(parts, hd.says+" "+strconv.Quote(v))
	}
	return strings.Join(parts, "; ")
}

// providerText is s, a provider's text, fit to quote in an error: the
// credential secret (when s holds it) replaced, control and format
// characters dropped, runs of spaces made one, cut to maxProviderText bytes.
func providerText(s, secret string) string {
	s = strings.ToValidUTF8(s, "")
	s = strings.Map(func(r rune) rune {
		switch {
		case unicode.IsControl(r) || unicode.IsSpace(r):
			return ' '
		case unicode.Is(unicode.Cf, r): // bidi overrides, zero-width characters
			return -1
		}
		return r
	}, s)
	// The credential is replaced after the characters are dropped: a
	// zero-width character inside it hid it from the replacement, and
	// dropping the character then put it back together (review helper-290).
	if len(secret) >= 8 {
		s = strings.ReplaceAll(s, secret, "[credential]")
	}
	s = strings.Join(strings.Fields(s), " ")
	s, _ = logvalue.Clip(s, maxProviderText)
	return s
}

// bearer is the credential req carries (Authorization: Bearer …), "" for
// none; only to keep it out of the errors.
func bearer(req *http.Request) string {
	a := req.Header.Get("Authorization")
	if v, ok := strings.CutPrefix(a, "Bearer "); ok {
		return v
	}
	return a
}

// askedWait is the wait h asks for: Retry-After (seconds or an HTTP date),
// else GitHub's X-RateLimit-Reset (Unix seconds); ok is false when it asks
// none that can be read.
func askedWait(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.Atoi(v); err == nil {
			return time.Duration(s) * time.Second, true
		}
		if t, err := http.ParseTime(v); err == nil {
			return t.Sub(now), true
		}
		return 0, false
	}
	if v := h.Get("X-RateLimit-Reset"); v != "" {
		if s, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Unix(s, 0).Sub(now) + time.Second, true // the reset second itself may still be limited
		}
	}
	return 0, false
}

// rateLimitWait is how long the provider asks us to wait (askedWait): at
// least a second, at most maxWait; a second when it asks nothing.
func (c *client) rateLimitWait(h http.Header, now time.Time) time.Duration {
	d, _ := askedWait(h, now)
	return min(max(d, time.Second), c.maxWait)
}

// rateLimitBackoff is the wait before retry attempt+1 after a rate limit
// that named no time: backoff doubling with each attempt, jittered (several
// clients limited together do not come back together), at least atLeast, at
// most maxWait (as an asked wait is).
func (c *client) rateLimitBackoff(attempt int, atLeast time.Duration) time.Duration {
	d := max(c.backoff, atLeast) << min(attempt, 20)
	if d <= 0 || d > c.maxWait {
		d = c.maxWait
	}
	d = d/2 + rand.N(d/2+1) //nolint:gosec // G404: backoff jitter, not a secret
	return min(max(d, atLeast), c.maxWait)
}

// backoffFor is the full-jitter exponential backoff before retry attempt+1.
func (c *client) backoffFor(attempt int) time.Duration {
	d := c.backoff << min(attempt, 20)
	if d <= 0 || d > c.maxBackoff {
		d = c.maxBackoff
	}
	return d/2 + rand.N(d/2+1) //nolint:gosec // G404: backoff jitter, not a secret
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
