package backfill

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSurvivor288_GHESAbuseDetectionLimitIsWaitedOut: GitHub Enterprise
// Server's secondary rate limit, worded "abuse detection", is waited out as
// GitHub.com's "secondary rate limit" is (githubSecondaryLimit: a 403 with
// requests left and no Retry-After, retried from a minute, never final).
// Mutant (helper-288): backfill/client.go:212, `|| strings.Contains(m,
// "abuse detection")` removed: a GHES backfill stopped at the first such
// 403. Existing tests missed it: TestGitHubSecondaryLimitWaitsFromAMinuteNotTheReset
// and provider_errors_test.go send GitHub.com's wording only (the doc comment
// names GHES's, no test sends it).
func TestSurvivor288_GHESAbuseDetectionLimitIsWaitedOut(t *testing.T) {
	t.Parallel()
	h := http.Header{
		"X-Ratelimit-Remaining": {"4987"},
		"X-Ratelimit-Reset":     {strconv.FormatInt(time.Now().Add(40*time.Minute).Unix(), 10)},
		"X-Github-Request-Id":   {"CAFE:288:1"},
	}
	ds, limited, requests, err := answer(t, http.StatusForbidden, h,
		`{"message":"You have triggered an abuse detection mechanism. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/enterprise-server/rest"}`)
	if requests != 9 || len(ds) != 8 {
		t.Fatalf("%d requests, %d waits (%v); want 9 and 8 (the default retries): GHES's secondary limit was final", requests, len(ds), ds)
	}
	for i, d := range ds {
		if !limited[i] || d < time.Minute || d > 15*time.Minute {
			t.Errorf("wait %d: %s (rate limit %v), want a rate-limit wait between 1m and 15m (all: %v)", i, d, limited[i], ds)
		}
	}
	if !strings.Contains(err.Error(), "abuse detection") {
		t.Errorf("error %q does not quote GHES's message", err)
	}
}

// TestSurvivor288_GoneAndUnprocessableCursorsAreRefusedCursors: a page at a
// saved cursor answered 410 Gone or 422 Unprocessable Entity (final, not
// retried) is ErrCursorRefused, as 400 and 404 are (backfill.go
// ErrCursorRefused: "400, 404, 410, 422"); 401 and 403 are the credential's.
// Mutant (helper-288): backfill/backfill.go:399, `http.StatusGone,
// http.StatusUnprocessableEntity` removed from cursorRefused: the run said
// nothing of the cursor nor how to start over. Existing tests missed it:
// resume_cursor_test.go's fakes refuse a cursor with 400 (Stripe) and 404
// only.
func TestSurvivor288_GoneAndUnprocessableCursorsAreRefusedCursors(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusBadRequest, http.StatusNotFound, http.StatusGone, http.StatusUnprocessableEntity} {
		ds, _, requests, err := answer(t, code, nil, `{"message":"cursor is no longer valid"}`)
		if requests != 1 || len(ds) != 0 {
			t.Errorf("%d: %d requests, waits %v; want one request, final", code, requests, ds)
		}
		if got := statusCode(err); got != code || !cursorRefused(got) {
			t.Errorf("%d: status %d, cursorRefused %v; want the cursor refused", code, got, cursorRefused(got))
		}
	}
	for _, code := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests, http.StatusInternalServerError} {
		if cursorRefused(code) {
			t.Errorf("cursorRefused(%d) = true: a credential, limit or server fault is not the cursor's", code)
		}
	}
}
