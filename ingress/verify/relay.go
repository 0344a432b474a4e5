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
// forwarded and signed. Headers added on the way (a proxy's X-Forwarded-For)
// are not listed and not covered; removing, changing, reordering or adding a
// value of a listed header breaks the signature. The canonical headers are,
// for each listed name in order and for each of its values in the order
// received, the line
//
//	<name> ":" <value without surrounding spaces and tabs> "\n"
//
// which is unambiguous because a name cannot hold ':' and a value cannot hold
// a newline. Each v1 is HMAC-SHA256, keyed with one relay secret, over
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

// RelayForwardHeaders returns the request headers a relay forwards: h without
// hop-by-hop headers (and those named in Connection), Host, Content-Length,
// and any Inlet-Relay-* header a sender put there.
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
	return StripRelay(out)
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
// relay received and forwarded. A header added on the way from the relay
// (a proxy's X-Forwarded-For, or an event id header put there by whoever sits
// on that path) is not covered by the signature and is left out, so it can
// never reach a provider verifier or the stored row.
func RelayListedHeaders(h http.Header) http.Header {
	out := http.Header{}
	list := h.Get(RelayHeaderHeaders)
	if list == "" {
		return out
	}
	for name := range strings.SplitSeq(list, ",") {
		if isRelayHeader(name) {
			continue
		}
		if vs := h.Values(name); len(vs) > 0 {
			out[http.CanonicalHeaderKey(name)] = slices.Clone(vs)
		}
	}
	return out
}

func isRelayHeader(name string) bool {
	return len(name) >= len(RelayHeaderPrefix) && strings.EqualFold(name[:len(RelayHeaderPrefix)], RelayHeaderPrefix)
}

// SignRelay returns the Inlet-Relay-Headers and Inlet-Relay-Signature headers
// for forwarding body with header (as RelayForwardHeaders returns it) to
// requestURI of source at time now, one v1 per secret.
func SignRelay(secrets []string, now time.Time, source, requestURI string, header http.Header, body []byte) http.Header {
	names := make([]string, 0, len(header))
	for k := range header {
		if !isRelayHeader(k) {
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
// direction, and the headers listed in Inlet-Relay-Headers must be, as
// received, the ones signed. It returns the index of the matching secret.
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
	var names []string
	if list := header.Get(RelayHeaderHeaders); list != "" {
		names = strings.Split(list, ",")
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		return idx, fmt.Errorf("%w: %s is not a sorted list of distinct names", ErrRelayHeadersMismatch, RelayHeaderHeaders)
	}
	if got := canonicalDigest(header, names); !hmac.Equal([]byte(got), []byte(digest)) {
		return idx, ErrRelayHeadersMismatch
	}
	return idx, nil
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
