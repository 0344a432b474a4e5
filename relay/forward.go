package relay

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/ingress/verify"
)

// maxAnswer bounds how much of the ingress's answer is read: its answers are
// short JSON (a Slack challenge is the longest).
const maxAnswer = 64 << 10

// forwarder sends verified webhooks to the customer's ingress.
type forwarder struct {
	target  string // base URL, no trailing slash
	secrets []string
	timeout time.Duration
	client  *http.Client
	now     func() time.Time
}

func newForwarder(cfg Config) (*forwarder, error) {
	rt := cfg.Transport
	if rt == nil {
		tr, err := NewTransport(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		rt = tr
	}
	return &forwarder{
		target:  strings.TrimRight(cfg.Target, "/"),
		secrets: cfg.Secrets,
		timeout: cfg.Timeout,
		now:     cfg.Now,
		client: &http.Client{
			Transport: rt,
			// A redirect would send the bytes somewhere the operator did
			// not configure.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// NewTransport is the relay's default transport: bounded connections and
// timeouts, TLS verified against the CAs of caFile when set (the system pool
// otherwise). It never adds Accept-Encoding: what reaches the ingress is what
// the provider sent.
func NewTransport(caFile string) (*http.Transport, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile) //nolint:gosec // G304: the operator's own relay.ca_file
		if err != nil {
			return nil, fmt.Errorf("relay.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("relay.ca_file %s: no PEM certificate in it", caFile)
		}
		tlsCfg.RootCAs = pool
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   5 * time.Second,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   64,
		MaxConnsPerHost:       256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // the request's context bounds it
		DisableCompression:    true,
	}, nil
}

func (f *forwarder) close() { f.client.CloseIdleConnections() }

// outcome is what the ingress answered, or why it did not.
type outcome struct {
	status      int
	body        []byte
	contentType string
	reason      string // the ingress's reason label, when it gave one
	stored      bool   // the ingress stored the event (not a duplicate)
	retryAfter  string // for the provider, when not 2xx
	attempts    int
	err         error  // no answer: unreachable, timed out, cut off
	class       string // err's class, for logs
}

// forward sends body to the ingress, signed; a connection error is retried
// once while time remains. Retrying a POST that may have arrived is safe: the
// ingress deduplicates by the provider's event id.
func (f *forwarder) forward(ctx context.Context, source string, unsigned verify.RelayUnsigned, r *http.Request, body []byte, relayID string) outcome {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	requestURI := "/webhooks/" + source
	if r.URL.RawQuery != "" {
		requestURI += "?" + r.URL.RawQuery
	}
	header := unsigned.ForwardHeaders(r.Header)
	wireHeaders(header)
	signed := verify.SignRelay(f.secrets, f.now(), source, requestURI, header, body)
	for k, v := range signed {
		header[k] = v
	}
	header.Set(verify.RelayHeaderID, relayID)
	if _, ok := header["User-Agent"]; !ok {
		header["User-Agent"] = nil // send none rather than Go's
	}
	var out outcome
	for attempt := 1; attempt <= 2; attempt++ {
		out = f.send(ctx, f.target+"/webhooks/"+source, r.URL.RawQuery, header, body)
		out.attempts = attempt
		if out.err == nil || !retryable(ctx, out.err) {
			break
		}
	}
	return out
}

// wireHeaders rewrites h, in place, to the headers net/http will put on the
// wire, over HTTP/1.1 and HTTP/2 alike, so that the relay signs what the
// ingress receives: a value the transport drops or rewrites after signing is
// refused by the ingress (relay_headers_mismatch) on every retry, and the
// event is lost. The ingress hashes what it receives, so this is the relay's
// business alone and relays and ingresses of other versions still agree.
// The other headers the transport sets or drops (Host, Content-Length,
// Transfer-Encoding, the hop-by-hop ones) are not forwarded at all
// (verify.RelayUnsigned.ForwardHeaders), and net/http sends the rest as
// they are.
func wireHeaders(h http.Header) {
	// The client sends at most one User-Agent, the first value, and none
	// when that is empty (net/http's request write and its HTTP/2
	// encoder).
	if ua, ok := h["User-Agent"]; ok {
		if len(ua) == 0 || strings.Trim(ua[0], " \t") == "" {
			delete(h, "User-Agent")
		} else {
			h["User-Agent"] = ua[:1]
		}
	}
	// HTTP/2 sends Cookie as crumbs, each value split at ';', and the
	// receiver joins them back into one value with "; " (RFC 9113 section
	// 8.2.3): "a=1;b=2", or two Cookie lines "a=1" and "b=2", arrive as
	// "a=1; b=2". That form, with no empty crumb nor spaces around one,
	// goes through the split and join unchanged, and HTTP/1.1 sends it
	// verbatim.
	if vs, ok := h["Cookie"]; ok {
		var crumbs []string
		for _, v := range vs {
			for c := range strings.SplitSeq(v, ";") {
				if c = strings.Trim(c, " \t"); c != "" {
					crumbs = append(crumbs, c)
				}
			}
		}
		if len(crumbs) == 0 {
			delete(h, "Cookie")
		} else {
			h["Cookie"] = []string{strings.Join(crumbs, "; ")}
		}
	}
	// A transport with compression on (a Config.Transport; the default one
	// has it off) adds "Accept-Encoding: gzip" when the request has none,
	// and over HTTP/1.1 also when its first value is empty. In place of none
	// that is an unlisted header, which the ingress neither checks nor
	// stores; beside a signed empty value it changes a signed header. So
	// empty values are not forwarded.
	if vs, ok := h["Accept-Encoding"]; ok {
		vs = slices.DeleteFunc(slices.Clone(vs), func(v string) bool { return strings.Trim(v, " \t") == "" })
		if len(vs) == 0 {
			delete(h, "Accept-Encoding")
		} else {
			h["Accept-Encoding"] = vs
		}
	}
}

// send posts body to u with rawQuery set on the built URL, not parsed from
// a string: the query reaches the ingress as signed (a '#' in a request
// line's query is part of the query; parsing would cut it as a fragment).
func (f *forwarder) send(ctx context.Context, u, rawQuery string, header http.Header, body []byte) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body)) //nolint:gosec // G704: the host is the configured relay.target; only the path comes from the request
	if err != nil {
		return outcome{err: errors.New("build request"), class: "request", retryAfter: "60"}
	}
	req.URL.RawQuery = rawQuery
	req.Header = header.Clone()
	resp, err := f.client.Do(req) //nolint:gosec // G704: the host is the configured relay.target; only the path comes from the request
	if err != nil {
		return outcome{err: transportError(err), class: errorClass(ctx, err), retryAfter: "5"}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		// The status alone is not enough: a 2xx whose body was cut off is
		// still committed, but a challenge answer would be lost.
		return outcome{err: transportError(err), class: errorClass(ctx, err), retryAfter: "5"}
	}
	a := parseAnswer(b)
	out := outcome{status: resp.StatusCode, body: b, contentType: resp.Header.Get("Content-Type"),
		reason: a.Reason, stored: a.Status == "stored", retryAfter: cleanRetryAfter(resp.Header.Get("Retry-After"))}
	if out.contentType == "" {
		out.contentType = "application/json"
	}
	return out
}

// retryable: a connection error with time left (not a timeout, which would
// only run past the provider's deadline, nor a certificate that will not
// verify the second time either).
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var ne net.Error
	var certErr *tls.CertificateVerificationError
	return !(errors.As(err, &ne) && ne.Timeout()) && !errors.As(err, &certErr)
}

// transportError drops the URL from a client error: its query string is the
// sender's and stays out of logs.
func transportError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", strings.ToLower(ue.Op), ue.Err)
	}
	return err
}

func errorClass(ctx context.Context, err error) string {
	var ne net.Error
	var opErr *net.OpError
	var certErr *tls.CertificateVerificationError
	switch {
	case ctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout()):
		return "timeout"
	case errors.As(err, &certErr):
		return "tls"
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return "connect"
	default:
		return "connection"
	}
}

var reasonLabel = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// parseAnswer reads an ingress answer ({"status":"stored"},
// {"status":"rejected","reason":"signature_mismatch"}); a reason that is not
// a label is left out, and a body that is not an answer gives the zero one.
func parseAnswer(b []byte) answer {
	var a answer
	if json.Unmarshal(b, &a) != nil {
		return answer{}
	}
	if !reasonLabel.MatchString(a.Reason) {
		a.Reason = ""
	}
	return a
}

// cleanRetryAfter passes on the ingress's Retry-After when it is a plain
// number of seconds; otherwise 5.
func cleanRetryAfter(v string) string {
	if v == "" || len(v) > 6 || strings.Trim(v, "0123456789") != "" {
		return "5"
	}
	return v
}
