package backfill_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/inlet-dev/inlet/backfill"
)

// Found by review helper-72: GitHub's secondary rate limit is not waited out.
// GitHub answers a client that trips a secondary rate limit with 403 (or 429)
// and a Retry-After header, while X-RateLimit-Remaining still shows quota
// left (docs.github.com, "Rate limits for the REST API": "If the retry-after
// response header is present, you should not retry your request until after
// that many seconds has elapsed"). client.try treats a 403 as a rate limit
// only when X-RateLimit-Remaining is "0" (backfill/client.go, the
// StatusForbidden case of the switch in try), so this 403 is final: the
// backfill (and a reconcile, which shares the client) stops with
// "provider answered with an error status: 403 Forbidden" after one request,
// although waiting one second would have let it go on.
//
// Expected: a 403 carrying Retry-After is a rate limit like a 429: waited
// out (counted in RateLimitWaits) and retried.
func TestGitHubSecondaryRateLimitIsWaitedOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fake := &fakeGitHub{t: t, pageSize: 2}
	for i := 3; i >= 1; i-- {
		fake.deliveries = append(fake.deliveries, ghDelivery{id: int64(1000 + i), guid: fmt.Sprintf("guid-%d", i),
			event: "push", payload: fmt.Sprintf(`{"n":%d}`, i)})
	}
	var limited atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if limited.CompareAndSwap(false, true) {
			// GitHub's secondary rate limit: quota left, Retry-After set.
			w.Header().Set("Retry-After", "1")
			w.Header().Set("X-RateLimit-Limit", "5000")
			w.Header().Set("X-RateLimit-Remaining", "4987")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits","status":"403"}`))
			return
		}
		fake.ServeHTTP(w, r)
	}))
	defer srv.Close()
	l, err := backfill.NewGitHub(backfill.GitHubConfig{Token: "ghp_backfill", BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42})
	if err != nil {
		t.Fatal(err)
	}
	stats, err := backfill.Run(context.Background(), b.config("github", "github"), l)
	if err != nil {
		t.Fatalf("backfill stopped on GitHub's secondary rate limit (403 with Retry-After: 1) instead of waiting it out: %v (stats %+v)", err, stats)
	}
	if stats.RateLimitWaits != 1 || stats.Stored != 3 {
		t.Errorf("stats = %+v, want 1 rate-limit wait and 3 stored", stats)
	}
}
