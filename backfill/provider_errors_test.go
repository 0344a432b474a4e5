package backfill_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/ingress"
)

// TestGitHubSecondaryLimitWithoutRetryAfterIsWaitedOut (review helper-282, fixed).
// Defect: GitHub answers a client over a secondary rate limit with 403 (or
// 429) and a message saying so; Retry-After is optional, and with quota
// left (X-RateLimit-Remaining > 0) GitHub's documented rule is "Otherwise,
// wait for at least one minute before retrying" (docs.github.com,
// "Troubleshooting the REST API" / "Rate limits for the REST API"; the
// comment on githubMinWait cites the same sentence). backfill/client.go
// client.try counts a 403 a rate limit only with X-RateLimit-Remaining: 0 or
// Retry-After, so this 403 is final: `inlet backfill github` (and inlet
// reconcile github, same client) stops after one request. A backfill makes
// one request per delivery, back to back, which is what the 900
// points/minute secondary limit is for.
// Setup: a fake GitHub hook-deliveries API (3 deliveries) whose first answer
// is 403 {"message":"You have exceeded a secondary rate limit..."} with
// X-RateLimit-Remaining: 4987, X-GitHub-Request-Id and no Retry-After.
// Expected: the 403 is waited out as a rate limit (≥ 1 min, here capped by
// MaxRateLimitWait to 20 ms) and the 3 deliveries are stored.
// Observed: "backfill github: page 1: GET /repos/acme/widgets/hooks/42/
// deliveries: provider answered with an error status: 403 Forbidden", 0
// stored, 0 rate-limit waits, 1 request.
// Fixed: client.try reads the 403's message and treats one saying
// "secondary rate limit" (or GHES's "abuse detection") as rateLimited with
// atLeast = githubMinWait, as a 429 already is; with requests left it no
// longer waits for X-RateLimit-Reset (the primary limit's). Any other 403
// stays final.
func TestGitHubSecondaryLimitWithoutRetryAfterIsWaitedOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fake := &fakeGitHub{t: t, pageSize: 2}
	for i := 3; i >= 1; i-- {
		fake.deliveries = append(fake.deliveries, ghDelivery{id: int64(1000 + i), guid: fmt.Sprintf("guid-%d", i),
			event: "push", payload: fmt.Sprintf(`{"n":%d}`, i)})
	}
	var limited atomic.Bool
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if limited.CompareAndSwap(false, true) {
			w.Header().Set("X-RateLimit-Limit", "5000")
			w.Header().Set("X-RateLimit-Remaining", "4987")
			w.Header().Set("X-RateLimit-Reset", fmt.Sprint(time.Now().Add(40*time.Minute).Unix()))
			w.Header().Set("X-GitHub-Request-Id", "CAFE:1234:5678:9ABC:DEF0")
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID CAFE:1234:5678:9ABC:DEF0.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits","status":"403"}`))
			return
		}
		fake.ServeHTTP(w, r)
	}))
	defer srv.Close()
	l, err := backfill.NewGitHub(backfill.GitHubConfig{Token: "ghp_backfill", BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config("github", "github")
	cfg.MaxRateLimitWait = 20 * time.Millisecond // GitHub's minute, shortened for the test
	stats, err := backfill.Run(context.Background(), cfg, l)
	if err != nil {
		t.Fatalf("backfill stopped on GitHub's secondary rate limit (403, quota left, no Retry-After) instead of waiting at least a minute: %v (stats %+v, %d requests)", err, stats, requests.Load())
	}
	if stats.RateLimitWaits != 1 || stats.Stored != 3 {
		t.Errorf("stats = %+v, want 1 rate-limit wait and 3 stored", stats)
	}
}

// TestRefusedCredentialErrorNamesWhatIsMissing (review helper-282, fixed).
// Defect: a key or token the provider refuses for want of a permission
// gives an error naming only the status ("provider answered with an error
// status: 403 Forbidden"); what the provider says is missing is thrown
// away: backfill/client.go client.try reads the body and the headers and
// keeps neither for a final 4xx. Stripe's answer to a restricted key without
// event read names the permission ('rak_event_read') in error.message;
// GitHub names the fine-grained permission in X-Accepted-GitHub-Permissions
// and the classic scopes in X-Accepted-OAuth-Scopes (beside X-OAuth-Scopes,
// what the token has), and answers a classic token without admin:repo_hook a
// bare 404 (as if the hook did not exist). The operator, mid-outage, gets
// "403 Forbidden" / "404 Not Found" and has to reproduce the request by hand
// with the secret to learn which scope to add.
// Setup: real HTTP servers answering as Stripe and GitHub do for a key or
// token lacking the permission; backfill.Run against each.
// Expected: the error names what is missing (rak_event_read;
// repository_hooks=read; admin:repo_hook) and never the key or token.
// Observed: "backfill stripe: page 1: GET /v1/events: provider answered
// with an error status: 403 Forbidden"; "backfill github: page 1: GET
// /repos/acme/widgets/hooks/42/deliveries: provider answered with an error
// status: 403 Forbidden" and "... 404 Not Found": none names the permission.
// Fixed: client.try's error of a 4xx (statusError) quotes the provider's
// own message (Stripe error.message, GitHub message: one line, control
// characters dropped, at most 300 bytes, the credential replaced) and
// GitHub's X-Accepted-GitHub-Permissions / X-Accepted-OAuth-Scopes /
// X-OAuth-Scopes; GitHub.list adds to a 404 that a token without
// admin:repo_hook (or the Webhooks permission) gets 404.
func TestRefusedCredentialErrorNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const stripeKey, ghToken = "rk_test_51ReviewSecretKey282abcdef", "github_pat_11REVIEW282secrettoken"

	t.Run("stripe restricted key without event read", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Request-Id", "req_review282")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{
  "error": {
    "message": "The provided key 'rk_test_*********************cdef' does not have the required permissions for this endpoint on account 'acct_1Review282'. Having the 'rak_event_read' permission would allow this request to continue.",
    "type": "invalid_request_error"
  }
}`))
		}))
		defer srv.Close()
		l, err := backfill.NewStripe(backfill.StripeConfig{APIKey: stripeKey, BaseURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		_, err = backfill.Run(context.Background(), b.config("stripe", "stripe"), l)
		checkRefusal(t, err, stripeKey, "rak_event_read")
	})

	t.Run("github fine-grained token without the Webhooks permission", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.Header().Set("X-GitHub-Request-Id", "CAFE:282:1")
			w.Header().Set("X-RateLimit-Remaining", "4999")
			w.Header().Set("X-Accepted-GitHub-Permissions", "repository_hooks=read")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"message":"Resource not accessible by personal access token","documentation_url":"https://docs.github.com/rest/repos/webhooks#list-deliveries-for-a-repository-webhook","status":"403"}`))
		}))
		defer srv.Close()
		l, err := backfill.NewGitHub(backfill.GitHubConfig{Token: ghToken, BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42})
		if err != nil {
			t.Fatal(err)
		}
		_, err = backfill.Run(context.Background(), b.config("github", "github"), l)
		checkRefusal(t, err, ghToken, "repository_hooks")
	})

	t.Run("github classic token without admin:repo_hook", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.Header().Set("X-GitHub-Request-Id", "CAFE:282:2")
			w.Header().Set("X-RateLimit-Remaining", "4998")
			w.Header().Set("X-OAuth-Scopes", "repo:status, read:org")
			w.Header().Set("X-Accepted-OAuth-Scopes", "admin:repo_hook, read:repo_hook, repo")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"message":"Not Found","documentation_url":"https://docs.github.com/rest/repos/webhooks#list-deliveries-for-a-repository-webhook","status":"404"}`))
		}))
		defer srv.Close()
		l, err := backfill.NewGitHub(backfill.GitHubConfig{Token: "ghp_REVIEW282classictokensecret", BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42})
		if err != nil {
			t.Fatal(err)
		}
		_, err = backfill.Run(context.Background(), b.config("github", "github"), l)
		checkRefusal(t, err, "ghp_REVIEW282classictokensecret", "repo_hook")
	})
}

// checkRefusal fails unless err is the provider's refusal, names missing and
// does not show secret.
func checkRefusal(t *testing.T, err error, secret, missing string) {
	t.Helper()
	if err == nil {
		t.Fatal("a refused credential was accepted")
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("the error shows the credential: %v", err)
	}
	if !strings.Contains(err.Error(), missing) {
		t.Errorf("the error does not name what the credential lacks (%q), which the provider's answer names:\n%v", missing, err)
	}
}

// TestGitHubPageStoresEachPayloadAsFetched (review helper-282, fixed).
// Defect: inlet backfill github reads a whole page of deliveries (100, the
// per_page it asks) and fetches every delivery's payload before it stores
// the first: backfill/github.go GitHub.page loads each item into p.Events,
// and backfill/backfill.go Run stores them only once page returns. GitHub
// sends payloads of up to 25 MB, so one page can hold 100 x 25 MB = 2.5 GB
// in memory ("huge listings": memory is bounded by the page's payloads, not
// by one), and an error on the 100th fetch (a delivery that aged out, a
// final 4xx) throws away the 99 fetched before it (each one of the token's
// 5,000 requests an hour) since the page's cursor is not saved.
// Setup: a fake hook-deliveries API serving one page of 100 deliveries of
// 64 KiB each; a Store wrapping the real ingress.PGStore counts inserts; the
// server records, at each delivery fetch, how many fetched payloads were not
// yet stored.
// Expected: payloads are stored as they are fetched; at most a handful (10
// here, allowing read-ahead) are held at once.
// Observed: at the 100th fetch, 100 payloads (6.4 MB here; 2.5 GB with
// GitHub's largest) were held and none stored.
// Fixed: Run takes the page from l.list and loads each item (it.load)
// just before its Insert, so one payload is held at a time (GitHub.page,
// which loaded them all, is gone); the cursor is still saved after the
// page.
func TestGitHubPageStoresEachPayloadAsFetched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n, size = 100, 64 << 10
	fake := &fakeGitHub{t: t, pageSize: n}
	filler := strings.Repeat("x", size)
	for i := n; i >= 1; i-- {
		fake.deliveries = append(fake.deliveries, ghDelivery{id: int64(5000 + i), guid: fmt.Sprintf("guid-big-%d", i),
			event: "push", payload: fmt.Sprintf(`{"n":%d,"fill":%q}`, i, filler)})
	}
	counter := &countingStore{Store: b.store}
	var mu sync.Mutex
	var fetched, maxHeld int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, ghPath+"/") { // one delivery's payload
			mu.Lock()
			fetched++
			maxHeld = max(maxHeld, fetched-int(counter.inserts.Load())-1) // held before this one
			mu.Unlock()
		}
		fake.ServeHTTP(w, r)
	}))
	defer srv.Close()
	l, err := backfill.NewGitHub(backfill.GitHubConfig{Token: "ghp_backfill", BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config("github", "github")
	cfg.Store = counter
	stats, err := backfill.Run(context.Background(), cfg, l)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Stored != n {
		t.Fatalf("stats = %+v, want %d stored", stats, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if maxHeld > 10 {
		t.Errorf("%d fetched payloads (%d KiB each, %.1f MB) were held in memory before the first was stored; GitHub payloads reach 25 MB, so a page of %d can hold %.1f GB",
			maxHeld, size>>10, float64(maxHeld*size)/1e6, n, float64(n)*25e6/1e9)
	}
}

// countingStore counts the inserts of the real store it wraps.
type countingStore struct {
	ingress.Store
	inserts atomic.Int64
}

func (c *countingStore) Insert(ctx context.Context, e *ingress.Event) (bool, error) {
	stored, err := c.Store.Insert(ctx, e)
	c.inserts.Add(1)
	return stored, err
}
