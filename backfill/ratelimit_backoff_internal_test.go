package backfill

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// waits runs c.get against a real HTTP server that answers every request
// with status and header, with the client's default retries, and returns
// the waits it would have made (c.sleep records them instead of spending
// them), whether each was counted a rate limit, and how many requests the
// server saw.
func waits(t *testing.T, status int, header http.Header) (ds []time.Duration, limited []bool, requests int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	d := Config{}.WithDefaults()
	c := &client{http: srv.Client(), auth: func(*http.Request) {}, maxRetries: d.MaxRetries, backoff: d.Backoff,
		maxBackoff: d.MaxBackoff, maxWait: d.MaxRateLimitWait,
		onWait: func(rateLimited bool, d time.Duration, _ error) {
			ds = append(ds, d)
			limited = append(limited, rateLimited)
		},
		sleep: func(context.Context, time.Duration) error { return nil }}
	if _, _, err := c.get(context.Background(), srv.URL+"/v1/events"); err == nil {
		t.Fatal("an API that always refuses was read")
	}
	return ds, limited, n.Load()
}

func sum(ds []time.Duration) time.Duration {
	var total time.Duration
	for _, d := range ds {
		total += d
	}
	return total
}

// A 429 that names no time (Stripe's usually name none) was waited out a
// fixed second each time before the fix (rateLimitWait's "nothing said":
// 1s), so the default eight retries were spent in eight seconds and a
// backfill or reconcile stopped on a limit that lifts in a minute. Now the
// waits back off from Backoff (1s) doubling, jittered, up to
// MaxRateLimitWait: the retries span minutes. Failed before the fix (eight
// waits of 1s, 8s in all).
func TestRateLimitWithoutRetryAfterBacksOff(t *testing.T) {
	t.Parallel()
	ds, limited, requests := waits(t, http.StatusTooManyRequests, nil)
	if requests != 9 || len(ds) != 8 {
		t.Fatalf("%d requests, %d waits (%v); want 9 and 8 (the default retries)", requests, len(ds), ds)
	}
	for i, d := range ds {
		if !limited[i] {
			t.Errorf("wait %d (%s) not counted a rate limit", i, d)
		}
		// Doubling from 1s, jittered to [half, whole]: attempt i waits at
		// least 2^i/2 s.
		if least := time.Second << i / 2; d < least || d > 15*time.Minute {
			t.Errorf("wait %d is %s, want between %s and 15m (all: %v)", i, d, least, ds)
		}
	}
	if total := sum(ds); total < 2*time.Minute {
		t.Errorf("the retries of a 429 without Retry-After span %s (%v), want minutes: a limit that lifts in a minute stops the run", total, ds)
	}
}

// GitHub asks a client rate-limited without a time named to wait at least
// a minute, and longer with each retry. Before the fix every wait was 1s.
func TestGitHubRateLimitWithoutTimeWaitsAMinute(t *testing.T) {
	t.Parallel()
	ds, _, _ := waits(t, http.StatusTooManyRequests, http.Header{"X-Github-Request-Id": {"CAFE:1234:5678"}})
	if len(ds) != 8 {
		t.Fatalf("%d waits, want 8", len(ds))
	}
	for i, d := range ds {
		if d < time.Minute || d > 15*time.Minute {
			t.Errorf("wait %d is %s, want between 1m and 15m (all: %v)", i, d, ds)
		}
	}
	if ds[len(ds)-1] <= ds[0] {
		t.Errorf("the waits do not grow: %v", ds)
	}
}

// A 503 with Retry-After is retried when the server said, capped as a rate
// limit's wait is (MaxRateLimitWait, 15m), and counted a retry, not a rate
// limit. Before the fix its Retry-After was ignored: the first retry came
// after the 5xx backoff, under a second.
func TestServiceUnavailableRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		retryAfter string
		want       time.Duration
	}{{"120", 2 * time.Minute}, {"86400", 15 * time.Minute}} {
		ds, limited, _ := waits(t, http.StatusServiceUnavailable, http.Header{"Retry-After": {tc.retryAfter}})
		if len(ds) != 8 {
			t.Fatalf("Retry-After %s: %d waits, want 8", tc.retryAfter, len(ds))
		}
		for i, d := range ds {
			if d != tc.want || limited[i] {
				t.Errorf("Retry-After %s: wait %d is %s (rate limit %v), want %s counted a retry", tc.retryAfter, i, d, limited[i], tc.want)
			}
		}
	}
	// Without Retry-After a 5xx backs off as before (capped at MaxBackoff).
	ds, _, _ := waits(t, http.StatusServiceUnavailable, nil)
	if len(ds) != 8 || ds[0] > time.Second || ds[len(ds)-1] > time.Minute {
		t.Errorf("a 503 without Retry-After waited %v, want the 5xx backoff from 1s capped at 1m", ds)
	}
}
