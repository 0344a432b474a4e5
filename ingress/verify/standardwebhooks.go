package verify

import (
	"bytes"
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
	standardSecretPrefix = "whsec_"
	standardVersion      = "v1"
)

// standardSigEncoding is strict so that each MAC has exactly one accepted
// spelling, as when comparing encoded strings.
var standardSigEncoding = base64.StdEncoding.Strict()

// standardVerifier implements Standard Webhooks (and Svix): HMAC-SHA256 over
// "{id}.{timestamp}.{body}", base64 encoded, keyed with the base64-decoded
// secret. The signature header is a space-separated list of
// "<version>,<signature>" entries; only v1 is understood so far.
type standardVerifier struct {
	keys      []*macKey
	tolerance time.Duration
}

func newStandardWebhooks(cfg Config) (*standardVerifier, error) {
	v := &standardVerifier{tolerance: cfg.Tolerance}
	for i, s := range cfg.Secrets {
		key, err := decodeStandardSecret(s)
		if err != nil {
			return nil, fmt.Errorf("secrets[%d]: %w", i, err)
		}
		v.keys = append(v.keys, newMACKey(key))
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

func (v *standardVerifier) Verify(req *Request) (Result, error) {
	names := webhookHeaders
	sigList := req.Header.Get(names.signature)
	if sigList == "" {
		names = svixHeaders
		sigList = req.Header.Get(names.signature)
	}
	if sigList == "" {
		return Result{}, fmt.Errorf("standard-webhooks: %w: no %s or %s header",
			ErrSignatureMissing, webhookHeaders.signature, svixHeaders.signature)
	}
	// The id and timestamp come from the same family as the signature, so a
	// request cannot mix webhook-* and svix-* values.
	id := req.Header.Get(names.id)
	if id == "" {
		return Result{}, fmt.Errorf("standard-webhooks: %w: no %s header", ErrSignatureMissing, names.id)
	}
	ts := req.Header.Get(names.timestamp)
	if ts == "" {
		return Result{}, fmt.Errorf("standard-webhooks: %w: no %s header", ErrSignatureMissing, names.timestamp)
	}
	unix, ok := parseUnix(ts)
	if !ok {
		return Result{}, fmt.Errorf("standard-webhooks: %w: %s is not a Unix timestamp",
			ErrSignatureMalformed, names.timestamp)
	}
	if countStandardV1(sigList) == 0 {
		return Result{}, fmt.Errorf("standard-webhooks: %w: %s has no well-formed %s entry",
			ErrSignatureMalformed, names.signature, standardVersion)
	}

	// Signature before timestamp, as for Stripe: only an authentic event
	// learns that it is stale.
	index := -1
	for i, k := range v.keys {
		if standardMatches(sigList, k.sum(req.Body, id, ".", ts, ".")) {
			index = i
			break
		}
	}
	if index < 0 {
		return Result{}, fmt.Errorf("standard-webhooks: %w", ErrSignatureMismatch)
	}
	if !req.IgnoreTolerance {
		if err := checkSkew("standard-webhooks", unix, req.now(), v.tolerance); err != nil {
			return Result{}, err
		}
	}
	if err := checkEventID("standard-webhooks", names.id+" header", id); err != nil {
		return Result{}, err
	}
	return Result{EventID: id, EventType: standardEventType(req.Body), SecretIndex: index}, nil
}

// decodeStandardV1 decodes one "v1,<base64>" entry. Other versions (v1a is
// Ed25519) and undecodable entries report false and are skipped.
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

func countStandardV1(list string) int {
	n := 0
	for rest := list; rest != ""; {
		var entry string
		entry, rest, _ = strings.Cut(rest, " ")
		if _, ok := decodeStandardV1(entry); ok {
			n++
		}
	}
	return n
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
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
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
