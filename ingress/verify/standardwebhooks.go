package verify

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// standardHeaders names the three headers of one Standard Webhooks header
// family. Svix sends the same scheme under svix-* names.
type standardHeaders struct {
	id, timestamp, signature string
}

var (
	webhookHeaders = standardHeaders{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"}
	svixHeaders    = standardHeaders{"Svix-Id", "Svix-Timestamp", "Svix-Signature"}
)

const (
	standardSecretPrefix  = "whsec_" // HMAC secret, v1
	standardPublicPrefix  = "whpk_"  // Ed25519 public key, v1a
	standardPrivatePrefix = "whsk_"  // Ed25519 private key: the sender's, never configured here
	standardVersion       = "v1"
	standardVersionEd     = "v1a"
)

// maxStandardSignatures bounds the v1a entries of a signature list. A
// sender lists one signature per signing key: one, two or three while it
// rotates a key, v1 and v1a side by side. Each well-formed v1a entry costs
// an Ed25519 verify over the whole signed content, so without a bound one
// forged request listing ~340 entries (what 32 KiB of headers hold) cost
// ~340 verifies of a 1 MiB body, hundreds of milliseconds of CPU (review
// helper-199). A list with more is refused as malformed before any MAC or
// verify. v1 entries and entries of other versions are not counted: a v1
// entry costs one constant-time compare with the one HMAC per secret, and a
// Svix sender may list many across its rotations (review helper-212).
const maxStandardSignatures = 8

// standardSigEncoding is strict so that each MAC has exactly one accepted
// spelling, as when comparing encoded strings.
var standardSigEncoding = base64.StdEncoding.Strict()

// standardVerifier implements Standard Webhooks (and Svix): the signed
// content is "{id}.{timestamp}.{body}"; a v1 signature is its HMAC-SHA256
// keyed with the base64-decoded "whsec_" secret, a v1a signature its Ed25519
// signature checked with a "whpk_" public key, both base64 encoded. The
// signature header is a space-separated list of "<version>,<signature>"
// entries, at most maxStandardSignatures of them v1a; any one matching any
// configured key is enough.
type standardVerifier struct {
	keys      []standardKey // one per Config.Secrets entry, same index
	haveMAC   bool
	havePub   bool
	tolerance time.Duration
	ident     *identity
}

// standardKey is one configured secret: an HMAC key or a public key.
type standardKey struct {
	mac *macKey
	pub ed25519.PublicKey
}

func newStandardWebhooks(cfg Config, ident *identity) (*standardVerifier, error) {
	if ident.idHeader == webhookHeaders.id || ident.idHeader == svixHeaders.id {
		// The scheme's own id, the one the signature covers, is that header
		// of the family that carries the signature. Read by name, it could
		// come from the other family, unsigned: a delivery replayed with its
		// svix-* headers renamed webhook-* and any svix-id added verified
		// and was stored again under that id, as often as it was replayed.
		own := *ident
		own.idHeader = ""
		ident = &own
	}
	v := &standardVerifier{tolerance: cfg.Tolerance, ident: ident}
	for i, s := range cfg.Secrets {
		switch {
		case strings.HasPrefix(s, standardPublicPrefix):
			pub, err := decodeStandardPublicKey(s)
			if err != nil {
				return nil, fmt.Errorf("secrets[%d]: %w", i, err)
			}
			v.keys = append(v.keys, standardKey{pub: pub})
			v.havePub = true
		case strings.HasPrefix(s, standardPrivatePrefix):
			return nil, fmt.Errorf("secrets[%d]: is a %q private signing key; configure the sender's %q public key instead",
				i, standardPrivatePrefix, standardPublicPrefix)
		default:
			key, err := decodeStandardSecret(s)
			if err != nil {
				return nil, fmt.Errorf("secrets[%d]: %w", i, err)
			}
			v.keys = append(v.keys, standardKey{mac: newMACKey(key)})
			v.haveMAC = true
		}
	}
	return v, nil
}

// decodeStandardSecret turns "whsec_<base64>" (or bare base64) into the HMAC
// key. Its errors never quote the secret.
func decodeStandardSecret(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, standardSecretPrefix))
	if err != nil {
		return nil, fmt.Errorf("not valid base64 (want %q followed by base64)", standardSecretPrefix)
	}
	if len(key) == 0 {
		return nil, errors.New("decodes to an empty key")
	}
	return key, nil
}

// decodeStandardPublicKey turns "whpk_<base64>" into an Ed25519 public key.
func decodeStandardPublicKey(secret string) (ed25519.PublicKey, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, standardPublicPrefix))
	if err != nil {
		return nil, fmt.Errorf("not valid base64 (want %q followed by the base64 Ed25519 public key)", standardPublicPrefix)
	}
	if len(key) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%q key decodes to %d bytes, an Ed25519 public key has %d", standardPublicPrefix, len(key), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(key), nil
}

func (v *standardVerifier) Verify(req *Request) (Result, error) {
	index, names, id, err := v.check(req)
	if err != nil {
		return Result{}, err
	}
	evID, typ, err := v.ident.resolve("standard-webhooks", req, nil, func(needID bool) (string, string, error) {
		if needID {
			if err := checkEventID("standard-webhooks", names.id+" header", id); err != nil {
				return "", "", err
			}
		}
		return id, standardEventType(req.Body), nil
	})
	if err != nil {
		return Result{}, err
	}
	return Result{EventID: evID, EventType: typ, SecretIndex: index}, nil
}

// checkSignature checks req's signature and timestamp (for the presets
// over this scheme, whose handshakes are signed like their events).
func (v *standardVerifier) checkSignature(req *Request) (int, error) {
	index, _, _, err := v.check(req)
	return index, err
}

// check checks req's signature and timestamp and returns the index of the
// key that matched, the header family and the message id.
func (v *standardVerifier) check(req *Request) (int, standardHeaders, string, error) {
	names := webhookHeaders
	sigList := req.Header.Get(names.signature)
	if sigList == "" {
		names = svixHeaders
		sigList = req.Header.Get(names.signature)
	}
	if sigList == "" {
		return -1, names, "", fmt.Errorf("standard-webhooks: %w: no %s or %s header",
			ErrSignatureMissing, webhookHeaders.signature, svixHeaders.signature)
	}
	// The id and timestamp come from the same family as the signature, so a
	// request cannot mix webhook-* and svix-* values.
	id := req.Header.Get(names.id)
	if id == "" {
		return -1, names, "", fmt.Errorf("standard-webhooks: %w: no %s header", ErrSignatureMissing, names.id)
	}
	ts := req.Header.Get(names.timestamp)
	if ts == "" {
		return -1, names, "", fmt.Errorf("standard-webhooks: %w: no %s header", ErrSignatureMissing, names.timestamp)
	}
	unix, ok := parseUnix(ts)
	if !ok {
		return -1, names, "", fmt.Errorf("standard-webhooks: %w: %s is not a Unix timestamp",
			ErrSignatureMalformed, names.timestamp)
	}
	if n := countStandard(sigList, decodeStandardV1aOK); n > maxStandardSignatures {
		return -1, names, "", fmt.Errorf("standard-webhooks: %w: %s lists %d %s (Ed25519) signatures, more than the %d accepted (a sender lists one per signing key)",
			ErrSignatureMalformed, names.signature, n, standardVersionEd, maxStandardSignatures)
	}
	if !(v.haveMAC && countStandard(sigList, decodeStandardV1OK) > 0) && !(v.havePub && countStandard(sigList, decodeStandardV1aOK) > 0) {
		return -1, names, "", fmt.Errorf("standard-webhooks: %w: %s has no well-formed entry of a version this source has keys for (%s)",
			ErrSignatureMalformed, names.signature, v.versions())
	}

	// Signature before timestamp, as for Stripe: only an authentic event
	// learns that it is stale.
	var signed []byte // "{id}.{ts}.{body}" for Ed25519, built once if needed
	index := -1
	for i, k := range v.keys {
		if k.mac != nil {
			if standardMatches(sigList, k.mac.sum(req.Body, id, ".", ts, ".")) {
				index = i
				break
			}
			continue
		}
		if signed == nil {
			signed = standardSignedContent(id, ts, req.Body)
		}
		if standardMatchesEd25519(sigList, k.pub, signed) {
			index = i
			break
		}
	}
	if index < 0 {
		return -1, names, "", fmt.Errorf("standard-webhooks: %w", ErrSignatureMismatch)
	}
	if !req.IgnoreTolerance {
		if err := checkSkew("standard-webhooks", unix, req.now(), v.tolerance); err != nil {
			return -1, names, "", err
		}
	}
	return index, names, id, nil
}

func (v *standardVerifier) versions() string {
	switch {
	case v.haveMAC && v.havePub:
		return standardVersion + " and " + standardVersionEd
	case v.havePub:
		return standardVersionEd
	}
	return standardVersion
}

func standardSignedContent(id, ts string, body []byte) []byte {
	b := make([]byte, 0, len(id)+len(ts)+2+len(body))
	b = append(b, id...)
	b = append(b, '.')
	b = append(b, ts...)
	b = append(b, '.')
	return append(b, body...)
}

// decodeStandardV1 decodes one "v1,<base64>" entry. Other versions and
// undecodable entries report false and are skipped.
func decodeStandardV1(entry string) (sig [sha256.Size]byte, ok bool) {
	b64, ok := strings.CutPrefix(entry, standardVersion+",")
	// The decoder silently skips CR and LF; refuse them so that exactly the
	// canonical 44-character spelling is accepted.
	if !ok || len(b64) != base64.StdEncoding.EncodedLen(sha256.Size) || strings.ContainsAny(b64, "\r\n") {
		return sig, false
	}
	// Decode writes up to DecodedLen bytes (33 for 44 unpadded characters),
	// so it needs room beyond the 32 a valid MAC uses.
	var buf [sha256.Size + 1]byte
	n, err := standardSigEncoding.Decode(buf[:], []byte(b64))
	if err != nil || n != sha256.Size {
		return sig, false
	}
	copy(sig[:], buf[:n])
	return sig, true
}

func decodeStandardV1OK(entry string) bool {
	_, ok := decodeStandardV1(entry)
	return ok
}

func decodeStandardV1aOK(entry string) bool {
	_, ok := decodeStandardV1a(entry)
	return ok
}

// countStandard counts the entries of list that decode.
func countStandard(list string, decodes func(string) bool) int {
	n := 0
	for rest := list; rest != ""; {
		var entry string
		entry, rest, _ = strings.Cut(rest, " ")
		if decodes(entry) {
			n++
		}
	}
	return n
}

// decodeStandardV1a decodes one "v1a,<base64>" entry holding an Ed25519
// signature, with the same strictness as decodeStandardV1.
func decodeStandardV1a(entry string) (sig [ed25519.SignatureSize]byte, ok bool) {
	b64, ok := strings.CutPrefix(entry, standardVersionEd+",")
	if !ok || len(b64) != base64.StdEncoding.EncodedLen(ed25519.SignatureSize) || strings.ContainsAny(b64, "\r\n") {
		return sig, false
	}
	var buf [ed25519.SignatureSize + 2]byte
	n, err := standardSigEncoding.Decode(buf[:], []byte(b64))
	if err != nil || n != ed25519.SignatureSize {
		return sig, false
	}
	copy(sig[:], buf[:n])
	return sig, true
}

// standardMatchesEd25519 reports whether any v1a entry of list is pub's
// signature of signed.
func standardMatchesEd25519(list string, pub ed25519.PublicKey, signed []byte) bool {
	for rest := list; rest != ""; {
		var entry string
		entry, rest, _ = strings.Cut(rest, " ")
		if sig, ok := decodeStandardV1a(entry); ok && ed25519.Verify(pub, signed, sig[:]) {
			return true
		}
	}
	return false
}

// standardMatches reports whether any v1 entry of list equals mac.
func standardMatches(list string, mac [sha256.Size]byte) bool {
	for rest := list; rest != ""; {
		var entry string
		entry, rest, _ = strings.Cut(rest, " ")
		if sig, ok := decodeStandardV1(entry); ok && hmac.Equal(sig[:], mac[:]) {
			return true
		}
	}
	return false
}

// standardEventType returns the body's string "type" when the body is a JSON
// object that has one; the scheme does not require JSON bodies.
func standardEventType(body []byte) string {
	if !jsonObject(body) {
		return ""
	}
	var ev struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &ev) != nil {
		return ""
	}
	return ev.Type
}

// SignStandardWebhooks returns the webhook-id, webhook-timestamp and
// webhook-signature headers a Standard Webhooks sender would send for body.
// secret is "whsec_<base64>" or bare base64.
func SignStandardWebhooks(secret string, msgID string, t time.Time, body []byte) (http.Header, error) {
	key, err := decodeStandardSecret(secret)
	if err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	if msgID == "" {
		return nil, errors.New("msgID: must not be empty")
	}
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := newMACKey(key).sum(body, msgID, ".", ts, ".")
	h := make(http.Header, 3)
	h.Set(webhookHeaders.id, msgID)
	h.Set(webhookHeaders.timestamp, ts)
	h.Set(webhookHeaders.signature, standardVersion+","+base64.StdEncoding.EncodeToString(mac[:]))
	return h, nil
}

// SignStandardWebhooksEd25519 returns the webhook-id, webhook-timestamp and
// webhook-signature headers of a Standard Webhooks sender that signs with
// the asymmetric v1a scheme: "v1a," + base64 of the Ed25519 signature of
// "{msgID}.{timestamp}.{body}". The receiver configures the matching
// "whpk_" + base64(public key).
func SignStandardWebhooksEd25519(key ed25519.PrivateKey, msgID string, t time.Time, body []byte) (http.Header, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("key: %d bytes, an Ed25519 private key has %d", len(key), ed25519.PrivateKeySize)
	}
	if msgID == "" {
		return nil, errors.New("msgID: must not be empty")
	}
	ts := strconv.FormatInt(t.Unix(), 10)
	sig := ed25519.Sign(key, standardSignedContent(msgID, ts, body))
	h := make(http.Header, 3)
	h.Set(webhookHeaders.id, msgID)
	h.Set(webhookHeaders.timestamp, ts)
	h.Set(webhookHeaders.signature, standardVersionEd+","+base64.StdEncoding.EncodeToString(sig))
	return h, nil
}

// signSvix signs a request of a preset over this scheme (Clerk, Resend)
// the way Svix sends them: svix-id, svix-timestamp and svix-signature. The
// message id is the request's Svix-Id, set when missing.
func signSvix(secret string, now time.Time, h http.Header, body []byte) ([]byte, error) {
	id := h.Get(svixHeaders.id)
	if id == "" {
		id = "msg_" + strings.TrimPrefix(syntheticID(append(strconv.AppendInt(nil, now.UnixNano(), 10), body...)), "sha256:")[:27]
	}
	signed, err := SignStandardWebhooks(secret, id, now, body)
	if err != nil {
		return nil, err
	}
	h.Set(svixHeaders.id, id)
	h.Set(svixHeaders.timestamp, signed.Get(webhookHeaders.timestamp))
	h.Set(svixHeaders.signature, signed.Get(webhookHeaders.signature))
	return body, nil
}
