package verify

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// A preset is a provider described as data over one of the scheme
// implementations (the HMAC template of hmac.go for most; Ed25519, ECDSA,
// token compare, Standard Webhooks for the rest) plus the handshakes the
// provider sends, where it keeps its event id, type and time, and a sample
// event for `inlet send`. Adding a provider is one entry in a providers_*.go
// list and its tests.
type preset struct {
	// name is the Config.Type that selects it.
	name string
	// scheme is the implementation: typeHMAC (hmac fills it) or one of the
	// scheme* constants.
	scheme string
	// hmac is the signature for scheme typeHMAC.
	hmac HMACConfig
	// keySig is the signature of schemes schemeEd25519 and schemeECDSA,
	// whose secrets are the provider's public keys.
	keySig keySigConfig
	// token is where scheme schemeToken finds the token.
	token tokenConfig
	// tolerance replaces defaultTolerance when the provider documents
	// another window.
	tolerance time.Duration
	// Where the provider keeps the event id, type and time; the source's
	// own event_id_*, event_type_* and occurred_at_* replace them. Where
	// none gives an id it is synthetic (the body's SHA-256).
	idHeader, idJSON             string
	typeHeader, typeJSON         string
	occurredHeader, occurredJSON string
	// perDelivery: the provider sends no event id and two distinct events
	// may have the same bytes (Dropbox's "this account changed" ping, a
	// Graph notification of a second change to one resource), so the body
	// hash would drop the second as a duplicate. Each delivery gets an id
	// of its own instead ("delivery:" + random): nothing is deduplicated,
	// a provider's retry is stored again (at least once, as always).
	perDelivery bool
	// formerIDs are the ids earlier versions of the preset gave an event
	// (an id rule changed: the stored id of an event stored before it is
	// one of these), for re-verification to accept.
	formerIDs func(header http.Header, body []byte) []string
	// handshakes the provider checks the endpoint with.
	handshakes []handshakeKind
	// event, when set, completes or refuses a verified event's Result:
	// where the type is more than one field (Twitch marks revocations) or
	// the provider's events have a shape the signature alone does not
	// ensure (X's are JSON objects). customType is true when the source
	// configures the type itself, which event must then leave alone.
	event func(req *Request, res Result, customType bool) (Result, error)
	// signsURL allows Config.PublicURL (the provider signs the URL).
	signsURL bool
	// needsVerifyToken requires Config.VerifyToken (Meta's handshake).
	needsVerifyToken bool
	// sample returns a realistic event for `inlet send`: its headers other
	// than the signature (and the id header, which SignTest sets) and its
	// body, carrying id where idJSON points.
	sample func(id string, now time.Time) (http.Header, []byte)
	// sign signs a request the way the provider does, setting the signature
	// headers in h (and returning a body that carries the signature, for
	// providers that sign inside the body). Nil: the scheme's signer (the
	// HMAC template's, or the one of schemeEd25519, schemeECDSA, which sign
	// with a private key given in place of the secret, schemeToken or
	// Standard Webhooks).
	sign func(cfg Config, secret string, now time.Time, h http.Header, body []byte, requestURL, method string) ([]byte, error)
	// doc is the provider's row in the documentation's provider table.
	doc PresetDoc
}

// PresetDoc documents a provider preset: one row of the provider table in
// docs/providers.md and the README, generated from the presets themselves.
type PresetDoc struct {
	// Provider is the provider's name as people write it ("Microsoft Graph").
	Provider string
	// Headers are the headers the signature travels in.
	Headers string
	// Signed is the signed string and MAC ("HMAC-SHA256(body), hex").
	Signed string
	// ID and Type say where the event id and type come from.
	ID, Type string
	// Occurred says where occurred_at comes from, "none" if nowhere.
	Occurred string
	// Handshake describes the endpoint check answered, "" for none.
	Handshake string
	// Source is a copy-ready YAML source entry (without the name line).
	Source string
	// Docs is the provider's documentation page the preset follows.
	Docs string
}

// presets are the provider presets by type name.
var presets = func() map[string]*preset {
	m := map[string]*preset{}
	for _, list := range [][]*preset{bodyHMACProviders, timedProviders, keyProviders} {
		for _, p := range list {
			if _, dup := m[p.name]; dup {
				panic("verify: preset " + p.name + " listed twice")
			}
			m[p.name] = p
		}
	}
	return m
}()

// Presets returns the provider presets' type names, sorted.
func Presets() []string {
	return slices.Sorted(maps.Keys(presets))
}

// PresetDocOf returns the documentation of preset typ.
func PresetDocOf(typ string) (PresetDoc, bool) {
	p, ok := presets[typ]
	if !ok {
		return PresetDoc{}, false
	}
	return p.doc, true
}

// apply returns cfg with the preset's defaults filled in where the source
// sets nothing of its own.
func (p *preset) apply(cfg Config) Config {
	if p.scheme == typeHMAC {
		cfg.HMAC = p.hmac
	}
	if cfg.Tolerance == 0 && p.tolerance > 0 {
		cfg.Tolerance = p.tolerance
	}
	if cfg.EventIDHeader == "" && cfg.EventIDJSON == "" {
		cfg.EventIDHeader, cfg.EventIDJSON = p.idHeader, p.idJSON
	}
	if cfg.EventTypeHeader == "" && cfg.EventTypeJSON == "" {
		cfg.EventTypeHeader, cfg.EventTypeJSON = p.typeHeader, p.typeJSON
	}
	if cfg.OccurredAtHeader == "" && cfg.OccurredAtJSON == "" {
		cfg.OccurredAtHeader, cfg.OccurredAtJSON = p.occurredHeader, p.occurredJSON
	}
	return cfg
}

// validatePreset checks the settings a preset allows or needs.
func (p *preset) validate(c Config) error {
	switch {
	case !c.HMAC.isZero():
		return fmt.Errorf("hmac: only used by type hmac, not %s (the preset sets the signature)", c.Type)
	case p.needsVerifyToken && c.VerifyToken == "":
		return fmt.Errorf("verify_token: required for type %s (the token you give the provider with the callback URL; its subscription handshake must carry it)", c.Type)
	case p.needsVerifyToken && !echoable(c.VerifyToken):
		return errors.New("verify_token: must be printable text of at most 2048 bytes")
	case !p.needsVerifyToken && c.VerifyToken != "":
		return fmt.Errorf("verify_token: not used by type %s", c.Type)
	case c.PublicURL != "" && !p.signsURL:
		return fmt.Errorf("public_url: not used by type %s (it does not sign the URL)", c.Type)
	}
	if c.PublicURL != "" {
		if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("public_url: must be an absolute http:// or https:// URL, as registered with the provider")
		}
	}
	return nil
}

// signatureChecker is a scheme that can check a request's signature alone,
// without reading an event id (a signed handshake is no event).
type signatureChecker interface {
	Verifier
	checkSignature(req *Request) (index int, err error)
}

// presetVerifier is a preset's scheme verifier with its handshakes.
type presetVerifier struct {
	inner      signatureChecker
	handshakes []handshakeKind
	hc         *handshakeContext
	event      func(req *Request, res Result, customType bool) (Result, error)
	customType bool
	// perDelivery gives each event a random id (preset.perDelivery, and the
	// source sets no id of its own).
	perDelivery bool
}

// newPreset builds the verifier of a preset source. cfg has been validated
// and has the preset applied.
func newPreset(p *preset, cfg Config, ident *identity) (Verifier, error) {
	var inner signatureChecker
	switch p.scheme {
	case typeHMAC:
		inner = newHMAC(cfg, ident)
	case schemeEd25519:
		v, err := newEd25519(p, cfg, ident)
		if err != nil {
			return nil, err
		}
		inner = v
	case schemeECDSA:
		v, err := newECDSA(p, cfg, ident)
		if err != nil {
			return nil, err
		}
		inner = v
	case schemeToken:
		inner = newToken(p, cfg, ident)
	case typeStandardWebhooks:
		v, err := newStandardWebhooks(cfg, ident)
		if err != nil {
			return nil, err
		}
		inner = v
	default:
		return nil, fmt.Errorf("type %s: scheme %s is not built", p.name, p.scheme)
	}
	return &presetVerifier{inner: inner, handshakes: p.handshakes,
		hc:          &handshakeContext{scheme: p.name, secrets: cfg.Secrets, verifyToken: cfg.VerifyToken},
		event:       p.event,
		customType:  cfg.EventTypeHeader != p.typeHeader || cfg.EventTypeJSON != p.typeJSON,
		perDelivery: PerDeliveryID(cfg)}, nil
}

// deliveryIDPrefix starts the ids of perDelivery presets' events.
const deliveryIDPrefix = "delivery:"

// SignsURL reports whether cfg's signature covers the URL the provider
// called: twilio, the presets that sign it (hubspot, square), and an hmac
// source whose signed_payload has {url}. Such an event re-verifies only from
// the URL it arrived at (Config.PublicURL).
func SignsURL(cfg Config) bool {
	if p := presets[cfg.Type]; p != nil {
		return p.signsURL
	}
	switch cfg.Type {
	case typeTwilio:
		return true
	case typeHMAC:
		return strings.Contains(cfg.HMAC.SignedPayload, placeholderURL)
	}
	return false
}

// PerDeliveryID reports whether a source configured as cfg gives each
// delivery an id of its own (a random one: see the providers' table), so a
// stored event re-verifies with another id than the stored one.
func PerDeliveryID(cfg Config) bool {
	p := presets[cfg.Type]
	return p != nil && p.perDelivery && cfg.EventIDHeader == "" && cfg.EventIDJSON == ""
}

// FormerEventIDs are the ids earlier versions of Inlet gave an event of a
// source of cfg with these headers and body, where the id rule of its
// preset or scheme has changed since (WooCommerce, Sentry, HubSpot; the
// gitlab scheme): re-verification accepts a stored id that is one of them.
// None for a source that names its own id.
func FormerEventIDs(cfg Config, header http.Header, body []byte) []string {
	if cfg.EventIDHeader != "" || cfg.EventIDJSON != "" {
		return nil
	}
	if p := presets[cfg.Type]; p != nil {
		if p.formerIDs == nil {
			return nil
		}
		return p.formerIDs(header, body)
	}
	if cfg.Type == typeGitLab {
		return gitlabFormerIDs(header, body)
	}
	return nil
}

// formerIDHeader is a formerIDs that read the id from header name.
func formerIDHeader(name string) func(http.Header, []byte) []string {
	return func(h http.Header, _ []byte) []string {
		if v := h.Get(name); v != "" {
			return []string{v}
		}
		return nil
	}
}

// checkedEventer is a scheme that can give the event of a request whose
// signature its checkSignature has already accepted (with secret index),
// without checking it again.
type checkedEventer interface {
	checkedEvent(req *Request, index int) (Result, error)
}

func (v *presetVerifier) Verify(req *Request) (Result, error) {
	// A POST that is no handshake is an event, whose signature the scheme
	// checks before anything else. So a signed POST handshake's signature
	// is checked before its match, which may read the body (Zoom's event
	// field): no answer changes, and a forged request is refused before its
	// body is looked into, as slack.go does (review helper-199). The result
	// serves the event too, where the scheme can take it (checkedEventer);
	// elsewhere (Discord's Ed25519) match stays first, or every event would
	// be verified twice. A GET keeps match first: one that is no handshake
	// is refused as such, whatever it carries.
	ce, reuse := v.inner.(checkedEventer)
	checked, sigIndex := false, -1
	var sigErr error
	for _, k := range v.handshakes {
		if method(req) != k.method {
			continue
		}
		var res Result
		switch {
		case k.signed && k.method == http.MethodPost && reuse:
			if !checked {
				sigIndex, sigErr = v.inner.checkSignature(req)
				checked = true
			}
			if sigErr != nil || !k.match(req) {
				continue
			}
			res.SecretIndex = sigIndex
		case !k.match(req):
			continue
		case k.signed:
			index, err := v.inner.checkSignature(req)
			if err != nil {
				return Result{}, err
			}
			res.SecretIndex = index
		}
		hs, err := k.answer(v.hc, req, res)
		if err != nil {
			return Result{}, err
		}
		return Result{SecretIndex: res.SecretIndex, Handshake: hs}, nil
	}
	if method(req) != http.MethodPost {
		return Result{}, fmt.Errorf("%s: %w: a %s request is not one of the provider's handshakes", v.hc.scheme, ErrSignatureMissing, method(req))
	}
	var res Result
	var err error
	switch {
	case checked && sigErr != nil:
		return Result{}, sigErr
	case checked:
		res, err = ce.checkedEvent(req, sigIndex)
	default:
		res, err = v.inner.Verify(req)
	}
	if err == nil && v.perDelivery {
		var id [16]byte
		_, _ = rand.Read(id[:]) // crypto/rand.Read never fails
		res.EventID = deliveryIDPrefix + hex.EncodeToString(id[:])
	}
	if err != nil || v.event == nil {
		return res, err
	}
	if res, err = v.event(req, res, v.customType); err != nil {
		return Result{}, err
	}
	return res, nil
}

// SecretConfirmer is a Verifier that answers a handshake with the secret the
// provider signs with now (X's CRC): whoever stores the source's events (the
// ingress; the relay, for the GET handshakes it answers itself) tells it
// which secret signed each new one.
type SecretConfirmer interface {
	SecretConfirmed(index int)
}

// SecretConfirmed says that secret index signed a new event of the source
// (ingress calls it once the event is stored, not for a duplicate: a replay
// of an old event signed with a retired secret must not move it): X's CRC
// is answered with that secret from then on.
func (v *presetVerifier) SecretConfirmed(index int) {
	if index >= 0 && index < len(v.hc.secrets) {
		v.hc.lastVerified.Store(int32(index)) //nolint:gosec // G115: bounded by the source's few secrets
	}
}

// AnswersGET reports whether the source answers GET requests (a GET
// handshake); others take POST only.
func (v *presetVerifier) AnswersGET() bool {
	for _, k := range v.handshakes {
		if k.method == http.MethodGet {
			return true
		}
	}
	return false
}

// RedactForStorage passes the scheme's redaction through.
func (v *presetVerifier) RedactForStorage(h http.Header) http.Header {
	if r, ok := v.inner.(StorageRedactor); ok {
		return r.RedactForStorage(h)
	}
	return h
}

// AnswersGET reports whether v answers GET requests (some providers check
// the endpoint with a GET handshake); every other request must be a POST.
func AnswersGET(v Verifier) bool {
	g, ok := v.(interface{ AnswersGET() bool })
	return ok && g.AnswersGET()
}

// publicKeys reports whether the preset's secrets are the provider's
// public keys, which verify signatures but cannot make them.
func (p *preset) publicKeys() bool {
	return p.scheme == schemeEd25519 || p.scheme == schemeECDSA
}

// UsesPublicKeys reports whether the secrets of type typ are the
// provider's public keys (discord, sendgrid): a test request of such a
// source is signed with a private key ([SignTestKey], [HandshakeTestKey]).
func UsesPublicKeys(typ string) bool {
	p, ok := presets[typ]
	return ok && p.publicKeys()
}

// errNeedsPrivateKey is SignTest's answer for a preset whose secrets are
// public keys.
func errNeedsPrivateKey(typ string) error {
	return fmt.Errorf("type %s: secrets are the provider's public keys, which cannot sign: a test request needs a matching private key (inlet send --private-key)", typ)
}

// signTest builds an accepted request of the preset, as SignTest does.
// privateKey signs for a preset whose secrets are public keys; the others
// ignore it.
func (p *preset) signTest(cfg Config, privateKey, id string, body []byte, requestURL string, now time.Time) (http.Header, []byte, error) {
	cfg = p.apply(cfg)
	h := http.Header{}
	if p.sample != nil {
		// A given body still goes with the provider's usual headers (those
		// a template signs: Twitch's message id and type).
		sh, sample := p.sample(id, now)
		if sh != nil {
			h = sh
		}
		if len(body) == 0 {
			body = sample
			if cfg.EventIDJSON != "" && cfg.EventIDJSON != p.idJSON {
				var err error
				if body, err = withPath(body, false, strings.Split(cfg.EventIDJSON, "."), id); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	if cfg.EventIDHeader != "" {
		h.Set(cfg.EventIDHeader, id)
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	body, err := p.signRequest(cfg, privateKey, now, h, body, requestURL, http.MethodPost)
	return h, body, err
}

// signRequest signs a request with the source's first secret, or with
// privateKey for a preset whose secrets are public keys.
func (p *preset) signRequest(cfg Config, privateKey string, now time.Time, h http.Header, body []byte, requestURL, method string) ([]byte, error) {
	secret := cfg.Secrets[0]
	if p.publicKeys() {
		if privateKey == "" {
			return nil, errNeedsPrivateKey(p.name)
		}
		secret = privateKey
	}
	switch {
	case p.sign != nil:
		return p.sign(cfg, secret, now, h, body, requestURL, method)
	case p.scheme == schemeEd25519:
		return p.signEd25519(cfg, secret, now, h, body)
	case p.scheme == schemeECDSA:
		return p.signECDSA(cfg, secret, now, h, body)
	case p.scheme == schemeToken:
		return p.signToken(secret, h, body)
	case p.scheme == typeStandardWebhooks:
		return signSvix(secret, now, h, body)
	}
	_, err := SignHMACRequest(cfg, secret, now, h, body, requestURL, method)
	return body, err
}

// checkPrivateKey checks a request signed with a private key against
// cfg's public keys, so that a key matching none of them is reported as
// such rather than yielding a request the source would reject.
func checkPrivateKey(cfg Config, h http.Header, body []byte, requestURL, method string, now time.Time) error {
	v, err := New(cfg)
	if err != nil {
		return err
	}
	pv, ok := v.(*presetVerifier)
	if !ok {
		return nil
	}
	_, err = pv.inner.checkSignature(&Request{Header: h, Body: body, URL: requestURL, Method: method, Now: now})
	if errors.Is(err, ErrSignatureMismatch) {
		return fmt.Errorf("private key: not the private half of any public key in secrets (type %s)", cfg.Type)
	}
	return err
}

// keyPreset returns the preset of cfg for SignTestKey and HandshakeTestKey:
// one whose secrets are public keys.
func keyPreset(cfg Config, privateKey string) (*preset, error) {
	p := presets[cfg.Type]
	switch {
	case p == nil || !p.publicKeys():
		return nil, fmt.Errorf("private key: type %s signs with its secrets; a private key is only for the types whose secrets are public keys", cfg.Type)
	case privateKey == "":
		return nil, errNeedsPrivateKey(cfg.Type)
	}
	return p, nil
}

// HandshakeTest builds the handshake request a source's provider would send
// (its first handshake kind), signed where the provider signs it, for
// `inlet send SOURCE --handshake`. requestURL is the source's webhook URL.
// It fails for a source whose provider sends no handshake.
func HandshakeTest(cfg Config, requestURL string, now time.Time) (*HandshakeProbe, error) {
	return handshakeTest(cfg, "", requestURL, now)
}

// HandshakeTestKey is HandshakeTest for a source whose secrets are the
// provider's public keys (discord's signed PING): privateKey, in a form
// [SignTestKey] takes, signs the handshake. It fails for other types and
// when privateKey matches none of the public keys.
func HandshakeTestKey(cfg Config, privateKey, requestURL string, now time.Time) (*HandshakeProbe, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if _, err := keyPreset(cfg, privateKey); err != nil {
		return nil, err
	}
	probe, err := handshakeTest(cfg, privateKey, requestURL, now)
	if err != nil {
		return nil, err
	}
	if err := checkPrivateKey(cfg, probe.Header, probe.Body, probe.URL, probe.Method, now); err != nil {
		return nil, err
	}
	return probe, nil
}

func handshakeTest(cfg Config, privateKey, requestURL string, now time.Time) (*HandshakeProbe, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var kinds []handshakeKind
	var p *preset
	switch {
	case cfg.Type == typeSlack:
		kinds = []handshakeKind{slackHandshake}
	case presets[cfg.Type] != nil:
		p = presets[cfg.Type]
		kinds = p.handshakes
	}
	if len(kinds) == 0 {
		return nil, fmt.Errorf("type %s: the provider sends no handshake", cfg.Type)
	}
	k := kinds[0]
	hc := &handshakeContext{scheme: cfg.Type, secrets: cfg.Secrets, verifyToken: cfg.VerifyToken}
	pr := k.probe(hc)
	u, err := url.Parse(requestURL)
	if err != nil {
		return nil, fmt.Errorf("url %q: %w", requestURL, err)
	}
	if len(pr.query) > 0 {
		q := u.Query()
		for name, vals := range pr.query {
			q[name] = vals
		}
		u.RawQuery = q.Encode()
	}
	h := pr.header.Clone()
	if h == nil {
		h = http.Header{}
	}
	body := pr.body
	if k.signed {
		switch {
		case p != nil:
			if body, err = p.signRequest(p.apply(cfg.withDefaults()), privateKey, now, h, body, u.String(), pr.method); err != nil {
				return nil, err
			}
		default: // slack
			for name, vals := range SignSlack(cfg.Secrets[0], now, body) {
				h[name] = vals
			}
		}
	}
	if len(body) > 0 && h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	return &HandshakeProbe{Kind: k.kind, Method: pr.method, URL: u.String(), Header: h, Body: body, Check: pr.check}, nil
}
