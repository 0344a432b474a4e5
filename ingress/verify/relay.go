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
// signature. The relay neither forwards nor signs the headers a proxy in
// front of it adds about that hop (X-Forwarded-*, Forwarded, X-Real-Ip,
// Via): a proxy in front of the ingress may add or append to them. The
// canonical headers are, for each listed name in order and for each of its
// values in the order received, the line
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

// proxyHeaders describe the hop into the relay, not the provider's request:
// a TLS-terminating proxy in front of the relay sets them, and one in front
// of the ingress sets or appends to them again (nginx's
// $proxy_add_x_forwarded_for, an AWS ALB, httputil.ReverseProxy). Signed,
// they would make the ingress refuse every delivery behind such proxies
// (relay_headers_mismatch), so a relay treats them as hop-by-hop; so does
// every X-Forwarded-* header (proxyHeaderPrefix). No provider signs them.
//
// X-Amzn-Trace-Id too: an AWS load balancer in front of the relay sets it
// (Root=…), and one in front of the ingress adds its own Self=… field to it.
var proxyHeaders = []string{"Forwarded", "X-Real-Ip", "Via", "X-Amzn-Trace-Id"}

const proxyHeaderPrefix = "X-Forwarded-"

// RelayForwardHeaders returns the request headers a relay forwards: h without
// hop-by-hop headers (and those named in Connection), Host, Content-Length,
// the headers a proxy adds about the hop into the relay (X-Forwarded-*,
// Forwarded, X-Real-Ip, Via, X-Amzn-Trace-Id), and any Inlet-Relay-* header a sender put
// there.
func RelayForwardHeaders(h http.Header) http.Header {
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
		if isProxyHeader(k) {
			delete(out, k)
		}
	}
	return StripRelay(out)
}

// isProxyHeader reports whether name, in any case, is one of proxyHeaders or
// starts with proxyHeaderPrefix.
func isProxyHeader(name string) bool {
	if len(name) >= len(proxyHeaderPrefix) && strings.EqualFold(name[:len(proxyHeaderPrefix)], proxyHeaderPrefix) {
		return true
	}
	return slices.ContainsFunc(proxyHeaders, func(p string) bool { return strings.EqualFold(p, name) })
}

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
