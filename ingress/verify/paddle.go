package verify

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// paddleHeader carries "ts=<unix>;h1=<hex>[;h1=<hex>...]".
const paddleHeader = "Paddle-Signature"

// paddleVerifier implements Paddle Billing's scheme: HMAC-SHA256 over
// "{ts}:{body}", hex encoded, keyed with the notification destination's
// secret key ("pdl_ntfset_..."), used as is. While Paddle rotates a secret
// the header carries one h1 per active secret; any one matching is enough.
type paddleVerifier struct {
	keys      []*macKey
	tolerance time.Duration
	ident     *identity
}

func newPaddle(cfg Config, ident *identity) *paddleVerifier {
	v := &paddleVerifier{tolerance: cfg.Tolerance, ident: ident}
	v.keys = macKeys(cfg.Secrets)
	return v
}

func (v *paddleVerifier) Verify(req *Request) (Result, error) {
	header := req.Header.Get(paddleHeader)
	if header == "" {
		return Result{}, fmt.Errorf("paddle: %w: no %s header", ErrSignatureMissing, paddleHeader)
	}
	ts, unix, err := parsePaddleSignature(header)
	if err != nil {
		return Result{}, err
	}
	index := -1
	for i, k := range v.keys {
		if anyHexMAC(header, ";", "h1=", k.sum(req.Body, ts, ":")) {
			index = i
			break
		}
	}
	if index < 0 {
		return Result{}, fmt.Errorf("paddle: %w", ErrSignatureMismatch)
	}
	if !req.IgnoreTolerance {
		if err := checkSkew("paddle", unix, req.now(), v.tolerance); err != nil {
			return Result{}, err
		}
	}
	id, typ, err := v.ident.resolve("paddle", req, nil, func(needID bool) (string, string, error) {
		return paddleEvent(req.Body, needID)
	})
	if err != nil {
		return Result{}, err
	}
	return Result{EventID: id, EventType: typ, SecretIndex: index}, nil
}

// parsePaddleSignature checks the header's shape: exactly one ts, at least
// one well-formed h1; elements of other names are ignored.
func parsePaddleSignature(header string) (ts string, unix int64, err error) {
	haveTS, h1 := false, 0
	for rest, more := header, true; more; {
		var elem string
		elem, rest, more = strings.Cut(rest, ";")
		key, val, ok := strings.Cut(elem, "=")
		if !ok {
			return "", 0, fmt.Errorf("paddle: %w: %s element without '='", ErrSignatureMalformed, paddleHeader)
		}
		switch key {
		case "ts":
			if haveTS {
				return "", 0, fmt.Errorf("paddle: %w: %s has more than one ts=", ErrSignatureMalformed, paddleHeader)
			}
			if unix, ok = parseUnix(val); !ok {
				return "", 0, fmt.Errorf("paddle: %w: %s ts= is not a Unix timestamp", ErrSignatureMalformed, paddleHeader)
			}
			ts, haveTS = val, true
		case "h1":
			if _, ok := decodeHex32(val); ok {
				h1++
			}
		}
	}
	if !haveTS {
		return "", 0, fmt.Errorf("paddle: %w: %s has no ts=", ErrSignatureMalformed, paddleHeader)
	}
	if h1 == 0 {
		return "", 0, fmt.Errorf("paddle: %w: %s has no well-formed h1=", ErrSignatureMalformed, paddleHeader)
	}
	return ts, unix, nil
}

// paddleEvent reads event_id and event_type from a verified notification.
func paddleEvent(body []byte, needID bool) (id, typ string, err error) {
	var ev struct {
		EventID   string `json:"event_id"`
		EventType string `json:"event_type"`
	}
	// The json error is dropped on purpose: its text quotes body bytes.
	if json.Unmarshal(body, &ev) != nil {
		if !needID {
			return "", "", nil
		}
		return "", "", fmt.Errorf("paddle: %w: body is not a JSON notification with string event_id and event_type", ErrMalformedPayload)
	}
	if !needID {
		return "", ev.EventType, nil
	}
	if err := checkEventID("paddle", "body event_id", ev.EventID); err != nil {
		return "", "", err
	}
	return ev.EventID, ev.EventType, nil
}

// SignPaddle returns the Paddle-Signature header Paddle would send for body
// at time t when signing with secret.
func SignPaddle(secret string, t time.Time, body []byte) http.Header {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := newMACKey([]byte(secret)).sum(body, ts, ":")
	h := make(http.Header, 1)
	h.Set(paddleHeader, "ts="+ts+";h1="+hex.EncodeToString(mac[:]))
	return h
}
