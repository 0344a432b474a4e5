package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The relay scheme: how `inlet relay` signs what it forwards, and how ingress
// checks it (a source with relay_secrets). It is not a provider scheme: the
// provider's own signature travels untouched inside the relayed request and
// is verified as well.
//
//	Inlet-Relay-Headers:   content-type,stripe-signature,user-agent
//	Inlet-Relay-Signature: t=<unix seconds>,h=<hex SHA-256 of the canonical headers>,v1=<hex HMAC-SHA256>
//	Inlet-Relay-Id:        <random, for matching relay and ingress logs>
//
// Inlet-Relay-Headers lists, sorted and in lower case, the headers the relay
// forwarded and signed, each with at least one value. Headers added on the
// way (a proxy's X-Forwarded-For) are not listed and not covered; removing,
// changing, reordering or adding a value of a listed header breaks the
// signature. The relay neither forwards nor signs the headers a proxy or
// CDN edge in front of it adds about that hop (relayUnsignedDefaults:
// X-Forwarded-*, Forwarded, Via, CF-Ray, X-Request-Id, ...; and the
// operator's relay.unsigned_headers): one in front of the ingress may set
// or append to them. The canonical headers are, for each listed name in
// order and for each of its values in the order received, the line
//
//	<name> ":" <value without surrounding spaces and tabs> "\n"
//
// which is unambiguous because a name cannot hold ':' and a value cannot hold
// a newline. The list is covered too, though it is not hashed as such: the
// ingress accepts only a list of distinct lower-case header names (no
// Inlet-Relay-* one), sorted, each with at least one value, so the list is
// exactly the names of the canonical lines and one added, dropped or spelled
// otherwise changes h or is refused; RelayListedHeaders then reads exactly
// the values h covers. (Relays and ingresses of every version hash the same
// form, so either may be upgraded first.) Each v1 is HMAC-SHA256, keyed with
// one relay secret, over
//
//	<t> "." <source> "." <h> "." <request URI> "\n" <body>
//
// with the request URI as ingress routes it (/webhooks/{source}?query): a
// source name holds no '.', h is 64 hex digits and a request URI holds no
// newline, so the fields cannot be shifted into each other. The relay signs
// with every secret it has (one v1 each), so either side can rotate first.
const (
	RelayHeaderPrefix    = "Inlet-Relay-"
	RelayHeaderSignature = "Inlet-Relay-Signature"
	RelayHeaderHeaders   = "Inlet-Relay-Headers"
	RelayHeaderID        = "Inlet-Relay-Id"
)

// Errors of VerifyRelay; ingress answers 401 to each.
var (
	// ErrRelaySignatureMissing: no Inlet-Relay-Signature header.
	ErrRelaySignatureMissing = errors.New("relay signature missing")
	// ErrRelaySignatureMismatch: the header is malformed, or no relay secret
	// produces any of its v1 values.
	ErrRelaySignatureMismatch = errors.New("relay signature mismatch")
	// ErrRelayTimestampOutsideTolerance: the signature is the relay's but
	// too old or too far in the future.
	ErrRelayTimestampOutsideTolerance = errors.New("relay timestamp outside tolerance")
	// ErrRelayHeadersMismatch: the signature is the relay's, but the listed
	// headers as received are not the ones it signed (changed in transit).
	ErrRelayHeadersMismatch = errors.New("relay headers changed in transit")
)

// hopHeaders are connection-scoped (RFC 9110 section 7.6.1, plus the
// historical Keep-Alive and Proxy-Connection); a relay neither forwards nor
// signs them. Host and Content-Length are the transport's to set.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Expect", "Host", "Content-Length"}

// relayUnsignedDefaults are the headers a relay neither forwards nor signs
// besides the hop-by-hop ones (an entry ending in '*' is a prefix; names
// match in any case). They describe the hops into the relay, not the
// provider's request: a TLS-terminating proxy, load balancer or CDN edge in
// front of the relay sets them, and one in front of the ingress sets them
// anew or appends to them (nginx's $proxy_add_x_forwarded_for, an AWS ALB's
// X-Amzn-Trace-Id Self=…, Cloudflare's CF-Ray and CDN-Loop, an Envoy edge's
// x-request-id and B3 span). Signed, they would make the ingress refuse
// every delivery behind such proxies (relay_headers_mismatch). By origin:
//
//   - any proxy: X-Forwarded-*, Forwarded, X-Real-Ip, Via;
//   - AWS load balancers: X-Amzn-Trace-Id; Google's: X-Cloud-Trace-Context;
//   - Cloudflare: CF-Ray, CF-Connecting-IP, CF-Connecting-IPv6,
//     CF-IPCountry, CF-Visitor, CF-EW-Via, CF-Pseudo-IPv4, CF-Worker,
//     CDN-Loop, True-Client-IP (also Akamai's);
//   - Envoy edges (Istio, Envoy Gateway, Contour, Emissary): X-Request-Id,
//     X-Envoy-*, and the trace context they start or continue with a span
//     of their own (Traceparent, Tracestate, B3, X-B3-*);
//   - Fastly: Fastly-*; Azure Front Door: X-Azure-*; Akamai: Akamai-*.
//
// No provider preset or scheme reads any of them
// (TestRelayUnsignedDefaultsReadByNoProvider): Sentry's Request-ID,
// Bitbucket's X-Request-UUID and Cloudflare's own cf-webhook-auth are other
// names, which is why CF-* is listed name by name. A source whose
// configuration reads one anyway (event_id_header: X-Request-Id) keeps it
// forwarded and signed (RelaySourceHeaders, RelayUnsigned.Keeping). An
// operator adds names and prefixes with relay.unsigned_headers
// (NewRelayUnsigned).
var relayUnsignedDefaults = []string{
	"X-Forwarded-*", "Forwarded", "X-Real-Ip", "Via",
	"X-Amzn-Trace-Id", "X-Cloud-Trace-Context",
	"Cf-Ray", "Cf-Connecting-Ip", "Cf-Connecting-Ipv6", "Cf-Ipcountry", "Cf-Visitor", "Cf-Ew-Via",
	"Cf-Pseudo-Ipv4", "Cf-Worker", "Cdn-Loop", "True-Client-Ip",
	"X-Request-Id", "X-Envoy-*", "Traceparent", "Tracestate", "B3", "X-B3-*",
	"Fastly-*", "X-Azure-*", "Akamai-*",
}

// RelayUnsigned is the set of request headers a relay neither forwards nor
// signs, beyond the hop-by-hop ones: relayUnsignedDefaults and the
// operator's relay.unsigned_headers, less the names one source reads
// (Keeping). The zero value is the defaults alone. It is one set for both:
// SignRelay signs exactly what ForwardHeaders forwards.
type RelayUnsigned struct {
	names, prefixes []string // the operator's, lower case, prefixes without '*'
	keep            []string // lower case: read by the source, never dropped
}

// defaultNames and defaultPrefixes are relayUnsignedDefaults, lower case.
var defaultNames, defaultPrefixes = func() (names, prefixes []string) {
	for _, e := range relayUnsignedDefaults {
		if err := CheckRelayUnsignedEntry(e); err != nil {
			panic("verify: relayUnsignedDefaults: " + err.Error())
		}
		if p, ok := strings.CutSuffix(strings.ToLower(e), "*"); ok {
			prefixes = append(prefixes, p)
		} else {
			names = append(names, strings.ToLower(e))
		}
	}
	return names, prefixes
}()

// RelayUnsignedDefaults returns the default unsigned headers, as documented
// (an entry ending in '*' is a prefix).
func RelayUnsignedDefaults() []string { return slices.Clone(relayUnsignedDefaults) }

// NewRelayUnsigned returns the defaults plus extra (relay.unsigned_headers),
// each a header name or a prefix of one followed by '*'
// (CheckRelayUnsignedEntry). The error names the first bad entry by index.
func NewRelayUnsigned(extra []string) (RelayUnsigned, error) {
	var u RelayUnsigned
	for i, e := range extra {
		if err := CheckRelayUnsignedEntry(e); err != nil {
			return RelayUnsigned{}, fmt.Errorf("[%d]: %w", i, err)
		}
		if p, ok := strings.CutSuffix(strings.ToLower(e), "*"); ok {
			u.prefixes = append(u.prefixes, p)
		} else {
			u.names = append(u.names, strings.ToLower(e))
		}
	}
	return u, nil
}

// CheckRelayUnsignedEntry checks one entry of relay.unsigned_headers: a
// header name (an RFC 9110 token: letters, digits and !#$%&'+-.^_`|~), or
// such a name followed by one '*' for every header it starts (X-Edge-*).
func CheckRelayUnsignedEntry(entry string) error {
	name, prefix := strings.CutSuffix(entry, "*")
	switch {
	case name == "" && prefix:
		return errors.New(`"*" alone would drop every header, the provider's signature included: give a prefix (X-Edge-*)`)
	case name == "" || strings.ContainsRune(name, '*') || !validHeaderName(name):
		return fmt.Errorf("%q: want a header name (letters, digits, -), or a prefix of one followed by * (X-Edge-*)", cutEntry(entry))
	}
	return nil
}

// Keeping returns u without names: the headers a source's verifier reads
// (RelaySourceHeaders), forwarded and signed even when u lists them.
func (u RelayUnsigned) Keeping(names []string) RelayUnsigned {
	keep := slices.Clone(u.keep)
	for _, n := range names {
		keep = append(keep, strings.ToLower(n))
	}
	u.keep = keep
	return u
}

// Matches reports whether u lists the header name (in any case), Keeping
// aside: true for a listed header a source reads too.
func (u RelayUnsigned) Matches(name string) bool {
	lname := strings.ToLower(name)
	hasPrefix := func(p string) bool { return strings.HasPrefix(lname, p) }
	return slices.Contains(defaultNames, lname) || slices.Contains(u.names, lname) ||
		slices.ContainsFunc(defaultPrefixes, hasPrefix) || slices.ContainsFunc(u.prefixes, hasPrefix)
}

// drops reports whether u drops name: it is listed and no source reads it.
func (u RelayUnsigned) drops(name string) bool {
	return u.Matches(name) && !slices.Contains(u.keep, strings.ToLower(name))
}

// RelayForwardHeaders returns the request headers a relay forwards with
// the default unsigned set: RelayUnsigned{}.ForwardHeaders(h).
func RelayForwardHeaders(h http.Header) http.Header {
	return RelayUnsigned{}.ForwardHeaders(h)
}

// ForwardHeaders returns the request headers a relay forwards: h without
// hop-by-hop headers (and those named in Connection), Host, Content-Length,
// the headers u drops (those proxies and edges add about the hops,
// relayUnsignedDefaults, and the operator's), and any Inlet-Relay-* header
// a sender put there. h is left as it is.
func (u RelayUnsigned) ForwardHeaders(h http.Header) http.Header {
	out := h.Clone()
	for _, c := range h.Values("Connection") {
		for name := range strings.SplitSeq(c, ",") {
			if name = strings.TrimSpace(name); name != "" {
				out.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		out.Del(name)
	}
	for k := range out {
		if u.drops(k) {
			delete(out, k)
		}
	}
	return StripRelay(out)
}

// RelaySourceHeaders returns the request headers the verifier of cfg reads
// by its configuration and provider preset: event id, type and time
// headers, signature and timestamp headers, and each {header:Name} of a
// signed payload, with the fixed names of the built-in schemes (stripe,
// github, ...); canonical, sorted, each once. A relay keeps them
// (RelayUnsigned.Keeping), so a source reading a header an edge sets
// (event_id_header: X-Request-Id) still gets it at the ingress, and an
// operator's relay.unsigned_headers cannot drop a source's signature.
func RelaySourceHeaders(cfg Config) []string {
	var names []string
	add := func(ns ...string) {
		for _, n := range ns {
			if n != "" {
				names = append(names, http.CanonicalHeaderKey(n))
			}
		}
	}
	addTemplate := func(tmpl string) {
		segs, err := parseTemplate(tmpl)
		if err != nil {
			return // verify.New refuses it
		}
		for _, s := range segs {
			if s.kind == segHeader {
				add(s.text)
			}
		}
	}
	addHMAC := func(c HMACConfig) {
		add(c.Header, c.TimestampHeader)
		add(c.AltHeaders...)
		addTemplate(c.SignedPayload)
	}
	add(cfg.EventIDHeader, cfg.EventTypeHeader, cfg.OccurredAtHeader)
	add(schemeHeaders[cfg.Type]...)
	addHMAC(cfg.HMAC)
	if p := presets[cfg.Type]; p != nil {
		add(schemeHeaders[p.scheme]...)
		add(p.idHeader, p.typeHeader, p.occurredHeader, p.keySig.header, p.keySig.timestampHeader, p.token.header)
		addHMAC(p.hmac)
		addTemplate(p.keySig.signedPayload)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// schemeHeaders are the request headers each built-in scheme reads (its
// signature, timestamp, event id and type headers).
var schemeHeaders = map[string][]string{
	typeGitHub:           {githubSignatureHeader, githubSHA1Header, githubDeliveryHeader, githubEventHeader},
	typeGitLab:           {gitlabTokenHeader, gitlabUUIDHeader, gitlabIdempotencyHeader, gitlabEventHeader},
	typePaddle:           {paddleHeader},
	typeShopify:          {shopifySignatureHeader, shopifyEventIDHeader, shopifyWebhookIDHeader, shopifyTopicHeader},
	typeSlack:            {slackSignatureHeader, slackTimestampHeader},
	typeStripe:           {stripeHeader},
	typeTwilio:           {twilioSignatureHeader, twilioIdempotencyHeader},
	typeStandardWebhooks: standardHeaderNames,
	typeSvix:             standardHeaderNames,
}

// standardHeaderNames are the Standard Webhooks headers, in both spellings
// its verifier reads.
var standardHeaderNames = []string{webhookHeaders.id, webhookHeaders.timestamp, webhookHeaders.signature,
	svixHeaders.id, svixHeaders.timestamp, svixHeaders.signature}

// StripRelay returns h without its Inlet-Relay-* headers (h itself when it
// has none).
func StripRelay(h http.Header) http.Header {
	var out http.Header
	for k := range h {
		if isRelayHeader(k) {
			if out == nil {
				out = h.Clone()
			}
			delete(out, k)
		}
	}
	if out == nil {
		return h
	}
	return out
}

// RelayListedHeaders returns the headers of h that its Inlet-Relay-Headers
// lists, which VerifyRelay checked against the relay's signature: what the
// relay received and forwarded, read as the digest reads them (every
// spelling of a listed name, in the same order), so exactly the values the
// signature covers. A header added on the way from the relay (a proxy's
// X-Forwarded-For, or an event id header put there by whoever sits on that
// path) is not covered by the signature and is left out, so it can never
// reach a provider verifier or the stored row; so is a listed entry
// VerifyRelay refuses (not a lower-case header name, or an Inlet-Relay-*
// one), which the digest never covers.
func RelayListedHeaders(h http.Header) http.Header {
	out := http.Header{}
	list := h.Get(RelayHeaderHeaders)
	if list == "" {
		return out
	}
	byName := headerLines(h)
	for name := range strings.SplitSeq(list, ",") {
		if !listableName(name) {
			continue
		}
		if vs := byName[name]; len(vs) > 0 {
			out[http.CanonicalHeaderKey(name)] = slices.Clone(vs)
		}
	}
	return out
}

// listableName reports whether name may be listed in Inlet-Relay-Headers:
// a header name (an RFC 9110 token) in lower case, not an Inlet-Relay-* one.
// A name in another case adds no line to the digest (which looks names up
// in lower case), so it must not be listed, or whoever sits between relay
// and ingress could list a header of their own in it.
func listableName(name string) bool {
	if name == "" || isRelayHeader(name) {
		return false
	}
	for i := range len(name) {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func isRelayHeader(name string) bool {
	return len(name) >= len(RelayHeaderPrefix) && strings.EqualFold(name[:len(RelayHeaderPrefix)], RelayHeaderPrefix)
}

// SignRelay returns the Inlet-Relay-Headers and Inlet-Relay-Signature headers
// for forwarding body with header (as RelayForwardHeaders returns it) to
// requestURI of source at time now, one v1 per secret.
func SignRelay(secrets []string, now time.Time, source, requestURI string, header http.Header, body []byte) http.Header {
	names := make([]string, 0, len(header))
	for k, vs := range header {
		// A name with no value adds no line: not listed, as the ingress
		// refuses a listed name it receives no value of.
		if !isRelayHeader(k) && len(vs) > 0 {
			names = append(names, strings.ToLower(k))
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	digest := canonicalDigest(header, names)
	ts := strconv.FormatInt(now.Unix(), 10)
	var sig strings.Builder
	sig.WriteString("t=" + ts + ",h=" + digest)
	for _, s := range secrets {
		mac := relayMAC(s, ts, source, digest, requestURI, body)
		sig.WriteString(",v1=" + hex.EncodeToString(mac))
	}
	out := http.Header{}
	out.Set(RelayHeaderHeaders, strings.Join(names, ","))
	out.Set(RelayHeaderSignature, sig.String())
	return out
}

// VerifyRelay checks a relayed request: some secret must produce one of the
// v1 values, the timestamp must be within tolerance of now in either
// direction, Inlet-Relay-Headers must be one sorted list of distinct
// lower-case header names (no Inlet-Relay-* one), each received with at
// least one value, and the headers it lists must be, as received, the ones
// signed. It returns the index of the matching secret.
func VerifyRelay(secrets []string, tolerance time.Duration, source, requestURI string, header http.Header, body []byte, now time.Time) (int, error) {
	value := header.Get(RelayHeaderSignature)
	if value == "" {
		return -1, ErrRelaySignatureMissing
	}
	ts, digest, sigs, ok := parseRelaySignature(value)
	if !ok {
		return -1, fmt.Errorf("%w: malformed %s", ErrRelaySignatureMismatch, RelayHeaderSignature)
	}
	unix, ok := parseUnix(ts)
	if !ok {
		return -1, fmt.Errorf("%w: malformed timestamp", ErrRelaySignatureMismatch)
	}
	idx := -1
	for i, s := range secrets {
		want := relayMAC(s, ts, source, digest, requestURI, body)
		for _, got := range sigs {
			if hmac.Equal(got, want) && idx < 0 {
				idx = i
			}
		}
	}
	if idx < 0 {
		return -1, ErrRelaySignatureMismatch
	}
	if err := checkSkew("relay", unix, now, tolerance); err != nil {
		return idx, fmt.Errorf("%w: %w", ErrRelayTimestampOutsideTolerance, err)
	}
	if n := len(header.Values(RelayHeaderHeaders)); n > 1 {
		return idx, fmt.Errorf("%w: %s given %d times", ErrRelayHeadersMismatch, RelayHeaderHeaders, n)
	}
	var names []string
	if list := header.Get(RelayHeaderHeaders); list != "" {
		names = strings.Split(list, ",")
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		return idx, fmt.Errorf("%w: %s is not a sorted list of distinct names", ErrRelayHeadersMismatch, RelayHeaderHeaders)
	}
	byName := headerLines(header)
	for _, name := range names {
		// With these, the list is exactly the names of the canonical lines
		// the digest covers: no entry can be added, dropped or spelled
		// otherwise without changing the digest or being refused here.
		if !listableName(name) {
			return idx, fmt.Errorf("%w: %s entry %q is not a lower-case header name or is a relay header",
				ErrRelayHeadersMismatch, RelayHeaderHeaders, cutEntry(name))
		}
		if len(byName[name]) == 0 {
			return idx, fmt.Errorf("%w: listed header %q not received", ErrRelayHeadersMismatch, name)
		}
	}
	if got := digestLines(byName, names); !hmac.Equal([]byte(got), []byte(digest)) {
		return idx, ErrRelayHeadersMismatch
	}
	return idx, nil
}

// cutEntry shortens a listed entry for an error message: it is the sender's.
func cutEntry(s string) string {
	const most = 64
	if len(s) > most {
		return s[:most] + "…"
	}
	return s
}

// parseRelaySignature splits "t=…,h=…,v1=…[,v1=…]"; unknown keys are skipped
// so later versions can be added beside v1.
func parseRelaySignature(value string) (ts, digest string, sigs [][]byte, ok bool) {
	for part := range strings.SplitSeq(value, ",") {
		k, v, found := strings.Cut(strings.TrimSpace(part), "=")
		if !found {
			return "", "", nil, false
		}
		switch k {
		case "t":
			if ts != "" {
				return "", "", nil, false
			}
			ts = v
		case "h":
			if digest != "" || len(v) != 2*sha256.Size {
				return "", "", nil, false
			}
			digest = v
		case "v1":
			if mac, ok := decodeHex32(v); ok {
				sigs = append(sigs, mac[:])
			}
		}
	}
	return ts, digest, sigs, ts != "" && digest != "" && len(sigs) > 0
}

// canonicalDigest is the hex SHA-256 of the canonical form of h's headers
// named (lower case, sorted) in names.
func canonicalDigest(h http.Header, names []string) string {
	return digestLines(headerLines(h), names)
}

// headerLines are h's values by lower-case name, every spelling of a name
// merged in a fixed order (the sorted spellings'): what the digest covers and
// RelayListedHeaders returns.
func headerLines(h http.Header) map[string][]string {
	byName := make(map[string][]string, len(h))
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys) // several spellings of one name: a fixed order
	for _, k := range keys {
		lk := strings.ToLower(k)
		byName[lk] = append(byName[lk], h[k]...)
	}
	return byName
}

// digestLines is the hex SHA-256 of the canonical lines of names (lower
// case, sorted) in byName (headerLines).
func digestLines(byName map[string][]string, names []string) string {
	sum := sha256.New()
	for _, name := range names {
		for _, v := range byName[name] {
			sum.Write([]byte(name))
			sum.Write([]byte{':'})
			sum.Write([]byte(strings.Trim(v, " \t")))
			sum.Write([]byte{'\n'})
		}
	}
	return hex.EncodeToString(sum.Sum(nil))
}

func relayMAC(secret, ts, source, digest, requestURI string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + source + "." + digest + "." + requestURI + "\n"))
	m.Write(body)
	return m.Sum(nil)
}
