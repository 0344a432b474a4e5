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
	if c.SignedPayload == "" {
		c.SignedPayload = placeholderBody
		if c.TimestampHeader != "" {
			c.SignedPayload = placeholderTimestamp + "." + placeholderBody
		}
	}
	return c
}

// validate checks c after withDefaults.
func (c HMACConfig) validate() error {
	if c.Header == "" {
		return errors.New("hmac.header: required for type hmac (the header that carries the signature)")
	}
	if !validHeaderName(c.Header) {
		return fmt.Errorf("hmac.header: %q is not a valid header name", c.Header)
	}
	if hmacAlgorithms[c.Algorithm] == nil {
		return fmt.Errorf("hmac.algorithm: %q is not sha1, sha256 or sha512", c.Algorithm)
	}
	if c.Encoding != "hex" && c.Encoding != "base64" {
		return fmt.Errorf("hmac.encoding: %q is not hex or base64", c.Encoding)
	}
	if c.TimestampHeader != "" && !validHeaderName(c.TimestampHeader) {
		return fmt.Errorf("hmac.timestamp_header: %q is not a valid header name", c.TimestampHeader)
	}
	if n := strings.Count(c.SignedPayload, placeholderBody); n != 1 {
		return fmt.Errorf("hmac.signed_payload: %q must contain %s exactly once", c.SignedPayload, placeholderBody)
	}
	switch n := strings.Count(c.SignedPayload, placeholderTimestamp); {
	case c.TimestampHeader == "" && n > 0:
		return fmt.Errorf("hmac.signed_payload: %q uses %s but hmac.timestamp_header is not set", c.SignedPayload, placeholderTimestamp)
	case c.TimestampHeader != "" && n != 1:
		return fmt.Errorf("hmac.signed_payload: %q must contain %s exactly once when hmac.timestamp_header is set, or the timestamp is not signed", c.SignedPayload, placeholderTimestamp)
	}
	return nil
}

// hmacVerifier implements the generic scheme HMACConfig describes.
type hmacVerifier struct {
	cfg       HMACConfig
	header    string // canonical
	tsHeader  string // canonical, "" without a timestamp
	before    string // SignedPayload before {body}, {timestamp} still in it
	after     string // SignedPayload after {body}
	size      int    // MAC length of the algorithm
	keys      []*hashKey
	tolerance time.Duration
	ident     *identity
}

func newHMAC(cfg Config, ident *identity) *hmacVerifier {
	c := cfg.HMAC
	alg := hmacAlgorithms[c.Algorithm]
	before, after, _ := strings.Cut(c.SignedPayload, placeholderBody)
	v := &hmacVerifier{
		cfg:       c,
		header:    http.CanonicalHeaderKey(c.Header),
		before:    before,
		after:     after,
		size:      alg().Size(),
		tolerance: cfg.Tolerance,
		ident:     ident,
	}
	if c.TimestampHeader != "" {
		v.tsHeader = http.CanonicalHeaderKey(c.TimestampHeader)
	}
	for _, s := range cfg.Secrets {
		v.keys = append(v.keys, newHashKey(alg, []byte(s)))
	}
	return v
}

func (v *hmacVerifier) Verify(req *Request) (Result, error) {
	header := req.Header.Get(v.header)
	if header == "" {
		return Result{}, fmt.Errorf("hmac: %w: no %s header", ErrSignatureMissing, v.header)
	}
	var ts string
	var unix int64
	if v.tsHeader != "" {
		if ts = req.Header.Get(v.tsHeader); ts == "" {
			return Result{}, fmt.Errorf("hmac: %w: no %s header", ErrSignatureMissing, v.tsHeader)
		}
		var ok bool
		if unix, ok = parseUnix(ts); !ok {
			return Result{}, fmt.Errorf("hmac: %w: %s is not a Unix timestamp", ErrSignatureMalformed, v.tsHeader)
		}
	}
	encoded, ok := strings.CutPrefix(header, v.cfg.Prefix)
	if !ok {
		return Result{}, fmt.Errorf("hmac: %w: %s lacks the configured prefix", ErrSignatureMalformed, v.header)
	}
	var sigBuf [sha512.Size + 2]byte
	sig, ok := v.decode(sigBuf[:0], encoded)
	if !ok {
		return Result{}, fmt.Errorf("hmac: %w: %s is not the %s of a %s MAC", ErrSignatureMalformed, v.header, v.cfg.Encoding, v.cfg.Algorithm)
	}

	before, after := v.signedAround(ts)
	var macBuf [sha512.Size]byte
	index := -1
	for i, k := range v.keys {
		if hmac.Equal(sig, k.sum(macBuf[:0], before, req.Body, after)) {
			index = i
			break
		}
	}
	if index < 0 {
		return Result{}, fmt.Errorf("hmac: %w", ErrSignatureMismatch)
	}
	if v.tsHeader != "" && !req.IgnoreTolerance {
		if err := checkSkew("hmac", unix, req.now(), v.tolerance); err != nil {
			return Result{}, err
		}
	}
	id, typ, err := v.ident.resolve("hmac", req, nil, func(bool) (string, string, error) {
		return syntheticID(req.Body), "", nil
	})
	if err != nil {
		return Result{}, err
	}
	return Result{EventID: id, EventType: typ, SecretIndex: index}, nil
}

// signedAround returns the signed bytes before and after the body.
func (v *hmacVerifier) signedAround(ts string) (before, after []byte) {
	if v.tsHeader == "" {
		return []byte(v.before), []byte(v.after)
	}
	return []byte(strings.Replace(v.before, placeholderTimestamp, ts, 1)),
		[]byte(strings.Replace(v.after, placeholderTimestamp, ts, 1))
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
// configured.
func SignHMAC(cfg Config, secret string, t time.Time, body []byte) (http.Header, error) {
	c := cfg.HMAC.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if secret == "" {
		return nil, errors.New("secret: must not be empty")
	}
	v := newHMAC(Config{HMAC: c, Secrets: []string{secret}}, &identity{})
	ts := strconv.FormatInt(t.Unix(), 10)
	before, after := v.signedAround(ts)
	mac := v.keys[0].sum(nil, before, body, after)
	enc := hex.EncodeToString(mac)
	if c.Encoding == "base64" {
		enc = base64.StdEncoding.EncodeToString(mac)
	}
	h := make(http.Header, 2)
	h.Set(c.Header, c.Prefix+enc)
	if c.TimestampHeader != "" {
		h.Set(c.TimestampHeader, ts)
	}
	return h, nil
}
