package verify

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Request is what a Verifier needs from an incoming webhook.
type Request struct {
	// Header holds the request headers as received.
	Header http.Header
	// Body is the exact raw body. Signatures are computed over these bytes;
	// never pass a re-encoded body.
	Body []byte
	// URL is the full public URL of the request. No current scheme signs it;
	// it may be empty.
	URL string
	// Now is the time timestamps are checked against. Defaults to time.Now().
	Now time.Time
	// IgnoreTolerance skips the timestamp window check but still checks the
	// signature. Set it only when re-verifying a stored event.
	IgnoreTolerance bool
}

// Result describes a verified event.
type Result struct {
	// EventID is the provider's unique event id; together with the source name
	// it is the dedupe key.
	EventID string
	// EventType is the provider's event type, "" if the provider has none.
	EventType string
	// SecretIndex is the index into Config.Secrets of the secret that matched.
	SecretIndex int
}

// Verifier checks one request against the secrets of one configured source.
// Implementations are safe for concurrent use.
type Verifier interface {
	Verify(req *Request) (Result, error)
}

// Sentinel errors returned (wrapped) by Verify. Branch on them with errors.Is.
var (
	// ErrSignatureMissing means a required signature, timestamp or id header
	// is absent. Answer 401.
	ErrSignatureMissing = errors.New("signature missing")
	// ErrSignatureMalformed means a signature header is present but cannot be
	// parsed (bad hex or base64, bad timestamp, no usable signature). Answer
	// 401.
	ErrSignatureMalformed = errors.New("signature malformed")
	// ErrSignatureMismatch means no configured secret produces any of the
	// signatures sent. Answer 401.
	ErrSignatureMismatch = errors.New("signature mismatch")
	// ErrTimestampOutsideTolerance means the signature is valid but its
	// timestamp is too old or too far in the future. Answer 401.
	ErrTimestampOutsideTolerance = errors.New("timestamp outside tolerance")
	// ErrMalformedPayload means the signature is valid but the event id cannot
	// be read from the verified body or headers. Answer 400.
	ErrMalformedPayload = errors.New("malformed payload")
)

// Reason maps err to a short stable label for logs and metrics:
// "signature_missing", "signature_malformed", "signature_mismatch",
// "timestamp_outside_tolerance", "malformed_payload", or "unknown" for any
// other error. It returns "" for a nil error.
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrSignatureMissing):
		return "signature_missing"
	case errors.Is(err, ErrSignatureMalformed):
		return "signature_malformed"
	case errors.Is(err, ErrSignatureMismatch):
		return "signature_mismatch"
	case errors.Is(err, ErrTimestampOutsideTolerance):
		return "timestamp_outside_tolerance"
	case errors.Is(err, ErrMalformedPayload):
		return "malformed_payload"
	default:
		return "unknown"
	}
}

// Scheme names accepted in Config.Type.
const (
	typeGitHub           = "github"
	typeStandardWebhooks = "standard-webhooks"
	typeStripe           = "stripe"
	typeSvix             = "svix" // alias of typeStandardWebhooks
)

// defaultTolerance is the timestamp window of the schemes that sign a
// timestamp (Stripe and Standard Webhooks both document 5 minutes).
const defaultTolerance = 5 * time.Minute

// Config configures the Verifier of one source.
type Config struct {
	// Type is the signing scheme: "github", "standard-webhooks" (alias
	// "svix") or "stripe". Required.
	Type string `yaml:"type"`
	// Secrets are the signing secrets. Every one is tried, so a new secret
	// can be added before the old one is removed. Required: at least one, and
	// none may be empty. Standard Webhooks secrets are "whsec_" followed by
	// base64 (plain base64 is accepted too).
	Secrets []string `yaml:"secrets"`
	// Tolerance is how far a signed timestamp may be from now, in either
	// direction. Defaults to 5m for stripe and standard-webhooks; github signs
	// no timestamp and ignores it. Must not be negative.
	Tolerance time.Duration `yaml:"tolerance"`
}

func (c Config) withDefaults() Config {
	c.Tolerance = cmp.Or(c.Tolerance, defaultTolerance)
	return c
}

func (c Config) validate() error {
	switch c.Type {
	case typeGitHub, typeStandardWebhooks, typeStripe, typeSvix:
	case "":
		return fmt.Errorf("type: must be set (known: %s)", strings.Join(Types(), ", "))
	default:
		return fmt.Errorf("type %q: unknown (known: %s)", c.Type, strings.Join(Types(), ", "))
	}
	if len(c.Secrets) == 0 {
		return errors.New("secrets: at least one secret is required")
	}
	for i, s := range c.Secrets {
		if s == "" {
			return fmt.Errorf("secrets[%d]: must not be empty", i)
		}
	}
	if c.Tolerance < 0 {
		return fmt.Errorf("tolerance %s: must not be negative", c.Tolerance)
	}
	return nil
}

// New validates cfg and returns the Verifier for cfg.Type. Errors name the bad
// field and never contain a secret.
func New(cfg Config) (Verifier, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	switch cfg.Type {
	case typeGitHub:
		return newGitHub(cfg), nil
	case typeStandardWebhooks, typeSvix:
		return newStandardWebhooks(cfg)
	default: // typeStripe; validate rejected everything else
		return newStripe(cfg), nil
	}
}

// Types returns the sorted list of known type names. Aliases ("svix") are
// accepted by New but not listed.
func Types() []string {
	types := []string{typeGitHub, typeStandardWebhooks, typeStripe}
	slices.Sort(types)
	return types
}

// macKey computes HMAC-SHA256 with one key. Keyed states are pooled: a state
// costs a few hundred bytes to build and Reset restores its precomputed
// keyed state, so the hot path allocates nothing.
type macKey struct {
	pool sync.Pool
}

type macState struct {
	h   hash.Hash
	sum [sha256.Size]byte
	buf []byte // the signed prefix, copied so strings need not be converted per Write
}

// maxPooledBuf bounds the prefix buffer kept in the pool so one huge id
// header does not pin memory.
const maxPooledBuf = 1 << 10

func newMACKey(key []byte) *macKey {
	key = slices.Clone(key)
	k := &macKey{}
	k.pool.New = func() any { return &macState{h: hmac.New(sha256.New, key)} }
	return k
}

// sum returns HMAC-SHA256 over the concatenation of prefix and body.
func (k *macKey) sum(body []byte, prefix ...string) [sha256.Size]byte {
	st := k.pool.Get().(*macState)
	st.h.Reset()
	if len(prefix) > 0 {
		st.buf = st.buf[:0]
		for _, p := range prefix {
			st.buf = append(st.buf, p...)
		}
		st.h.Write(st.buf)
	}
	st.h.Write(body)
	st.h.Sum(st.sum[:0])
	sum := st.sum
	if cap(st.buf) > maxPooledBuf {
		st.buf = nil
	}
	k.pool.Put(st)
	return sum
}

// now returns the time req is checked against.
func (req *Request) now() time.Time {
	if req.Now.IsZero() {
		return time.Now()
	}
	return req.Now
}

// parseUnix parses a Unix timestamp in seconds written the way providers
// sign it: decimal digits, no sign, no leading zeros. Requiring the canonical
// form means the header text we HMAC and the number we check are the same.
func parseUnix(s string) (int64, bool) {
	// 18 digits cannot overflow int64 and reach far past any real clock.
	if len(s) == 0 || len(s) > 18 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// checkSkew bounds the signed timestamp in both directions around now.
func checkSkew(scheme string, unix int64, now time.Time, tolerance time.Duration) error {
	skew := now.Sub(time.Unix(unix, 0)) // saturates instead of overflowing
	switch {
	case skew > tolerance:
		return fmt.Errorf("%s: %w: timestamp is %s old, tolerance %s",
			scheme, ErrTimestampOutsideTolerance, skew.Round(time.Second), tolerance)
	case skew < -tolerance:
		return fmt.Errorf("%s: %w: timestamp is %s in the future, tolerance %s",
			scheme, ErrTimestampOutsideTolerance, (-skew).Round(time.Second), tolerance)
	}
	return nil
}

// checkEventID rejects ids that cannot serve as a text dedupe key: empty,
// invalid UTF-8, or containing NUL (PostgreSQL text cannot store NUL).
func checkEventID(scheme, what, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%s: %w: %s is empty", scheme, ErrMalformedPayload, what)
	case !utf8.ValidString(id) || strings.IndexByte(id, 0) >= 0:
		return fmt.Errorf("%s: %w: %s is not valid UTF-8 text", scheme, ErrMalformedPayload, what)
	}
	return nil
}

// decodeHex32 decodes exactly 64 hex digits (either case) into a SHA-256
// sized MAC.
func decodeHex32(s string) (out [sha256.Size]byte, ok bool) {
	if len(s) != 2*sha256.Size {
		return out, false
	}
	for i := range out {
		hi, ok1 := fromHex(s[2*i])
		lo, ok2 := fromHex(s[2*i+1])
		if !ok1 || !ok2 {
			return out, false
		}
		out[i] = hi<<4 | lo
	}
	return out, true
}

func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
