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
}

// get returns the body and headers of a 2xx answer to GET url.
func (c *client) get(ctx context.Context, url string) ([]byte, http.Header, error) {
	for attempt := 0; ; attempt++ {
		body, header, wait, rateLimited, err := c.try(ctx, url)
		if err == nil {
			return body, header, nil
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if wait < 0 || attempt >= c.maxRetries {
			return nil, nil, err
		}
		if !rateLimited {
			wait = c.backoffFor(attempt)
		}
		if c.onWait != nil {
			c.onWait(rateLimited, wait, err)
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, nil, err
		}
	}
}

// try makes one request. wait < 0 means the error is final; rateLimited
// means wait is what the provider asked for.
func (c *client) try(ctx context.Context, url string) (body []byte, header http.Header, wait time.Duration, rateLimited bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, -1, false, err
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
		return nil, nil, 0, false, fmt.Errorf("GET %s: %w", req.URL.Path, err) // network: retry
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, nil, 0, false, fmt.Errorf("GET %s: read response: %w", req.URL.Path, err)
	}
	if resp.StatusCode/100 == 2 {
		return body, resp.Header, 0, false, nil
	}
	err = fmt.Errorf("GET %s: %w: %s", req.URL.Path, ErrStatus, resp.Status)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests,
		// GitHub's primary rate limit (no requests left), and its
		// secondary one (too many at once), a 403 with Retry-After while
		// requests are left.
		resp.StatusCode == http.StatusForbidden && (resp.Header.Get("X-RateLimit-Remaining") == "0" || resp.Header.Get("Retry-After") != ""):
		return nil, nil, c.rateLimitWait(resp.Header, time.Now()), true, err
	case resp.StatusCode >= 500:
		return nil, nil, 0, false, err
	}
	return nil, nil, -1, false, err
}

// rateLimitWait is how long the provider asks us to wait: Retry-After
// (seconds or an HTTP date), else GitHub's X-RateLimit-Reset (Unix seconds);
// at least a second, at most maxWait.
func (c *client) rateLimitWait(h http.Header, now time.Time) time.Duration {
	d := time.Second
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.Atoi(v); err == nil {
			d = time.Duration(s) * time.Second
		} else if t, err := http.ParseTime(v); err == nil {
			d = t.Sub(now)
		}
	} else if v := h.Get("X-RateLimit-Reset"); v != "" {
		if s, err := strconv.ParseInt(v, 10, 64); err == nil {
			d = time.Unix(s, 0).Sub(now) + time.Second // the reset second itself may still be limited
		}
	}
	return min(max(d, time.Second), c.maxWait)
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
