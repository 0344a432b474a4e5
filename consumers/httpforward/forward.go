package httpforward

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/propagation"

	"github.com/inlet-dev/inlet/consumers"
)

// Config configures a forwarder.
type Config struct {
	// URL is where events are POSTed; http or https. Required.
	URL string
	// Secret signs every request (Inlet-Signature); at least 16 bytes.
	// Required.
	Secret string
	// Timeout bounds one request, answer included. Defaults to 10s.
	Timeout time.Duration
	// Client sends the requests. Defaults to a client of its own. Its
	// redirect policy is overridden: redirects are never followed.
	Client *http.Client
}

const (
	defaultTimeout = 10 * time.Second
	minSecretLen   = 16
	// maxAnswerText is how much of a failed answer goes into the error text.
	maxAnswerText = 200
	// drainLimit is how much of an answer is read to reuse the connection.
	drainLimit = 64 << 10
)

// WithDefaults returns c with unset fields at their defaults.
func (c Config) WithDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, defaultTimeout)
	return c
}

func (c Config) validate() error {
	if c.URL == "" {
		return errors.New("url: required")
	}
	if err := consumers.CheckTargetURL(c.URL); err != nil {
		return fmt.Errorf("url: %w", err) // never the URL: it may hold credentials
	}
	if len(c.Secret) < minSecretLen {
		return fmt.Errorf("secret: %d bytes, need at least %d", len(c.Secret), minSecretLen)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("timeout: %s must be positive", c.Timeout)
	}
	return nil
}

// maxIdleConns is how many idle connections a forwarder keeps to its
// service: above any handler's usual concurrency.
const maxIdleConns = 256

type forwarder struct {
	url     string
	secret  string
	timeout time.Duration
	client  *http.Client
	now     func() time.Time
}

// New returns a handler that forwards each event as described in the package
// documentation.
func New(cfg Config) (consumers.HandlerFunc, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("httpforward config: %w", err)
	}
	var client http.Client
	if cfg.Client != nil {
		client = *cfg.Client
	} else {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Answers are read for at most a few bytes: no point asking for gzip,
		// and no Accept-Encoding the provider did not send either.
		t.DisableCompression = true
		// One host, as many requests at once as the handler's
		// concurrency: keep their connections (the default kept 2, so
		// under load nearly every delivery opened a new one).
		t.MaxIdleConns, t.MaxIdleConnsPerHost = maxIdleConns, maxIdleConns
		client.Transport = t
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	f := &forwarder{url: cfg.URL, secret: cfg.Secret, timeout: cfg.Timeout, client: &client, now: time.Now}
	return f.forward, nil
}

func (f *forwarder) forward(ctx context.Context, e *consumers.Event) error {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, bytes.NewReader(e.Body))
	if err != nil {
		return fmt.Errorf("forward job %d: build request: %w", e.JobID, unwrapURL(err))
	}
	req.Header = forwardHeaders(e.Headers)
	// The attempt's own trace context, never the sender's (forwardHeaders
	// drops it, in every format it knows): Inlet's trace goes on into the
	// service. The URL's user:password, if any, is the request's
	// Authorization: forwardHeaders drops the provider's.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	req.Header.Set(HeaderJobID, strconv.FormatInt(e.JobID, 10))
	req.Header.Set(HeaderEventID, strconv.FormatInt(e.EventID, 10))
	provider, eventType := HeaderValue(e.Provider), HeaderValue(e.EventType)
	req.Header.Set(HeaderProvider, provider)
	req.Header.Set(HeaderEventType, eventType)
	req.Header.Set(HeaderAttempt, strconv.Itoa(e.Attempt))
	req.Header.Set(HeaderIdempotencyKey, e.IdempotencyKey())
	req.Header.Set(HeaderSignature, Sign(f.secret, f.now(), Signed{JobID: e.JobID, EventID: e.EventID, Provider: provider, EventType: eventType}, e.Body))

	resp, err := f.client.Do(req)
	if err != nil {
		err = unwrapURL(err)
		class := consumers.ClassNetwork
		var netErr net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()) {
			class = consumers.ClassTimeout
		}
		return consumers.WithClass(fmt.Errorf("forward job %d: %w", e.JobID, cutText{err}), class)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 {
		// 101 Switching Protocols hands back the raw connection as the
		// body, which the request's timeout no longer closes: never read.
		return fmt.Errorf("forward job %d: answered %s", e.JobID, status(resp))
	}
	// Reading the answer ends with the attempt's timeout too.
	stop := context.AfterFunc(ctx, func() { _ = resp.Body.Close() })
	defer stop()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
		return nil
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerText))
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	err = fmt.Errorf("forward job %d: answered %s: %q", e.JobID, status(resp), answer)
	// The service's own word on when to come back (429, 503) holds the
	// retry back at least that long.
	err = consumers.RetryAfter(err, retryAfter(resp.Header.Get("Retry-After"), f.now()))
	switch {
	case resp.StatusCode >= 500:
		return consumers.WithClass(err, consumers.ClassHTTP5xx)
	case resp.StatusCode >= 400:
		return consumers.WithClass(err, consumers.ClassHTTP4xx)
	default: // 1xx, 3xx: a redirect is not followed
		return err
	}
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP-date
// (RFC 9110, 10.2.3), as a delay from now; 0 when absent, malformed or
// past.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	// consumers.RetryAfterOf caps the delay at 24h; a larger count of
	// seconds must not overflow on its way there.
	const most = uint64(math.MaxInt64 / int64(time.Second))
	secs, err := strconv.ParseUint(v, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		secs, err = most, nil
	}
	if err == nil {
		return time.Duration(min(secs, most)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// status is the answer's status code and its standard text, not the
// service's reason phrase, which could be of any length (the error text
// holds at most maxAnswerText bytes of the answer).
func status(resp *http.Response) string {
	return strings.TrimSpace(fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode)))
}

// cutText is a transport error with its text cut to maxTransportText
// bytes, its chain kept (errors.Is, As): net/http quotes an answer it
// cannot parse whole ("malformed HTTP response \"…\""), which would put
// some 2,000 bytes of whatever answered into the stored error text, past
// the 200 of the answer doc.go promises (review helper-314).
type cutText struct{ err error }

// maxTransportText bounds net/http's words and the answer they quote
// together, so the answer stays within maxAnswerText.
const maxTransportText = maxAnswerText

func (c cutText) Error() string {
	s := c.err.Error()
	if len(s) <= maxTransportText {
		return s
	}
	cut := s[:maxTransportText]
	for !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return cut + "…"
}

func (c cutText) Unwrap() error { return c.err }

// unwrapURL drops *url.Error's "Post \"<url>\":" prefix: the URL may carry
// credentials and the error text is stored.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// hopByHop are the headers that describe one connection (RFC 9110 §7.6.1),
// plus those the outgoing request sets itself.
var hopByHop = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Host": true, "Content-Length": true, "Accept-Encoding": true,
	// The provider's 100-continue was for ingress: sent on, it makes the
	// transport hold the body back until the service answers (up to 1 s).
	"Expect": true,
}

// providersOnly are headers of the provider's request that are not the
// service's to read.
var providersOnly = map[string]bool{
	// Credentials of the hop into ingress (its verifier's or a proxy's):
	// sent on, they hand the provider's credential to another service, and
	// net/http adds the URL's user:password only to a request without an
	// Authorization of its own.
	"Authorization": true, "Proxy-Authorization": true, "Cookie": true,
	// Proxy: a CGI-style service reads it as HTTP_PROXY and sends its own
	// outbound requests through the sender's host ("httpoxy").
	"Proxy": true,
	// The sender's trace context, in each format a common propagator or
	// mesh reads, is not trusted (ingress starts a trace of its own): the
	// forwarded request carries the attempt's W3C traceparent instead.
	"Traceparent": true, "Tracestate": true, "Baggage": true, // W3C
	"B3": true, "Uber-Trace-Id": true, // Zipkin single header, Jaeger
	"X-Amzn-Trace-Id": true, "X-Cloud-Trace-Context": true, "Sentry-Trace": true,
	// What the proxies and CDN edges in front of ingress said about that
	// hop (the relay's unsigned defaults, ingress/verify/relay.go, less
	// X-Request-Id): who the client was, by which scheme and host, through
	// which edge. Sent on, the service and the proxies in front of it read
	// them about the forward: a client address the provider could set
	// (X-Forwarded-For: 10.0.0.1 reaches the service as its leftmost
	// entry), a scheme or host to build links with, and the instructions a
	// mesh sidecar takes from an internal caller (X-Envoy-Retry-On,
	// X-Envoy-Max-Retries: the POST sent again; X-Envoy-Upstream-Rq-Timeout-Ms).
	"Forwarded": true, "X-Real-Ip": true, "Via": true, "True-Client-Ip": true,
	"Cf-Connecting-Ip": true, "Cf-Connecting-Ipv6": true, "Cf-Pseudo-Ipv4": true, "Cf-Ipcountry": true,
	"Cf-Visitor": true, "Cf-Ew-Via": true, "Cf-Worker": true, "Cf-Ray": true, "Cdn-Loop": true,
}

// providersOnlyPrefixes extends providersOnly to header families: B3's
// multi-header form, Datadog's, Jaeger's baggage, and the hop's own
// (X-Forwarded-*, Envoy's, Fastly's, Azure Front Door's, Akamai's).
var providersOnlyPrefixes = []string{"X-B3-", "X-Datadog-", "Uberctx-",
	"X-Forwarded-", "X-Envoy-", "Fastly-", "X-Azure-", "Akamai-"}

// forwardHeaders copies the provider's headers minus hop-by-hop ones, those
// the Connection header names, the provider's credentials and trace
// context, what proxies in front of ingress said about that hop, and any claiming Inlet's own names: only Inlet sets Inlet-* and
// Idempotency-Key.
func forwardHeaders(in http.Header) http.Header {
	drop := map[string]bool{}
	for _, v := range in.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				drop[textproto.CanonicalMIMEHeaderKey(f)] = true
			}
		}
	}
	out := make(http.Header, len(in))
	for k, vs := range in {
		ck := textproto.CanonicalMIMEHeaderKey(k)
		// CGI, WSGI, Rack and PHP read '_' as '-' (HTTP_IDEMPOTENCY_KEY,
		// HTTP_X_B3_TRACEID): Idempotency_key is Inlet's header there too,
		// and X_B3_Traceid the sender's trace.
		own := textproto.CanonicalMIMEHeaderKey(strings.ReplaceAll(ck, "_", "-"))
		if hopByHop[ck] || drop[ck] || providersOnly[own] || hasAnyPrefix(own, providersOnlyPrefixes) ||
			strings.HasPrefix(own, "Inlet-") || own == HeaderIdempotencyKey {
			continue
		}
		out[ck] = append(out[ck], vs...)
	}
	return out
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
