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

// stripeHeader carries "t=<unix>,v1=<hex>[,v1=<hex>...][,v0=<hex>]".
const stripeHeader = "Stripe-Signature"

// stripeVerifier implements Stripe's scheme: HMAC-SHA256 over "{t}.{body}",
// hex encoded, keyed with the whole "whsec_..." string.
type stripeVerifier struct {
	keys      []*macKey
	tolerance time.Duration
	ident     *identity
}

func newStripe(cfg Config, ident *identity) *stripeVerifier {
	v := &stripeVerifier{tolerance: cfg.Tolerance, ident: ident}
	v.keys = macKeys(cfg.Secrets)
	return v
}

func (v *stripeVerifier) Verify(req *Request) (Result, error) {
	header := req.Header.Get(stripeHeader)
	if header == "" {
		return Result{}, fmt.Errorf("stripe: %w: no %s header", ErrSignatureMissing, stripeHeader)
	}
	sig, err := parseStripeSignature(header)
	if err != nil {
		return Result{}, err
	}

	// The signature is checked before the timestamp: a stale but authentic
	// event reports the skew, a forged one reports only the mismatch.
	index := -1
	for i, k := range v.keys {
		if anyHexMAC(sig.header, ",", "v1=", k.sum(req.Body, sig.t, ".")) {
			index = i
			break
		}
	}
	if index < 0 {
		return Result{}, fmt.Errorf("stripe: %w", ErrSignatureMismatch)
	}
	if !req.IgnoreTolerance {
		if err := checkSkew("stripe", sig.unix, req.now(), v.tolerance); err != nil {
			return Result{}, err
		}
	}

	id, typ, err := v.ident.resolve("stripe", req, nil, func(needID bool) (string, string, error) {
		return stripeEvent(req.Body, needID)
	})
	if err != nil {
		return Result{}, err
	}
	return Result{EventID: id, EventType: typ, SecretIndex: index}, nil
}

// stripeSignature is a parsed Stripe-Signature header. The v1 elements are
// re-scanned from header for each secret rather than collected into a slice,
// which keeps Verify allocation free; the MAC itself is computed once per
// secret.
type stripeSignature struct {
	header string
	t      string // as sent; it is part of the signed string
	unix   int64
}

func parseStripeSignature(header string) (stripeSignature, error) {
	sig := stripeSignature{header: header}
	haveT, v1 := false, 0
	for rest, more := header, true; more; {
		var elem string
		elem, rest, more = strings.Cut(rest, ",")
		key, val, ok := strings.Cut(elem, "=")
		if !ok {
			return sig, fmt.Errorf("stripe: %w: %s element without '='", ErrSignatureMalformed, stripeHeader)
		}
		switch key {
		case "t":
			if haveT {
				return sig, fmt.Errorf("stripe: %w: %s has more than one t=", ErrSignatureMalformed, stripeHeader)
			}
			unix, ok := parseUnix(val)
			if !ok {
				return sig, fmt.Errorf("stripe: %w: %s t= is not a Unix timestamp", ErrSignatureMalformed, stripeHeader)
			}
			sig.t, sig.unix, haveT = val, unix, true
		case "v1":
			// Like Stripe's own library, an undecodable v1 is skipped so
			// that one bad element does not hide a good one.
			if _, ok := decodeHex32(val); ok {
				v1++
			}
		}
		// Other schemes (v0 is test-mode legacy) are ignored.
	}
	if !haveT {
		return sig, fmt.Errorf("stripe: %w: %s has no t=", ErrSignatureMalformed, stripeHeader)
	}
	if v1 == 0 {
		return sig, fmt.Errorf("stripe: %w: %s has no well-formed v1=", ErrSignatureMalformed, stripeHeader)
	}
	return sig, nil
}

// stripeEvent reads only id and type from a verified body; everything else,
// api_version included, is the consumers' business. Without needID (the
// source names its own id) a body that is not an event just has no type.
func stripeEvent(body []byte, needID bool) (id, typ string, err error) {
	var ev struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	// The json error is dropped on purpose: its text quotes body bytes.
	if json.Unmarshal(body, &ev) != nil {
		if !needID {
			return "", "", nil
		}
		return "", "", fmt.Errorf("stripe: %w: body is not a JSON event object with string id and type", ErrMalformedPayload)
	}
	if !needID {
		return "", ev.Type, nil
	}
	if err := checkEventID("stripe", "event id", ev.ID); err != nil {
		return "", "", err
	}
	return ev.ID, ev.Type, nil
}

// SignStripe returns the Stripe-Signature header Stripe would send for body
// at time t when signing with secret.
func SignStripe(secret string, t time.Time, body []byte) http.Header {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := newMACKey([]byte(secret)).sum(body, ts, ".")
	h := make(http.Header, 1)
	h.Set(stripeHeader, "t="+ts+",v1="+hex.EncodeToString(mac[:]))
	return h
}
