package admin_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

// clock is a settable clock for limiters.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func from(addr string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = addr
	return r
}
func attempt(l *admin.AuthLimiter, addr string, wrong bool) bool {
	end, _, ok := l.Begin(from(addr))
	if ok {
		end(wrong)
	}
	return ok
}

func TestAuthLimiterCountsWrongTokensPerAddress(t *testing.T) {
	t.Parallel()
	c := newClock()
	l := admin.NewAuthLimiter(admin.AuthLimit{Failures: 3, Every: 10 * time.Second, Now: c.now})
	const a, b = "203.0.113.7:40000", "198.51.100.9:40000"
	for i := range 3 {
		if !attempt(l, a, true) {
			t.Fatalf("wrong token %d of 3 refused", i+1)
		}
	}
	// A's budget is spent: refused, whatever port it comes from, with when to retry.
	_, wait, ok := l.Begin(from("203.0.113.7:40001"))
	if ok || wait <= 0 || wait > 10*time.Second {
		t.Fatalf("4th wrong token: ok %v, retry after %s; want refused within 10s", ok, wait)
	}
	if got := admin.RetryAfter(wait); got != "10" {
		t.Errorf("Retry-After %q, want 10", got)
	}
	// Another address has its own budget.
	if !attempt(l, b, true) {
		t.Fatal("another address refused")
	}
	// Time gives A one attempt back, no more.
	c.add(10 * time.Second)
	if !attempt(l, a, true) || attempt(l, a, true) {
		t.Fatal("after 10s A should have exactly one attempt")
	}
	// Right tokens cost nothing.
	for i := range 10 {
		if !attempt(l, b, false) {
			t.Fatalf("right token %d refused", i+1)
		}
	}
	// (B spent one, and the 10s gave it back.)
	if !attempt(l, b, true) || !attempt(l, b, true) || !attempt(l, b, true) || attempt(l, b, true) { //nolint:staticcheck // SA4000: each attempt call spends one; the repetition is the test
		t.Fatal("B should have had its three attempts left after its right tokens")
	}
	// An IPv6 host counts by its /64; an IPv4-mapped address as IPv4.
	for i := range 3 {
		if !attempt(l, "[2001:db8:1:2::"+string(rune('a'+i))+"]:443", true) {
			t.Fatal("IPv6 attempt refused early")
		}
	}
	if attempt(l, "[2001:db8:1:2:ffff::1]:443", true) {
		t.Error("another address of the same /64 has a budget of its own")
	}
	if attempt(l, "[::ffff:203.0.113.7]:1", true) {
		t.Error("A as an IPv4-mapped IPv6 address has a budget of its own")
	}
}

// Concurrent wrong tokens from one address get no more than the budget.
func TestAuthLimiterHoldsUnderConcurrency(t *testing.T) {
	t.Parallel()
	c := newClock()
	l := admin.NewAuthLimiter(admin.AuthLimit{Failures: 5, Every: time.Hour, Now: c.now})
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			if attempt(l, "203.0.113.7:1", true) {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != 5 {
		t.Fatalf("%d of 200 concurrent wrong tokens were tried, want 5", n)
	}
}

// Past MaxClients, new addresses share one budget until old ones have
// earned theirs back.
func TestAuthLimiterBoundsItsMemory(t *testing.T) {
	t.Parallel()
	c := newClock()
	l := admin.NewAuthLimiter(admin.AuthLimit{Failures: 2, Every: time.Minute, MaxClients: 2, Now: c.now})
	attempt(l, "192.0.2.1:1", true)
	attempt(l, "192.0.2.2:1", true)
	// Full: 192.0.2.3 and .4 share the overflow budget of 2.
	if !attempt(l, "192.0.2.3:1", true) || !attempt(l, "192.0.2.4:1", true) || attempt(l, "192.0.2.5:1", true) {
		t.Fatal("the overflow budget should allow 2 wrong tokens among new addresses")
	}
	// Once the remembered ones are whole again they are forgotten, and a
	// new address gets a budget of its own.
	c.add(2 * time.Minute)
	if !attempt(l, "192.0.2.6:1", true) || !attempt(l, "192.0.2.6:1", true) || attempt(l, "192.0.2.6:1", true) { //nolint:staticcheck // SA4000: each attempt call spends one; the repetition is the test
		t.Fatal("a new address after the sweep should have its own budget of 2")
	}
}

// The API answers 429 with Retry-After once an address has tried too many
// wrong tokens, the right one included, while other addresses go on.
func TestAdminAPILimitsWrongTokensPerAddress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := newClock()
	api, err := admin.NewAPI(admin.APIConfig{Token: apiToken, DB: b.op, Logger: slog.New(slog.DiscardHandler),
		AuthLimiter: admin.NewAuthLimiter(admin.AuthLimit{Now: c.now})})
	if err != nil {
		t.Fatal(err)
	}
	call := func(addr, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/api/events", nil)
		r.RemoteAddr = addr
		r.Header.Set("Authorization", "Bearer "+token)
		r.Header.Set("X-Forwarded-For", "192.0.2.99") // not trusted: anyone can send it
		w := httptest.NewRecorder()
		api.Handler().ServeHTTP(w, r)
		return w
	}
	const attacker, other = "203.0.113.7:5555", "198.51.100.9:5555"
	for i := range 10 {
		if w := call(attacker, "wrong-token-0123456789"); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, w.Code)
		}
	}
	for _, tok := range []string{"wrong-token-0123456789", apiToken} {
		w := call(attacker, tok)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "6" || w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("after 10 wrong tokens: %d, Retry-After %q: want 429 and 6", w.Code, w.Header().Get("Retry-After"))
		}
	}
	if w := call(other, apiToken); w.Code != http.StatusOK {
		t.Fatalf("another address with the token: %d", w.Code)
	}
	c.add(6 * time.Second)
	if w := call(attacker, apiToken); w.Code != http.StatusOK {
		t.Fatalf("the token after the wait: %d", w.Code)
	}
}
