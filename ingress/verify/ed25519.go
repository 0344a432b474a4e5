package verify

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Scheme names of the presets that are no HMAC template (preset.scheme).
const (
	schemeEd25519 = "ed25519"
	schemeECDSA   = "ecdsa"
	schemeToken   = "token"
)

// keySigConfig describes a preset's public-key signature (schemes ed25519
// and ecdsa): the signature in a header, over a signed string built from a
// template as for the HMAC template (HMACConfig.SignedPayload: {body},
// {timestamp}, {header:Name} and literals), with an optional signed
// timestamp checked against Config.Tolerance.
type keySigConfig struct {
	// header carries the signature.
	header string
	// encoding of the signature: "hex" or "base64" (standard, padded).
	encoding string
	// timestampHeader carries the signing time in Unix seconds; "" for
	// none.
	timestampHeader string
	// signedPayload is the template of the signed string.
	signedPayload string
}

// keySig is a keySigConfig ready to check requests: what the Ed25519 and
// ECDSA verifiers share.
type keySig struct {
	scheme    string
	cfg       keySigConfig
	header    string // canonical
	tsHeader  string // canonical, "" for none
	segs      []segment
	tolerance time.Duration
}

func newKeySig(p *preset, cfg Config) (*keySig, error) {
	segs, err := parseTemplate(p.keySig.signedPayload)
	if err != nil {
		return nil, fmt.Errorf("preset %s: signed payload: %w", p.name, err)
	}
	for _, s := range segs {
		if s.kind == segURL || s.kind == segMethod || s.kind == segJSON {
			return nil, fmt.Errorf("preset %s: signed payload: only {body}, {timestamp} and {header:Name} are built for key schemes", p.name)
		}
	}
	k := &keySig{scheme: p.name, cfg: p.keySig, header: http.CanonicalHeaderKey(p.keySig.header), segs: segs, tolerance: cfg.Tolerance}
	if p.keySig.timestampHeader != "" {
		k.tsHeader = http.CanonicalHeaderKey(p.keySig.timestampHeader)
	}
	return k, nil
}

// signature returns the request's signature, decoded, and its signed
// timestamp's text and time. size, when not 0, is the only decoded length
// accepted; maxLen bounds the others.
func (k *keySig) signature(req *Request, size, maxLen int) (sig []byte, ts string, at time.Time, err error) {
	enc := req.Header.Get(k.header)
	if enc == "" {
		return nil, "", time.Time{}, fmt.Errorf("%s: %w: no %s header", k.scheme, ErrSignatureMissing, k.header)
	}
	var ok bool
	if sig, ok = k.decode(enc, size, maxLen); !ok {
		return nil, "", time.Time{}, fmt.Errorf("%s: %w: %s is not the %s of a signature", k.scheme, ErrSignatureMalformed, k.header, k.cfg.encoding)
	}
	if k.tsHeader != "" {
		ts = req.Header.Get(k.tsHeader)
		if ts == "" {
			return nil, "", time.Time{}, fmt.Errorf("%s: %w: no %s header", k.scheme, ErrSignatureMissing, k.tsHeader)
		}
		unix, ok := parseUnix(ts)
		if !ok {
			return nil, "", time.Time{}, fmt.Errorf("%s: %w: %s is not a Unix timestamp", k.scheme, ErrSignatureMalformed, k.tsHeader)
		}
		at = time.Unix(unix, 0)
	}
	return sig, ts, at, nil
}

// decode decodes an encoded signature strictly: one spelling per
// signature (either case of hex), no whitespace.
func (k *keySig) decode(s string, size, maxLen int) ([]byte, bool) {
	if k.cfg.encoding == "hex" {
		if (size > 0 && len(s) != 2*size) || len(s) > 2*maxLen || len(s)%2 != 0 {
			return nil, false
		}
		b, err := hex.DecodeString(s)
		return b, err == nil
	}
	if (size > 0 && len(s) != base64.StdEncoding.EncodedLen(size)) || len(s) > base64.StdEncoding.EncodedLen(maxLen) || strings.ContainsAny(s, "\r\n") {
		return nil, false
	}
	b, err := standardSigEncoding.DecodeString(s)
	if err != nil || (size > 0 && len(b) != size) {
		return nil, false
	}
	return b, true
}

// message is the signed string of req.
func (k *keySig) message(req *Request, ts string) ([]byte, error) {
	n := len(req.Body) + len(ts)
	for _, s := range k.segs {
		n += len(s.text)
	}
	msg := make([]byte, 0, n)
	for _, s := range k.segs {
		switch s.kind {
		case segLiteral:
			msg = append(msg, s.text...)
		case segBody:
			msg = append(msg, req.Body...)
		case segTimestamp:
			msg = append(msg, ts...)
		case segHeader:
			v := req.Header.Get(s.text)
			if v == "" {
				return nil, fmt.Errorf("%s: %w: no %s header (it is signed)", k.scheme, ErrSignatureMissing, s.text)
			}
			msg = append(msg, v...)
		}
	}
	return msg, nil
}

// checkTime bounds a verified request's timestamp.
func (k *keySig) checkTime(req *Request, ts string, at time.Time) error {
	if ts == "" || req.IgnoreTolerance {
		return nil
	}
	return checkSkewTime(k.scheme, at, req.now(), k.tolerance)
}

// check reads req's signature (size, maxLen as signature takes them) and
// signed string, asks verifies of each of the n configured keys in order,
// and returns the index of the first that verifies, once its timestamp is
// within tolerance. Signature before timestamp: only an authentic request
// learns that it is stale.
func (k *keySig) check(req *Request, size, maxLen, n int, verifies func(key int, msg, sig []byte) bool) (int, error) {
	sig, ts, at, err := k.signature(req, size, maxLen)
	if err != nil {
		return -1, err
	}
	msg, err := k.message(req, ts)
	if err != nil {
		return -1, err
	}
	for i := range n {
		if verifies(i, msg, sig) {
			if err := k.checkTime(req, ts, at); err != nil {
				return -1, err
			}
			return i, nil
		}
	}
	return -1, fmt.Errorf("%s: %w", k.scheme, ErrSignatureMismatch)
}

// sign sets the timestamp header (when the scheme has one) in h and
// returns the signed string, for the signers of `inlet send`.
func (k *keySig) sign(now time.Time, h http.Header, body []byte) ([]byte, error) {
	var ts string
	if k.tsHeader != "" {
		ts = strconv.FormatInt(now.Unix(), 10)
		h.Set(k.tsHeader, ts)
	}
	return k.message(&Request{Header: h, Body: body}, ts)
}

// encode encodes a signature as the scheme sends it.
func (k *keySig) encode(sig []byte) string {
	if k.cfg.encoding == "hex" {
		return hex.EncodeToString(sig)
	}
	return base64.StdEncoding.EncodeToString(sig)
}

// resolveEvent is the event id and type of a verified request of a key
// scheme: where the preset (or the source) says, else synthetic.
func resolveEvent(scheme string, ident *identity, req *Request, index int) (Result, error) {
	id, typ, err := ident.resolve(scheme, req, nil, func(bool) (string, string, error) {
		return syntheticID(req.Body), "", nil
	})
	if err != nil {
		return Result{}, err
	}
	return Result{EventID: id, EventType: typ, SecretIndex: index}, nil
}

// ed25519Verifier checks Ed25519 signatures (Discord's interactions) with
// the public keys in Config.Secrets: any of them may match, so a new key
// can be added before the old one is removed.
type ed25519Verifier struct {
	sig   *keySig
	keys  []ed25519.PublicKey
	ident *identity
}

func newEd25519(p *preset, cfg Config, ident *identity) (*ed25519Verifier, error) {
	sig, err := newKeySig(p, cfg)
	if err != nil {
		return nil, err
	}
	v := &ed25519Verifier{sig: sig, ident: ident}
	if v.keys, err = publicKeys(cfg.Secrets, parseEd25519PublicKey); err != nil {
		return nil, err
	}
	return v, nil
}

// parseEd25519PublicKey reads a public key written as 64 hex digits (as
// Discord shows it) or as standard base64. Its errors never quote the key.
func parseEd25519PublicKey(s string) (ed25519.PublicKey, error) {
	b, err := decodeKeyText(s)
	if err != nil {
		return nil, fmt.Errorf("not an Ed25519 public key: %w", err)
	}
	switch len(b) {
	case ed25519.PublicKeySize:
		return ed25519.PublicKey(b), nil
	case ed25519.PrivateKeySize:
		return nil, errors.New("is 64 bytes, the size of an Ed25519 private key: configure the provider's public key (32 bytes, 64 hex digits)")
	}
	return nil, fmt.Errorf("decodes to %d bytes, an Ed25519 public key has %d (64 hex digits)", len(b), ed25519.PublicKeySize)
}

// decodeKeyText decodes hex (an even number of hex digits) or standard
// base64.
func decodeKeyText(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if b, err := hex.DecodeString(s); err == nil {
		return b, nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("neither hex nor base64")
	}
	return b, nil
}

func (v *ed25519Verifier) checkSignature(req *Request) (int, error) {
	return v.sig.check(req, ed25519.SignatureSize, ed25519.SignatureSize, len(v.keys), func(i int, msg, sig []byte) bool {
		return ed25519.Verify(v.keys[i], msg, sig)
	})
}

func (v *ed25519Verifier) Verify(req *Request) (Result, error) {
	index, err := v.checkSignature(req)
	if err != nil {
		return Result{}, err
	}
	return resolveEvent(v.sig.scheme, v.ident, req, index)
}

// parseEd25519PrivateKey reads an Ed25519 private key for `inlet send`:
// the 32-byte seed or the 64-byte private key in hex or base64, or a
// PKCS #8 PEM block. Its errors never quote the key.
func parseEd25519PrivateKey(s string) (ed25519.PrivateKey, error) {
	if block, _ := pem.Decode([]byte(strings.TrimSpace(s))); block != nil {
		key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("private key: a PEM %q block that is no PKCS #8 private key", block.Type)
		}
		ed, ok := key.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("private key: a %T, want an Ed25519 key", key)
		}
		return ed, nil
	}
	b, err := decodeKeyText(s)
	if err != nil {
		return nil, fmt.Errorf("private key: %w (want an Ed25519 seed or private key in hex or base64, or PEM)", err)
	}
	switch len(b) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(b), nil
	case ed25519.PrivateKeySize:
		key := ed25519.PrivateKey(b)
		// The second half is the public key; a mismatch would sign with
		// one key and claim another.
		if !ed25519.NewKeyFromSeed(key.Seed()).Equal(key) {
			return nil, errors.New("private key: its public half does not belong to its seed")
		}
		return key, nil
	}
	return nil, fmt.Errorf("private key: decodes to %d bytes, want an Ed25519 seed (%d) or private key (%d)", len(b), ed25519.SeedSize, ed25519.PrivateKeySize)
}

// signEd25519 signs a request of an Ed25519 preset with key, the private
// key (see parseEd25519PrivateKey).
func (p *preset) signEd25519(cfg Config, key string, now time.Time, h http.Header, body []byte) ([]byte, error) {
	priv, err := parseEd25519PrivateKey(key)
	if err != nil {
		return nil, err
	}
	k, err := newKeySig(p, cfg)
	if err != nil {
		return nil, err
	}
	msg, err := k.sign(now, h, body)
	if err != nil {
		return nil, err
	}
	h.Set(k.header, k.encode(ed25519.Sign(priv, msg)))
	return body, nil
}

// publicKeys parses each secret as a public key, naming the secret a bad
// one is (never quoting it).
func publicKeys[K any](secrets []string, parse func(string) (K, error)) ([]K, error) {
	keys := make([]K, 0, len(secrets))
	for i, s := range secrets {
		key, err := parse(s)
		if err != nil {
			return nil, fmt.Errorf("secrets[%d]: %w", i, err)
		}
		keys = append(keys, key)
	}
	return keys, nil
}
