package verify

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
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
	// Method is the request's method; "" means POST. GET requests are
	// only ever handshakes (see [Handshake]).
	Method string
	// URL is the full URL of the request as received,
	// scheme://host/path?query. Only the sources SignsURL names sign it
	// (and use Config.PublicURL in place of its scheme, host and path when
	// set); the others ignore it and it may be empty.
	URL string
	// Now is the time timestamps are checked against. Defaults to time.Now().
	Now time.Time
	// IgnoreTolerance skips the timestamp window check but still checks the
	// signature. Set it only when re-verifying a stored event (see
	// [Reverify]).
	IgnoreTolerance bool
}

// Result describes a verified event.
type Result struct {
	// EventID is the provider's unique event id, or the id taken from where
	// the source's configuration says (Config.EventIDHeader,
	// Config.EventIDJSON), or a synthetic "sha256:<hex>" of the raw body;
	// together with the source name it is the dedupe key.
	EventID string
	// EventType is the provider's event type, "" if the provider has none.
	EventType string
	// SecretIndex is the index into Config.Secrets of the secret (or public
	// key) that matched. Log it, never the secret, so operators can tell
	// when a rotated-out secret is no longer in use.
	SecretIndex int
	// Handshake is set when the request is not an event but a provider's
	// check of the endpoint (Slack's url_verification, Meta's hub.challenge,
	// Zoom's endpoint.url_validation, ...): the receiver answers it with
	// Handshake and stores nothing. EventID and EventType are then empty.
	Handshake *Handshake
	// Reply, when set on an event, is what the provider expects as the
	// answer to a stored (or duplicate) event in place of Inlet's own
	// {"status": …}: Discord's interactions want an interaction response,
	// and get a deferred one that the handler completes through the
	// interaction's token. Its Kind is a label for logs.
	Reply *Handshake
}

// StorageRedactor is implemented by verifiers whose scheme sends the secret
// itself in a header (GitLab's token). RedactForStorage returns the headers
// to store: the secret replaced by its SHA-256, which re-verification
// (Reverify) still checks, but which cannot be replayed as the secret.
type StorageRedactor interface {
	RedactForStorage(h http.Header) http.Header
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

// Reasons is every value Reason returns for a non-nil error.
func Reasons() []string {
	return []string{"signature_missing", "signature_malformed", "signature_mismatch", "timestamp_outside_tolerance", "malformed_payload", "unknown"}
}

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
	typeGitLab           = "gitlab"
	typeHMAC             = "hmac"
	typePaddle           = "paddle"
	typeShopify          = "shopify"
	typeSlack            = "slack"
	typeStandardWebhooks = "standard-webhooks"
	typeStripe           = "stripe"
	typeSvix             = "svix" // alias of typeStandardWebhooks
	typeTwilio           = "twilio"
)

// defaultTolerance is the timestamp window of the schemes that sign a
// timestamp (Stripe, Standard Webhooks and Slack all document 5 minutes).
const defaultTolerance = 5 * time.Minute

// Config configures the Verifier of one source. Every field is also a key of
// the source's entry in the YAML configuration file.
type Config struct {
	// Type is the signing scheme: "github", "gitlab", "hmac", "paddle",
	// "shopify", "slack", "standard-webhooks" (alias "svix"), "stripe" or
	// "twilio", or a provider preset ([Presets]: "zoom", "discord", ...).
	// Required.
	Type string `yaml:"type"`
	// Secrets are the signing secrets (the Twilio auth token, the GitLab
	// secret token). Every one is tried, so a new secret can be added before
	// the old one is removed; Result.SecretIndex says which matched.
	// Required: at least one, and none may be empty. Standard Webhooks
	// secrets are "whsec_" followed by base64 (plain base64 is accepted too)
	// for v1 HMAC signatures, or "whpk_" followed by the base64 Ed25519
	// public key for v1a signatures; a source may list both kinds.
	Secrets []string `yaml:"secrets"`
	// Tolerance is how far a signed timestamp may be from now, in either
	// direction. Defaults to 5m for stripe, standard-webhooks, slack, paddle
	// and hmac with a timestamp_header; github, gitlab, shopify and twilio
	// sign no timestamp and ignore it. Must not be negative.
	Tolerance time.Duration `yaml:"tolerance"`

	// PublicURL is, for twilio only, the URL Twilio is configured to call
	// (scheme://host[:port]/path), for when Inlet runs behind a proxy and
	// the URL it receives differs from the public one. Twilio signs the URL
	// it requests: this URL's scheme, host, port and path, followed by the
	// query string of the request as received (it carries bodySHA256 for JSON
	// webhooks and any query you configured in Twilio). So PublicURL must not
	// have a query string of its own; a #fragment (Twilio's connection
	// overrides) is not signed and is dropped. Defaults to "": the request's
	// own URL is used, which is right only when nothing between Twilio and
	// Inlet changes the scheme, host or path.
	PublicURL string `yaml:"public_url"`

	// VerifyToken is the token a provider's subscription handshake must
	// carry, for the presets whose handshake checks one that is not the
	// signing secret (meta: hub.verify_token, chosen by you when you
	// register the callback). Required for them, not allowed otherwise.
	VerifyToken string `yaml:"verify_token"`

	// EventIDHeader names a request header whose value is the event id,
	// replacing the scheme's default (see the package documentation for
	// each scheme's). A verified request without it is rejected with
	// ErrMalformedPayload. Defaults to "": the scheme's default.
	EventIDHeader string `yaml:"event_id_header"`
	// EventIDJSON is a dotted path into the JSON body ("data.id",
	// "events.0.id") whose string or number value is the event id, replacing
	// the scheme's default. For form-encoded bodies (twilio, Slack slash
	// commands and interactivity) the first segment names a form field and
	// any further segments go into that field's value as JSON
	// ("payload.trigger_id"). A verified request without it is rejected with
	// ErrMalformedPayload. At most one of EventIDHeader and EventIDJSON may
	// be set. Defaults to "": the scheme's default.
	EventIDJSON string `yaml:"event_id_json"`
	// EventTypeHeader names a request header whose value is the event type,
	// replacing the scheme's default. Defaults to "": the scheme's default.
	EventTypeHeader string `yaml:"event_type_header"`
	// EventTypeJSON is a dotted path, as for EventIDJSON, to the event type.
	// A request without it has type "". At most one of EventTypeHeader and
	// EventTypeJSON may be set. Defaults to "": the scheme's default.
	EventTypeJSON string `yaml:"event_type_json"`
	// OccurredAtHeader names a request header whose value is when the event
	// happened (Unix seconds or RFC 3339), replacing the scheme's own field
	// (see [NewOccurredAt]). Defaults to "": the scheme's field, none for
	// hmac.
	OccurredAtHeader string `yaml:"occurred_at_header"`
	// OccurredAtJSON is a dotted path into the JSON body, as for
	// EventIDJSON, to when the event happened (Unix seconds or RFC 3339).
	// A request without it, or with a value that is no time, is stored
	// with occurred_at NULL, never rejected. At most one of
	// OccurredAtHeader and OccurredAtJSON may be set. Defaults to "".
	OccurredAtJSON string `yaml:"occurred_at_json"`

	// HMAC configures type "hmac", the generic scheme for providers without
	// a scheme of their own. Only for type hmac.
	HMAC HMACConfig `yaml:"hmac"`
}

// HMACConfig describes an HMAC signature: the signature (from a header,
// after an optional prefix, or an element of a key=value list, or from the
// body) is encoding(HMAC-algorithm(secret, signed payload)), where the
// signed payload is SignedPayload with its placeholders filled in. The
// secret is used as the key byte for byte. Most presets (see [Presets]) are
// an HMACConfig.
type HMACConfig struct {
	// Header is the signature header, e.g. "X-Signature". Required unless
	// SignatureJSON is set.
	Header string `yaml:"header"`
	// AltHeaders are further headers that may carry a signature (Box sends
	// one per key). A signature in any of them may match any secret.
	// Defaults to none.
	AltHeaders []string `yaml:"alt_headers"`
	// SignatureJSON is a dotted path into the JSON body where the signature
	// is (Mailgun's signature.signature), instead of a header. Defaults to "".
	SignatureJSON string `yaml:"signature_json"`
	// Algorithm is the hash: "sha1", "sha256" or "sha512". Defaults to
	// "sha256".
	Algorithm string `yaml:"algorithm"`
	// Encoding of the MAC: "hex" (either case accepted) or "base64"
	// (standard alphabet, padded). Defaults to "hex".
	Encoding string `yaml:"encoding"`
	// Prefix precedes the encoded MAC (or the element list) in the header,
	// e.g. "sha256=" or "v0=". Matched exactly. Defaults to "".
	Prefix string `yaml:"prefix"`
	// Separator and SignatureKey describe a header of key=value elements,
	// Stripe-style "t=1700000000,v1=5257a8…": elements are split on
	// Separator and every element named SignatureKey is a signature (there
	// may be several while a secret rotates). Set both or neither.
	Separator    string `yaml:"separator"`
	SignatureKey string `yaml:"signature_key"`
	// TimestampKey names the element of such a header that carries the
	// signing time ("t"). At most one of TimestampKey, TimestampHeader and
	// TimestampJSON may be set.
	TimestampKey string `yaml:"timestamp_key"`
	// TimestampHeader names a header carrying the signing time. When set,
	// the timestamp must be part of SignedPayload and is checked against
	// Config.Tolerance. Defaults to "": no timestamp.
	TimestampHeader string `yaml:"timestamp_header"`
	// TimestampJSON is a dotted path into the body to the signing time
	// (Linear's webhookTimestamp); signed with the body, so SignedPayload
	// need not name it. Checked against Config.Tolerance.
	TimestampJSON string `yaml:"timestamp_json"`
	// TimestampFormat is how the timestamp is written: "unix" (seconds),
	// "unix_ms" (milliseconds) or "rfc3339". Defaults to "unix".
	TimestampFormat string `yaml:"timestamp_format"`
	// SignedPayload is the template of the signed string. Placeholders:
	// {body} (the raw body; required exactly once), {timestamp} (the
	// timestamp's text as sent; required when it comes from a header),
	// {url} (the request URL, or Config.PublicURL plus the request's query),
	// {method}, {header:Name} (a request header's value, which must be
	// present) and {json:path} (a string or number in the body). Everything
	// else is literal. Defaults to "{body}", or "{timestamp}.{body}" when
	// the timestamp comes from a header.
	SignedPayload string `yaml:"signed_payload"`

	// bodyUnsigned lets a preset sign no body (Mailgun signs only a
	// timestamp and token). Never set from configuration.
	bodyUnsigned bool
	// altSignatureJSON are further body paths that may carry a signature,
	// as AltHeaders are for headers (Mailgun's parent-signature, keyed with
	// the parent account's key). Preset-only.
	altSignatureJSON []string
	// urlUnescape, when set, rewrites the URL that {url} signs (HubSpot
	// signs its URI with some %-escapes decoded). Preset-only.
	urlUnescape *strings.Replacer
}

// isZero reports whether no field of c is set.
func (c HMACConfig) isZero() bool {
	return c.Header == "" && len(c.AltHeaders) == 0 && c.SignatureJSON == "" && c.Algorithm == "" &&
		c.Encoding == "" && c.Prefix == "" && c.Separator == "" && c.SignatureKey == "" &&
		c.TimestampKey == "" && c.TimestampHeader == "" && c.TimestampJSON == "" &&
		c.TimestampFormat == "" && c.SignedPayload == ""
}

func (c Config) withDefaults() Config {
	if p, ok := presets[c.Type]; ok {
		c = p.apply(c)
	}
	c.Tolerance = cmp.Or(c.Tolerance, defaultTolerance)
	if c.HMAC.isZero() && c.Type != typeHMAC {
		return c
	}
	c.HMAC = c.HMAC.withDefaults()
	return c
}

func (c Config) validate() error {
	p := presets[c.Type]
	known := p != nil
	for _, t := range append(schemeTypes(), typeSvix) {
		known = known || c.Type == t
	}
	switch {
	case c.Type == "":
		return fmt.Errorf("type: must be set (known: %s)", strings.Join(Types(), ", "))
	case !known:
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
	if err := validateIdentity(c); err != nil {
		return err
	}
	if err := validateOccurred(c); err != nil {
		return err
	}
	if p != nil {
		if err := p.validate(c); err != nil {
			return err
		}
		return p.apply(c).HMAC.withDefaults().validateFor(p)
	}
	if c.VerifyToken != "" {
		return fmt.Errorf("verify_token: not used by type %s", c.Type)
	}
	if c.PublicURL != "" {
		if c.Type != typeTwilio && c.Type != typeHMAC {
			return fmt.Errorf("public_url: only used by type twilio, hmac and the presets that sign the URL, not %s", c.Type)
		}
		if _, err := twilioBaseURL(c.PublicURL); c.Type == typeTwilio && err != nil {
			return fmt.Errorf("public_url: %w", err)
		}
	}
	if c.Type == typeHMAC {
		return c.HMAC.withDefaults().validate()
	}
	if !c.HMAC.isZero() {
		return fmt.Errorf("hmac: only used by type hmac, not %s", c.Type)
	}
	return nil
}

// validateFor checks a preset's HMAC template (a preset that is not an
// HMAC has none).
func (c HMACConfig) validateFor(p *preset) error {
	if p.scheme != typeHMAC {
		return nil
	}
	if err := c.validate(); err != nil {
		return fmt.Errorf("preset %s: %w", p.name, err)
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
	ident := newIdentity(cfg)
	if p, ok := presets[cfg.Type]; ok {
		return newPreset(p, cfg, ident)
	}
	switch cfg.Type {
	case typeGitHub:
		return newGitHub(cfg, ident), nil
	case typeGitLab:
		return newGitLab(cfg, ident), nil
	case typeHMAC:
		return newHMAC(cfg, ident), nil
	case typePaddle:
		return newPaddle(cfg, ident), nil
	case typeShopify:
		return newShopify(cfg, ident), nil
	case typeSlack:
		return newSlack(cfg, ident), nil
	case typeStandardWebhooks, typeSvix:
		return newStandardWebhooks(cfg, ident)
	case typeTwilio:
		return newTwilio(cfg, ident)
	default: // typeStripe; validate rejected everything else
		return newStripe(cfg, ident), nil
	}
}

// schemeTypes are the types with a scheme of their own (not presets).
func schemeTypes() []string {
	return []string{typeGitHub, typeGitLab, typeHMAC, typePaddle, typeShopify,
		typeSlack, typeStandardWebhooks, typeStripe, typeTwilio}
}

// Types returns the sorted list of known type names: the schemes and the
// provider presets. Aliases ("svix") are accepted by New but not listed.
func Types() []string {
	types := append(schemeTypes(), Presets()...)
	slices.Sort(types)
	return types
}

// Reverify checks a stored event's signature again from its stored headers
// and raw body, as `inlet events verify` does: the signature, body hash and
// event id are checked exactly as at ingestion, but the timestamp window is
// not (Request.IgnoreTolerance), since a stored event is old by nature. url
// is the request URL as received; only the sources SignsURL names need it
// (with Config.PublicURL set it supplies just the query string, so "" works
// for twilio's form webhooks). The Result has the same event id and type as at
// ingestion, so it can be compared with the stored row.
func Reverify(cfg Config, header http.Header, body []byte, url string) (Result, error) {
	v, err := New(cfg)
	if err != nil {
		return Result{}, err
	}
	return v.Verify(&Request{Header: header, Body: body, URL: url, IgnoreTolerance: true})
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
	return checkSkewTime(scheme, time.Unix(unix, 0), now, tolerance) // Sub saturates instead of overflowing
}

// checkSkewTime is checkSkew for a time of any precision.
func checkSkewTime(scheme string, at, now time.Time, tolerance time.Duration) error {
	skew := now.Sub(at)
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

// hashKey is macKey for any hash (SHA-1 for Twilio, the generic scheme's
// choice): pooled keyed states, the MAC appended to a caller's buffer.
type hashKey struct {
	pool sync.Pool
	size int
}

func newHashKey(h func() hash.Hash, key []byte) *hashKey {
	key = slices.Clone(key)
	k := &hashKey{size: h().Size()}
	k.pool.New = func() any { return hmac.New(h, key) }
	return k
}

// sum appends the HMAC over the concatenation of parts to dst.
func (k *hashKey) sum(dst []byte, parts ...[]byte) []byte {
	h := k.pool.Get().(hash.Hash)
	h.Reset()
	for _, p := range parts {
		h.Write(p)
	}
	dst = h.Sum(dst)
	k.pool.Put(h)
	return dst
}

// syntheticID is the event id of schemes (or requests) that carry none:
// the SHA-256 of the raw body, so a provider's retry of the same bytes
// deduplicates and any different body is a different event.
func syntheticID(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// macKeys returns an HMAC-SHA256 key per secret, in the secrets' order (the
// index is Result.SecretIndex).
func macKeys(secrets []string) []*macKey {
	keys := make([]*macKey, len(secrets))
	for i, s := range secrets {
		keys[i] = newMACKey([]byte(s))
	}
	return keys
}

// anyHexMAC reports whether any element of a sep-separated signature header
// that starts with prefix is the hex of mac (Stripe's v1=, Paddle's h1=:
// several may come during a rotation), in constant time per element.
func anyHexMAC(header, sep, prefix string, mac [sha256.Size]byte) bool {
	for rest := header; rest != ""; {
		var elem string
		elem, rest, _ = strings.Cut(rest, sep)
		val, ok := strings.CutPrefix(elem, prefix)
		if !ok {
			continue
		}
		if got, ok := decodeHex32(val); ok && hmac.Equal(got[:], mac[:]) {
			return true
		}
	}
	return false
}
