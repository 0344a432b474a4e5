package admin

import (
	"cmp"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// AuthLimit configures an [AuthLimiter].
type AuthLimit struct {
	// Failures is how many wrong tokens one client address may present in a
	// row before it is refused. Defaults to 10.
	Failures int
	// Every is how often a refused address earns one more attempt.
	// Defaults to 6s (ten a minute).
	Every time.Duration
	// MaxClients bounds the addresses remembered; past it, addresses not
	// yet seen share one budget until remembered ones have earned all their
	// attempts back. Defaults to 10000.
	MaxClients int
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// AuthLimiter limits the attempts at the admin token (a bearer header on the
// API or the dashboard, the dashboard's login form) per client address: a
// token bucket of Failures attempts refilled one per Every
// (golang.org/x/time/rate). A successful attempt costs nothing. While an
// address has no attempt left it is refused before its token is compared,
// the right token included: otherwise a refusal would tell a wrong guess
// from a right one. An IPv6 client counts by its /64, which one host
// usually holds whole. The address is the connection's: behind a proxy every
// client shares the proxy's budget. Safe for concurrent use.
type AuthLimiter struct {
	cfg AuthLimit

	mu       sync.Mutex
	clients  map[netip.Prefix]*rate.Limiter
	overflow *rate.Limiter
}

// NewAuthLimiter returns a limiter of l, with defaults for its zero fields.
func NewAuthLimiter(l AuthLimit) *AuthLimiter {
	l.Failures = cmp.Or(l.Failures, 10)
	l.Every = cmp.Or(l.Every, 6*time.Second)
	l.MaxClients = cmp.Or(l.MaxClients, 10000)
	if l.Now == nil {
		l.Now = time.Now
	}
	return &AuthLimiter{cfg: l, clients: map[netip.Prefix]*rate.Limiter{}, overflow: l.newBucket()}
}

func (l AuthLimit) newBucket() *rate.Limiter { return rate.NewLimiter(rate.Every(l.Every), l.Failures) }

// Begin takes an attempt for r's client. When the client has none left, ok
// is false and retryAfter says when it has one. Otherwise call end with
// whether the token was wrong: a right one gives the attempt back.
func (a *AuthLimiter) Begin(r *http.Request) (end func(wrong bool), retryAfter time.Duration, ok bool) {
	now := a.cfg.Now()
	bucket := a.bucket(clientPrefix(r.RemoteAddr), now)
	res := bucket.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return nil, d, false
	}
	return func(wrong bool) {
		if !wrong {
			res.CancelAt(now) // at the reservation's own time: later, it would restore nothing
		}
	}, 0, true
}

// bucket is the limiter of client, made on first sight.
func (a *AuthLimiter) bucket(client netip.Prefix, now time.Time) *rate.Limiter {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b, ok := a.clients[client]; ok {
		return b
	}
	if len(a.clients) >= a.cfg.MaxClients {
		// Forget the addresses whose budget is whole again: they lose nothing.
		for k, b := range a.clients {
			if b.TokensAt(now) >= float64(a.cfg.Failures) {
				delete(a.clients, k)
			}
		}
		if len(a.clients) >= a.cfg.MaxClients {
			return a.overflow
		}
	}
	b := a.cfg.newBucket()
	a.clients[client] = b
	return b
}

// clientPrefix is the address of a request's client as a limiter counts it:
// an IPv4 address alone, an IPv6 one by its /64.
func clientPrefix(remoteAddr string) netip.Prefix {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return netip.Prefix{} // not an IP connection: one shared budget
	}
	ip := ap.Addr().Unmap().WithZone("")
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

// RetryAfter is d as a Retry-After value: whole seconds, at least 1.
func RetryAfter(d time.Duration) string {
	return strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10)
}
