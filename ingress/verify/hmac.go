package verify

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // G505: HMAC-SHA1 is what some providers sign with (hmac scheme algorithm: sha1)
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Placeholders of HMACConfig.SignedPayload.
const (
	placeholderBody      = "{body}"
	placeholderTimestamp = "{timestamp}"
	placeholderURL       = "{url}"
	placeholderMethod    = "{method}"
	placeholderHeader    = "{header:" // {header:Name}
	placeholderJSON      = "{json:"   // {json:dotted.path}
)

// Timestamp formats of HMACConfig.TimestampFormat.
const (
	timestampUnix    = "unix"
	timestampUnixMS  = "unix_ms"
	timestampRFC3339 = "rfc3339"
)

var hmacAlgorithms = map[string]func() hash.Hash{
	"sha1":   sha1.New,
	"sha256": sha256.New,
	"sha512": sha512.New,
}

func (c HMACConfig) withDefaults() HMACConfig {
	if c.Algorithm == "" {
		c.Algorithm = "sha256"
	}
	if c.Encoding == "" {
		c.Encoding = "hex"
	}
	if c.TimestampFormat == "" {
		c.TimestampFormat = timestampUnix
	}
	if c.SignedPayload == "" {
		c.SignedPayload = placeholderBody
		if c.TimestampHeader != "" || c.TimestampKey != "" {
			c.SignedPayload = placeholderTimestamp + "." + placeholderBody
		}
	}
	return c
}

// validate checks c after withDefaults.
func (c HMACConfig) validate() error {
	switch {
	case c.Header == "" && c.SignatureJSON == "":
		return errors.New("hmac.header: required for type hmac (the header that carries the signature)")
	case c.Header != "" && c.SignatureJSON != "":
		return errors.New("hmac.header and hmac.signature_json: set one (where the signature is)")
	case c.Header != "" && !validHeaderName(c.Header):
		return fmt.Errorf("hmac.header: %q is not a valid header name", c.Header)
	}
	for i, h := range c.AltHeaders {
		if !validHeaderName(h) {
			return fmt.Errorf("hmac.alt_headers[%d]: %q is not a valid header name", i, h)
		}
		if c.Header == "" {
			return errors.New("hmac.alt_headers: needs hmac.header")
		}
	}
	if err := validPath("hmac.signature_json", c.SignatureJSON); err != nil {
		return err
	}
	if hmacAlgorithms[c.Algorithm] == nil {
		return fmt.Errorf("hmac.algorithm: %q is not sha1, sha256 or sha512", c.Algorithm)
	}
	if c.Encoding != "hex" && c.Encoding != "base64" {
		return fmt.Errorf("hmac.encoding: %q is not hex or base64", c.Encoding)
	}
	if (c.SignatureKey == "") != (c.Separator == "") {
		return errors.New("hmac.separator and hmac.signature_key: set both (a header of key=value elements) or neither")
	}
	if c.TimestampKey != "" && c.SignatureKey == "" {
		return errors.New("hmac.timestamp_key: needs hmac.signature_key and hmac.separator (it names an element of the signature header)")
	}
	sources := 0
	for _, s := range []string{c.TimestampHeader, c.TimestampJSON, c.TimestampKey} {
		if s != "" {
			sources++
		}
	}
	if sources > 1 {
		return errors.New("hmac.timestamp_header, hmac.timestamp_json and hmac.timestamp_key: set at most one")
	}
	if c.TimestampHeader != "" && !validHeaderName(c.TimestampHeader) {
		return fmt.Errorf("hmac.timestamp_header: %q is not a valid header name", c.TimestampHeader)
	}
	if err := validPath("hmac.timestamp_json", c.TimestampJSON); err != nil {
		return err
	}
	switch c.TimestampFormat {
	case timestampUnix, timestampUnixMS, timestampRFC3339:
	default:
		return fmt.Errorf("hmac.timestamp_format: %q is not unix, unix_ms or rfc3339", c.TimestampFormat)
	}
	segs, err := parseTemplate(c.SignedPayload)
	if err != nil {
		return fmt.Errorf("hmac.signed_payload: %q: %w", c.SignedPayload, err)
	}
	var bodies, stamps int
	for _, s := range segs {
		switch s.kind {
		case segBody:
			bodies++
		case segTimestamp:
			stamps++
		}
	}
	if bodies != 1 && !(bodies == 0 && c.bodyUnsigned) {
		return fmt.Errorf("hmac.signed_payload: %q must contain %s exactly once", c.SignedPayload, placeholderBody)
	}
	switch {
	case sources == 0 && stamps > 0:
		return fmt.Errorf("hmac.signed_payload: %q uses %s but no timestamp is configured (hmac.timestamp_header, hmac.timestamp_json or hmac.timestamp_key)", c.SignedPayload, placeholderTimestamp)
	case stamps > 1:
		return fmt.Errorf("hmac.signed_payload: %q must contain %s at most once", c.SignedPayload, placeholderTimestamp)
	case (c.TimestampHeader != "" || c.TimestampKey != "") && stamps != 1:
		// A timestamp in the body is signed with the body; one in a header
		// must be in the signed string, or it could be changed freely.
		return fmt.Errorf("hmac.signed_payload: %q must contain %s when the timestamp is in a header, or the timestamp is not signed", c.SignedPayload, placeholderTimestamp)
	}
	return nil
}

func validPath(field, path string) error {
	if path == "" {
		return nil
	}
	for _, seg := range strings.Split(path, ".") {
		if seg == "" {
			return fmt.Errorf("%s: %q has an empty segment (write a dotted path like data.id)", field, path)
		}
	}
	return nil
}

// segKind is one part of a signed string.
type segKind int

const (
	segLiteral segKind = iota
	segBody
	segTimestamp
	segURL
	segMethod
	segHeader
	segJSON
)

type segment struct {
	kind segKind
	text string   // the literal, or the canonical header name
	path []string // segJSON
}

// parseTemplate splits a SignedPayload template into its segments.
func parseTemplate(tmpl string) ([]segment, error) {
	var segs []segment
	for rest := tmpl; rest != ""; {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			segs = append(segs, segment{kind: segLiteral, text: rest})
			break
		}
		if open > 0 {
			segs = append(segs, segment{kind: segLiteral, text: rest[:open]})
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("unclosed { at byte %d", len(tmpl)-len(rest)+open)
		}
		ph := rest[open : open+end+1]
		rest = rest[open+end+1:]
		switch {
		case ph == placeholderBody:
			segs = append(segs, segment{kind: segBody})
		case ph == placeholderTimestamp:
			segs = append(segs, segment{kind: segTimestamp})
		case ph == placeholderURL:
			segs = append(segs, segment{kind: segURL})
		case ph == placeholderMethod:
			segs = append(segs, segment{kind: segMethod})
		case strings.HasPrefix(ph, placeholderHeader):
			name := strings.TrimSuffix(strings.TrimPrefix(ph, placeholderHeader), "}")
			if !validHeaderName(name) {
				return nil, fmt.Errorf("%s: %q is not a valid header name", ph, name)
			}
			segs = append(segs, segment{kind: segHeader, text: http.CanonicalHeaderKey(name)})
		case strings.HasPrefix(ph, placeholderJSON):
			path := strings.TrimSuffix(strings.TrimPrefix(ph, placeholderJSON), "}")
			if err := validPath(ph, path); err != nil {
				return nil, err
			}
			segs = append(segs, segment{kind: segJSON, path: strings.Split(path, ".")})
		default:
			return nil, fmt.Errorf("unknown placeholder %s (known: {body}, {timestamp}, {url}, {method}, {header:Name}, {json:path})", ph)
		}
	}
	return segs, nil
}

// hmacVerifier implements the generic scheme HMACConfig describes, which
// is also the scheme of most presets (see presets.go).
type hmacVerifier struct {
	scheme    string // the type name, for errors
	cfg       HMACConfig
	headers   []string   // canonical signature headers, Header first
	sigPath   []string   // SignatureJSON split
	altSigs   [][]string // altSignatureJSON split
	tsHeader  string     // canonical, "" unless TimestampHeader
	tsPath    []string   // TimestampJSON split
	segs      []segment
	size      int // MAC length of the algorithm
	keys      []*hashKey
	tolerance time.Duration
	publicURL string // Config.PublicURL without fragment, "" when unset
	ident     *identity

	// bodyPaths are the body values read before the MAC (the signature
	// paths, the timestamp path, the {json:} segments), looked up together
	// (bodyFields); sigAt, tsAt and segAt[i] (for segs[i]) index them, -1
	// for none.
	bodyPaths [][]string
	sigAt     []int
	tsAt      int
	segAt     []int
}

func newHMAC(cfg Config, ident *identity) *hmacVerifier {
	c := cfg.HMAC
	alg := hmacAlgorithms[c.Algorithm]
	segs, _ := parseTemplate(c.SignedPayload) // validated
	v := &hmacVerifier{
		scheme:    cmpOr(cfg.Type, typeHMAC),
		cfg:       c,
		segs:      segs,
		size:      alg().Size(),
		tolerance: cfg.Tolerance,
		ident:     ident,
	}
	v.publicURL, _, _ = strings.Cut(cfg.PublicURL, "#")
	if c.Header != "" {
		v.headers = append(v.headers, http.CanonicalHeaderKey(c.Header))
	}
	for _, h := range c.AltHeaders {
		v.headers = append(v.headers, http.CanonicalHeaderKey(h))
	}
	if c.SignatureJSON != "" {
		v.sigPath = strings.Split(c.SignatureJSON, ".")
		for _, p := range c.altSignatureJSON {
			v.altSigs = append(v.altSigs, strings.Split(p, "."))
		}
	}
	if c.TimestampHeader != "" {
		v.tsHeader = http.CanonicalHeaderKey(c.TimestampHeader)
	}
	if c.TimestampJSON != "" {
		v.tsPath = strings.Split(c.TimestampJSON, ".")
	}
	at := func(path []string) int {
		v.bodyPaths = append(v.bodyPaths, path)
		return len(v.bodyPaths) - 1
	}
	if v.sigPath != nil {
		for _, path := range append([][]string{v.sigPath}, v.altSigs...) {
			v.sigAt = append(v.sigAt, at(path))
		}
	}
	v.tsAt = -1
	if v.tsPath != nil {
		v.tsAt = at(v.tsPath)
	}
	v.segAt = make([]int, len(segs))
	for i, s := range segs {
		v.segAt[i] = -1
		if s.kind == segJSON {
			v.segAt[i] = at(s.path)
		}
	}
	for _, s := range cfg.Secrets {
		v.keys = append(v.keys, newHashKey(alg, []byte(s)))
	}
	return v
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// bodyFields are the values of v.bodyPaths in one request's body, read
// in one pass (lookupJSONPaths) when first asked for: a body that carries
// its own signature (Mailgun's signature, parent-signature, timestamp and
// token) is scanned once, and a request refused on its headers not at all.
// The body is anyone's until the MAC matches.
type bodyFields struct {
	paths [][]string
	body  []byte
	vals  []jsonValue // nil until read
}

func (v *hmacVerifier) bodyFields(body []byte) *bodyFields {
	return &bodyFields{paths: v.bodyPaths, body: body}
}

// get returns the value of paths[i], as lookupJSON would.
func (f *bodyFields) get(i int) (string, bool) {
	if f.vals == nil {
		f.vals = make([]jsonValue, len(f.paths))
		lookupJSONPaths(f.body, f.paths, f.vals)
	}
	return f.vals[i].s, f.vals[i].ok
}

// signatures returns the encoded signatures the request carries and the
// timestamp text of a key=value signature header (TimestampKey).
func (v *hmacVerifier) signatures(req *Request, body *bodyFields) (sigs []string, ts string, err error) {
	if v.sigPath != nil {
		for _, at := range v.sigAt {
			if s, ok := body.get(at); ok && s != "" {
				sigs = append(sigs, s)
			}
		}
		if len(sigs) == 0 {
			return nil, "", fmt.Errorf("%s: %w: no signature at %s in the body", v.scheme, ErrSignatureMissing, v.cfg.SignatureJSON)
		}
		return sigs, "", nil
	}
	for _, name := range v.headers {
		header := req.Header.Get(name)
		if header == "" {
			continue
		}
		if v.cfg.SignatureKey == "" {
			encoded, ok := strings.CutPrefix(header, v.cfg.Prefix)
			if !ok {
				return nil, "", fmt.Errorf("%s: %w: %s lacks the prefix %q", v.scheme, ErrSignatureMalformed, name, v.cfg.Prefix)
			}
			sigs = append(sigs, encoded)
			continue
		}
		header = strings.TrimPrefix(header, v.cfg.Prefix)
		for rest := header; rest != ""; {
			var elem string
			elem, rest, _ = strings.Cut(rest, v.cfg.Separator)
			key, val, _ := strings.Cut(strings.TrimSpace(elem), "=")
			switch {
			case key == v.cfg.SignatureKey:
				sigs = append(sigs, val)
			case key == v.cfg.TimestampKey && v.cfg.TimestampKey != "":
				if ts != "" && ts != val {
					return nil, "", fmt.Errorf("%s: %w: %s has two %s elements", v.scheme, ErrSignatureMalformed, name, v.cfg.TimestampKey)
				}
				ts = val
			}
		}
		if len(sigs) == 0 {
			return nil, "", fmt.Errorf("%s: %w: %s has no %s element", v.scheme, ErrSignatureMalformed, name, v.cfg.SignatureKey)
		}
	}
	if len(sigs) == 0 {
		return nil, "", fmt.Errorf("%s: %w: no %s header", v.scheme, ErrSignatureMissing, strings.Join(v.headers, " or "))
	}
	if v.cfg.TimestampKey != "" && ts == "" {
		return nil, "", fmt.Errorf("%s: %w: the signature header has no %s element", v.scheme, ErrSignatureMissing, v.cfg.TimestampKey)
	}
	return sigs, ts, nil
}

// timestamp returns the signed timestamp's text and time, or "" when the
// scheme has none.
func (v *hmacVerifier) timestamp(req *Request, fromSig string, body *bodyFields) (string, time.Time, error) {
	var ts, where string
	switch {
	case v.tsHeader != "":
		ts, where = req.Header.Get(v.tsHeader), v.tsHeader+" header"
	case v.tsPath != nil:
		ts, _ = body.get(v.tsAt)
		where = v.cfg.TimestampJSON + " in the body"
	case v.cfg.TimestampKey != "":
		ts, where = fromSig, v.cfg.TimestampKey+" element"
	default:
		return "", time.Time{}, nil
	}
	if ts == "" {
		return "", time.Time{}, fmt.Errorf("%s: %w: no timestamp (%s)", v.scheme, ErrSignatureMissing, where)
	}
	t, ok := parseTimestamp(v.cfg.TimestampFormat, ts)
	if !ok {
		return "", time.Time{}, fmt.Errorf("%s: %w: %s is not a %s timestamp", v.scheme, ErrSignatureMalformed, where, v.cfg.TimestampFormat)
	}
	return ts, t, nil
}

// parseTimestamp reads a signed timestamp in format. Unix forms must be
// canonical (digits, no sign, no leading zeros), so the text signed and
// the time checked are the same.
func parseTimestamp(format, s string) (time.Time, bool) {
	switch format {
	case timestampUnixMS:
		n, ok := parseUnix(s)
		return time.UnixMilli(n), ok
	case timestampRFC3339:
		if len(s) > 64 {
			return time.Time{}, false
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		return t, err == nil
	default:
		n, ok := parseUnix(s)
		return time.Unix(n, 0), ok
	}
}

// signedParts returns the signed string's parts for req, in order.
func (v *hmacVerifier) signedParts(req *Request, ts string, body *bodyFields) ([][]byte, error) {
	parts := make([][]byte, 0, len(v.segs))
	for i, s := range v.segs {
		switch s.kind {
		case segLiteral:
			parts = append(parts, []byte(s.text))
		case segBody:
			parts = append(parts, req.Body)
		case segTimestamp:
			parts = append(parts, []byte(ts))
		case segURL:
			u := v.signedURL(req.URL)
			if u == "" {
				return nil, fmt.Errorf("%s: %w: no request URL to check the signature against (set public_url)", v.scheme, ErrSignatureMismatch)
			}
			if v.cfg.urlUnescape != nil {
				u = v.cfg.urlUnescape.Replace(u)
			}
			parts = append(parts, []byte(u))
		case segMethod:
			parts = append(parts, []byte(cmpOr(req.Method, http.MethodPost)))
		case segHeader:
			val := req.Header.Get(s.text)
			if val == "" {
				return nil, fmt.Errorf("%s: %w: no %s header (it is signed)", v.scheme, ErrSignatureMissing, s.text)
			}
			parts = append(parts, []byte(val))
		case segJSON:
			val, ok := body.get(v.segAt[i])
			if !ok {
				return nil, fmt.Errorf("%s: %w: no %s in the body (it is signed)", v.scheme, ErrSignatureMissing, strings.Join(s.path, "."))
			}
			parts = append(parts, []byte(val))
		}
	}
	return parts, nil
}

// signedURL is the URL the provider signed (see publicSignedURL).
func (v *hmacVerifier) signedURL(reqURL string) string {
	return publicSignedURL(v.publicURL, reqURL)
}

// publicSignedURL is the URL a provider that signs the URL it calls
// signed: the request URL as received, or, behind a proxy, the configured
// public URL followed by the request's query string when the public URL
// has none of its own. Fragments are never sent, so never signed.
func publicSignedURL(public, reqURL string) string {
	reqURL, _, _ = strings.Cut(reqURL, "#")
	if public == "" {
		return reqURL
	}
	if strings.Contains(public, "?") {
		return public
	}
	if _, query, ok := strings.Cut(reqURL, "?"); ok {
		return public + "?" + query
	}
	return public
}

func (v *hmacVerifier) Verify(req *Request) (Result, error) {
	index, err := v.checkSignature(req)
	if err != nil {
		return Result{}, err
	}
	return v.checkedEvent(req, index)
}

// checkedEvent is the event of req, whose signature checkSignature has
// accepted with secret index (see checkedEventer).
func (v *hmacVerifier) checkedEvent(req *Request, index int) (Result, error) {
	id, typ, err := v.ident.resolve(v.scheme, req, nil, func(bool) (string, string, error) {
		return syntheticID(req.Body), "", nil
	})
	if err != nil {
		return Result{}, err
	}
	return Result{EventID: id, EventType: typ, SecretIndex: index}, nil
}

// checkSignature checks req's signature and timestamp and returns the index
// of the secret that matched.
func (v *hmacVerifier) checkSignature(req *Request) (int, error) {
	body := v.bodyFields(req.Body)
	encoded, elemTS, err := v.signatures(req, body)
	if err != nil {
		return -1, err
	}
	var bufs [4][sha512.Size + 2]byte
	sigs := make([][]byte, 0, len(encoded))
	for i, e := range encoded {
		var dst []byte
		if i < len(bufs) {
			dst = bufs[i][:0]
		}
		if sig, ok := v.decode(dst, e); ok {
			sigs = append(sigs, sig)
		}
	}
	if len(sigs) == 0 {
		return -1, fmt.Errorf("%s: %w: the signature is not the %s of a %s MAC", v.scheme, ErrSignatureMalformed, v.cfg.Encoding, v.cfg.Algorithm)
	}
	ts, at, err := v.timestamp(req, elemTS, body)
	if err != nil {
		return -1, err
	}
	parts, err := v.signedParts(req, ts, body)
	if err != nil {
		return -1, err
	}
	var macBuf [sha512.Size]byte
	for i, k := range v.keys {
		mac := k.sum(macBuf[:0], parts...)
		match := false
		for _, sig := range sigs {
			match = hmac.Equal(sig, mac) || match
		}
		if !match {
			continue
		}
		if ts != "" && !req.IgnoreTolerance {
			if err := checkSkewTime(v.scheme, at, req.now(), v.tolerance); err != nil {
				return -1, err
			}
		}
		return i, nil
	}
	return -1, fmt.Errorf("%s: %w", v.scheme, ErrSignatureMismatch)
}

// decode appends the MAC encoded in s to dst; only the canonical length of
// the algorithm's MAC is accepted.
func (v *hmacVerifier) decode(dst []byte, s string) ([]byte, bool) {
	switch v.cfg.Encoding {
	case "hex":
		if len(s) != hex.EncodedLen(v.size) {
			return nil, false
		}
		for i := 0; i < len(s); i += 2 {
			hi, ok1 := fromHex(s[i])
			lo, ok2 := fromHex(s[i+1])
			if !ok1 || !ok2 {
				return nil, false
			}
			dst = append(dst, hi<<4|lo)
		}
		return dst, true
	default: // base64
		if len(s) != base64.StdEncoding.EncodedLen(v.size) || strings.ContainsAny(s, "\r\n") {
			return nil, false
		}
		if cap(dst) < base64.StdEncoding.DecodedLen(len(s)) {
			dst = make([]byte, 0, base64.StdEncoding.DecodedLen(len(s)))
		}
		buf := dst[:cap(dst)][:base64.StdEncoding.DecodedLen(len(s))]
		n, err := standardSigEncoding.Decode(buf, []byte(s))
		if err != nil || n != v.size {
			return nil, false
		}
		return buf[:n], true
	}
}

// SignHMAC returns the headers a sender using cfg's generic HMAC scheme
// (cfg.HMAC, defaults applied) would send for body at time t when signing
// with secret: the signature header, and the timestamp header when one is
// configured. A template that signs other headers ({header:Name}) or a
// value in the body ({json:path}, a signature_json) needs [SignHMACRequest].
func SignHMAC(cfg Config, secret string, t time.Time, body []byte) (http.Header, error) {
	h := http.Header{}
	if _, err := SignHMACRequest(cfg, secret, t, h, body, "", ""); err != nil {
		return nil, err
	}
	return h, nil
}

// SignHMACRequest signs a request with cfg's HMAC template (cfg.HMAC, or
// the preset of cfg.Type) and secret at time t: it sets the signature and
// timestamp headers in h, which must already hold every other header the
// template signs, and returns the encoded signature (for a signature_json
// scheme, which the caller puts into the body itself). requestURL and
// method are what {url} and {method} sign.
func SignHMACRequest(cfg Config, secret string, t time.Time, h http.Header, body []byte, requestURL, method string) (string, error) {
	if p, ok := presets[cfg.Type]; ok && p.scheme == typeHMAC {
		cfg = p.apply(cfg)
	}
	c := cfg.HMAC.withDefaults()
	if err := c.validate(); err != nil {
		return "", err
	}
	if secret == "" {
		return "", errors.New("secret: must not be empty")
	}
	cfg.HMAC, cfg.Secrets = c, []string{secret}
	v := newHMAC(cfg, &identity{})
	var ts string
	switch c.TimestampFormat {
	case timestampUnixMS:
		ts = strconv.FormatInt(t.UnixMilli(), 10)
	case timestampRFC3339:
		ts = t.UTC().Format(time.RFC3339Nano)
	default:
		ts = strconv.FormatInt(t.Unix(), 10)
	}
	if c.TimestampHeader != "" {
		h.Set(c.TimestampHeader, ts)
	}
	fields := v.bodyFields(body)
	if c.TimestampJSON != "" {
		got, ok := fields.get(v.tsAt)
		if !ok {
			return "", fmt.Errorf("body: no timestamp at %s to sign", c.TimestampJSON)
		}
		ts = got
	}
	parts, err := v.signedParts(&Request{Header: h, Body: body, URL: requestURL, Method: method}, ts, fields)
	if err != nil {
		return "", err
	}
	mac := v.keys[0].sum(nil, parts...)
	enc := hex.EncodeToString(mac)
	if c.Encoding == "base64" {
		enc = base64.StdEncoding.EncodeToString(mac)
	}
	switch {
	case c.SignatureJSON != "":
	case c.SignatureKey != "" && c.TimestampKey != "":
		h.Set(c.Header, c.Prefix+c.TimestampKey+"="+ts+c.Separator+c.SignatureKey+"="+enc)
	case c.SignatureKey != "":
		h.Set(c.Header, c.Prefix+c.SignatureKey+"="+enc)
	default:
		h.Set(c.Header, c.Prefix+enc)
	}
	return enc, nil
}
