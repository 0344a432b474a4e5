package backfill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	neturl "net/url"
	"strconv"
	"time"
)

// ErrStatus is wrapped by the error of a request the provider refused for
// good (a 4xx other than a rate limit, or 5xx after every retry).
var ErrStatus = errors.New("provider answered with an error status")

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
	err = fmt.Errorf("GET %s: %w: %s", req.URL.Path, ErrStatus, resp.Status)
	now := time.Now()
	switch {
	case resp.StatusCode == http.StatusTooManyRequests,
		// GitHub's primary rate limit (no requests left), and its
		// secondary one (too many at once), a 403 with Retry-After while
		// requests are left.
		resp.StatusCode == http.StatusForbidden && (resp.Header.Get("X-RateLimit-Remaining") == "0" || resp.Header.Get("Retry-After") != ""):
		r = retry{rateLimited: true}
		if _, ok := askedWait(resp.Header, now); ok {
			r.asked = c.rateLimitWait(resp.Header, now)
		} else if resp.Header.Get("X-GitHub-Request-Id") != "" { // every answer of GitHub's API carries it
			r.atLeast = githubMinWait
		}
		return nil, nil, r, err
	case resp.StatusCode >= 500:
		// A 503 may say when to come back (maintenance, overload); a
		// sooner retry would only be refused again.
		if resp.Header.Get("Retry-After") != "" {
			if _, ok := askedWait(resp.Header, now); ok {
				r.asked = c.rateLimitWait(resp.Header, now)
			}
		}
		return nil, nil, r, err
	}
	return nil, nil, retry{final: true}, err
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
