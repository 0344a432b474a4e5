package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// SignTest returns the headers with which the verifier for cfg accepts body
// at time now, signed with the first usable secret of cfg (for
// standard-webhooks the first whsec_ one: a whpk_ public key cannot sign).
// It is what `inlet send` and end-to-end tests post.
//
// When body is empty a small sample event of the scheme is returned in its
// place, with id where the source takes the event id from the body
// (Stripe's id, Slack's event_id, Paddle's event_id, the path of
// Config.EventIDJSON). Where the id travels in a header (GitHub's
// X-GitHub-Delivery, Config.EventIDHeader, ...) that header is set to id. A
// body that is given is sent as is, so its own id, if any, is the one
// verified. requestURL is the URL the request will be posted to; only the
// sources SignsURL names sign it (through Config.PublicURL when set, like
// the verifier), and it may be empty otherwise. The returned headers include Content-Type.
func SignTest(cfg Config, id string, body []byte, requestURL string, now time.Time) (http.Header, []byte, error) {
	if err := cfg.validate(); err != nil {
		return nil, nil, err
	}
	if id == "" {
		return nil, nil, errors.New("id: must not be empty")
	}
	cfg = cfg.withDefaults()
	if p, ok := presets[cfg.Type]; ok {
		return p.signTest(cfg, "", id, body, requestURL, now)
	}
	secret := cfg.Secrets[0]
	contentType := "application/json"

	if len(body) == 0 {
		body = sampleBody(cfg.Type, id, now)
		if cfg.Type == typeTwilio {
			contentType = "application/x-www-form-urlencoded"
		}
		if cfg.EventIDJSON != "" {
			var err error
			if body, err = withPath(body, cfg.Type == typeTwilio, strings.Split(cfg.EventIDJSON, "."), id); err != nil {
				return nil, nil, err
			}
		}
	} else if cfg.Type == typeTwilio && !jsonObject(body) {
		contentType = "application/x-www-form-urlencoded"
	}

	var h http.Header
	var err error
	switch cfg.Type {
	case typeStripe:
		h = SignStripe(secret, now, body)
	case typeGitHub:
		h = SignGitHub(secret, id, "push", body)
	case typeGitLab:
		h = SignGitLab(secret, id, "Push Hook")
	case typeShopify:
		h = SignShopify(secret, id, "orders/create", body)
	case typeSlack:
		h = SignSlack(secret, now, body)
	case typePaddle:
		h = SignPaddle(secret, now, body)
	case typeHMAC:
		h, err = SignHMAC(cfg, secret, now, body)
	case typeStandardWebhooks, typeSvix:
		secret = ""
		for _, s := range cfg.Secrets {
			if !strings.HasPrefix(s, standardPublicPrefix) {
				secret = s
				break
			}
		}
		if secret == "" {
			return nil, nil, fmt.Errorf("secrets: only %q public keys, and a test request needs a %q secret to sign with", standardPublicPrefix, standardSecretPrefix)
		}
		h, err = SignStandardWebhooks(secret, id, now, body)
	case typeTwilio:
		v, nerr := newTwilio(cfg, &identity{})
		if nerr != nil {
			return nil, nil, nerr
		}
		signedURL := v.signedURL(requestURL)
		if signedURL == "" {
			return nil, nil, errors.New("url: required for twilio when public_url is not set (Twilio signs the URL)")
		}
		if _, ok := twilioBodyHash(signedURL); !ok && jsonObject(body) {
			// Twilio puts the body's hash in the URL it calls; SignTest
			// cannot change the caller's URL.
			return nil, nil, fmt.Errorf("url: a JSON body for twilio needs the %s query parameter (see SignTwilioJSON)", twilioBodyHashParam)
		}
		h, err = SignTwilio(secret, signedURL, body)
		if err == nil {
			h.Set(twilioIdempotencyHeader, id)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	if cfg.EventIDHeader != "" {
		h.Set(cfg.EventIDHeader, id)
	}
	h.Set("Content-Type", contentType)
	return h, body, nil
}

// SignTestKey is SignTest for the types whose secrets are the provider's
// public keys ([UsesPublicKeys]: discord's Ed25519, sendgrid's ECDSA
// P-256), which cannot sign: privateKey, the private half of one of them,
// signs instead. An Ed25519 private key is the 32-byte seed or the 64-byte
// private key in hex or base64, or a PKCS #8 PEM block; an ECDSA P-256 key
// is PKCS #8 (or SEC 1) DER in base64, or a PEM block. It fails for the
// other types (they sign with their secrets: use SignTest) and when
// privateKey is the private half of none of cfg's public keys. Errors
// never contain the key.
func SignTestKey(cfg Config, privateKey, id string, body []byte, requestURL string, now time.Time) (http.Header, []byte, error) {
	if err := cfg.validate(); err != nil {
		return nil, nil, err
	}
	if id == "" {
		return nil, nil, errors.New("id: must not be empty")
	}
	p, err := keyPreset(cfg, privateKey)
	if err != nil {
		return nil, nil, err
	}
	h, body, err := p.signTest(cfg.withDefaults(), privateKey, id, body, requestURL, now)
	if err != nil {
		return nil, nil, err
	}
	if err := checkPrivateKey(cfg, h, body, requestURL, http.MethodPost, now); err != nil {
		return nil, nil, err
	}
	return h, body, nil
}

// sampleBody is a small, realistic event of each scheme carrying id where
// the scheme reads it from the body.
func sampleBody(typ, id string, now time.Time) []byte {
	ts := now.UTC().Format(time.RFC3339)
	unix := strconv.FormatInt(now.Unix(), 10)
	switch typ {
	case typeStripe:
		return fmt.Appendf(nil, `{"id":%q,"object":"event","type":"invoice.paid","created":%s,"data":{"object":{"id":"in_test","amount_paid":4200}}}`, id, unix)
	case typeGitHub:
		return []byte(`{"ref":"refs/heads/main","repository":{"full_name":"octo/hello"},"pusher":{"name":"octocat"}}`)
	case typeGitLab:
		return []byte(`{"object_kind":"push","ref":"refs/heads/main","project":{"path_with_namespace":"group/hello"},"user_username":"tester"}`)
	case typeShopify:
		return []byte(`{"id":820982911946154508,"email":"jon@example.com","total_price":"42.00","currency":"USD"}`)
	case typeSlack:
		return fmt.Appendf(nil, `{"token":"test","team_id":"T0TEST","api_app_id":"A0TEST","event":{"type":"app_mention","user":"U0TEST","text":"hello","channel":"C0TEST","event_ts":"%s.000100"},"type":"event_callback","event_id":%q,"event_time":%s}`, unix, id, unix)
	case typePaddle:
		return fmt.Appendf(nil, `{"event_id":%q,"event_type":"transaction.completed","occurred_at":%q,"notification_id":"ntf_test","data":{"id":"txn_test","status":"completed"}}`, id, ts)
	case typeTwilio:
		sid := sha256.Sum256([]byte(id))
		return []byte(url.Values{
			"AccountSid":    {"AC" + hex.EncodeToString(sid[:16])},
			"From":          {"+15005550006"},
			"To":            {"+15005550001"},
			"MessageSid":    {"SM" + hex.EncodeToString(sid[16:])},
			"MessageStatus": {"delivered"},
			"SmsStatus":     {"delivered"},
		}.Encode())
	default: // standard-webhooks, hmac
		return fmt.Appendf(nil, `{"type":"test.event","timestamp":%q,"data":{"id":%q}}`, ts, id)
	}
}

// withPath sets path in a JSON body (for form bodies: the form field
// path[0], its value a JSON object holding the rest of path) to value.
func withPath(body []byte, form bool, path []string, value string) ([]byte, error) {
	if form {
		vals, err := parseForm(body)
		if err != nil {
			return nil, err
		}
		field := value
		if len(path) > 1 {
			b, err := withPath([]byte("{}"), false, path[1:], value)
			if err != nil {
				return nil, err
			}
			field = string(b)
		}
		vals.Set(path[0], field)
		return []byte(vals.Encode()), nil
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, errors.New("body: not a JSON object to put the event id into")
	}
	switch doc.(type) {
	case map[string]any, []any:
	default:
		return nil, errors.New("body: not a JSON object to put the event id into")
	}
	if err := setPath(doc, path, value); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// setPath sets path in node, an object or an array (SendGrid's batch:
// "0.sg_event_id"), to value, making the objects on the way that are
// missing.
func setPath(node any, path []string, value string) error {
	var child any
	switch n := node.(type) {
	case map[string]any:
		if len(path) == 1 {
			n[path[0]] = value
			return nil
		}
		child = n[path[0]]
		switch c := child.(type) {
		case map[string]any:
		case []any:
			if i, err := strconv.Atoi(path[1]); err != nil || i < 0 || i >= len(c) {
				child = map[string]any{} // no such element: an object in its place
				n[path[0]] = child
			}
		default:
			child = map[string]any{}
			n[path[0]] = child
		}
	case []any:
		i, err := strconv.Atoi(path[0])
		if err != nil || i < 0 || i >= len(n) {
			return fmt.Errorf("body: no element %s in the array to put the event id into", path[0])
		}
		if len(path) == 1 {
			n[i] = value
			return nil
		}
		child = n[i]
		if _, ok := child.(map[string]any); !ok {
			if _, ok := child.([]any); !ok {
				child = map[string]any{}
				n[i] = child
			}
		}
	}
	return setPath(child, path[1:], value)
}
