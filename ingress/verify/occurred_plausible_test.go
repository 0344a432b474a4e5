//go:build !fuzzonly

package verify

import (
	"net/http"
	"testing"
)

// parseOccurred kept any time in 1970-9999 (a review found it): a Stripe
// "created" of 0 (an unset field) was stored as 1970-01-01 and one of
// 253402300799 as 9999-12-31, and an ordered handler's lane (order_at =
// occurred_at) then sorted that event before, or after, every real one. No
// provider's clock says either: they are NULL now, as a malformed value is.
func TestImplausibleOccurredAtIsNull(t *testing.T) {
	t.Parallel()
	get := NewOccurredAt(Config{Type: "stripe"})
	for _, body := range []string{`{"created":0}`, `{"created":253402300799}`, `{"created":99999999999}`} {
		if got := get(http.Header{}, []byte(body)); !got.IsZero() {
			t.Errorf("%s: occurred_at %v stored, want NULL (no provider's event time)", body, got)
		}
	}
	if got := get(http.Header{}, []byte(`{"created":1733443200}`)); got.IsZero() {
		t.Errorf("a plausible created (2024-12-06) read as NULL")
	}
	shop := NewOccurredAt(Config{Type: "shopify"})
	if got := shop(http.Header{"X-Shopify-Triggered-At": {"9999-12-31T23:59:59Z"}}, nil); !got.IsZero() {
		t.Errorf("X-Shopify-Triggered-At 9999-12-31: occurred_at %v stored, want NULL", got)
	}
}
