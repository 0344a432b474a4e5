package verify

import (
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

const (
	slackSignatureHeader = "X-Slack-Signature" // "v0=<hex>"
	slackTimestampHeader = "X-Slack-Request-Timestamp"
	slackVersion         = "v0"
)

// slackVerifier implements Slack's request signing: HMAC-SHA256 over
// "v0:{timestamp}:{body}", hex encoded after "v0=", keyed with the app's
// signing secret; the timestamp is bounded both ways by the tolerance.
// Every request Slack signs is verified alike: Events API callbacks, the
// url_verification challenge, slash commands and interactivity payloads.
type slackVerifier struct {
	keys      []*macKey
	tolerance time.Duration
	ident     *identity
}

func newSlack(cfg Config, ident *identity) *slackVerifier {
	v := &slackVerifier{tolerance: cfg.Tolerance, ident: ident}
	v.keys = macKeys(cfg.Secrets)
	return v
}

func (v *slackVerifier) Verify(req *Request) (Result, error) {
	header := req.Header.Get(slackSignatureHeader)
	// Slack sends its ssl_check without a signature (no X-Slack-Signature,
	// no timestamp: slackapi/bolt-js#1397; Bolt answers it before any
	// verification): answered 200, empty, and stored nowhere, so answering
	// an unsigned one gives nothing away (review helper-335). A signed one
	// is answered after its signature, below.
	if header == "" && isSlackSSLCheck(req.Body) {
		return Result{SecretIndex: -1, Handshake: textAnswer(slackSSLCheck, "")}, nil
	}
	if header == "" {
		return Result{}, fmt.Errorf("slack: %w: no %s header", ErrSignatureMissing, slackSignatureHeader)
	}
	ts := req.Header.Get(slackTimestampHeader)
	if ts == "" {
		return Result{}, fmt.Errorf("slack: %w: no %s header", ErrSignatureMissing, slackTimestampHeader)
	}
	unix, ok := parseUnix(ts)
	if !ok {
		return Result{}, fmt.Errorf("slack: %w: %s is not a Unix timestamp", ErrSignatureMalformed, slackTimestampHeader)
	}
	hexSig, ok := strings.CutPrefix(header, slackVersion+"=")
	if !ok {
		return Result{}, fmt.Errorf("slack: %w: %s lacks the %q prefix", ErrSignatureMalformed, slackSignatureHeader, slackVersion+"=")
	}
	sig, ok := decodeHex32(hexSig)
	if !ok {
		return Result{}, fmt.Errorf("slack: %w: %s is not 64 hex digits", ErrSignatureMalformed, slackSignatureHeader)
	}

	index := -1
	for i, k := range v.keys {
		mac := k.sum(req.Body, slackVersion, ":", ts, ":")
		if hmac.Equal(sig[:], mac[:]) {
			index = i
			break
		}
	}
	if index < 0 {
		return Result{}, fmt.Errorf("slack: %w", ErrSignatureMismatch)
	}
	if !req.IgnoreTolerance {
		if err := checkSkew("slack", unix, req.now(), v.tolerance); err != nil {
			return Result{}, err
		}
	}

	// Events API and url_verification bodies are JSON; slash commands and
	// interactivity are form-encoded.
	var form url.Values
	if !jsonObject(req.Body) {
		form, _ = url.ParseQuery(string(req.Body)) // what parses is enough to find an id
	}
	// The handshake before the identity: it is answered, not stored, and has
	// no id where a source's event_id_json or event_id_header looks (which
	// refused it with 400, so such a source could never be registered).
	if form == nil && slackHandshake.match(req) {
		hs, err := slackHandshake.answer(nil, req, Result{})
		if err != nil {
			return Result{}, err
		}
		return Result{SecretIndex: index, Handshake: hs}, nil
	}
	// ssl_check: Slack checking a slash command's Request URL (a signed
	// form POST of ssl_check=1 and the app's legacy verification token,
	// answered 200 by Slack's own Bolt before any listener). Not an event:
	// stored, it reached every handler of the source as a command without
	// a command, the token in its body (review helper-330).
	if form != nil && isSlackSSLCheck(req.Body) {
		return Result{SecretIndex: index, Handshake: textAnswer(slackSSLCheck, "")}, nil
	}
	id, typ, err := v.ident.resolve("slack", req, form, func(needID bool) (string, string, error) {
		return slackEvent(req.Body, form, needID)
	})
	if err != nil {
		return Result{}, err
	}
	return Result{EventID: id, EventType: typ, SecretIndex: index}, nil
}

// isSlackSSLCheck reports whether body is Slack's ssl_check: a form whose
// ssl_check is "1" (a slash command's text holding "ssl_check=1" arrives
// escaped, %3D, in its text field, and does not match).
func isSlackSSLCheck(body []byte) bool {
	if len(body) > 4096 || jsonObject(body) {
		return false
	}
	form, err := url.ParseQuery(string(body))
	return err == nil && form.Get("ssl_check") == "1"
}

// slackSSLCheck is the Handshake.Kind of Slack's ssl_check, a form POST
// checking a slash command's Request URL, signed or not: answered 200,
// empty.
const slackSSLCheck = "ssl_check"

// slackHandshake is Slack's url_verification: a signed event whose
// challenge is echoed as {"challenge": …}. It is answered, not stored.
var slackHandshake = handshakeKind{
	kind: "url_verification", method: http.MethodPost, signed: true,
	match: func(req *Request) bool {
		typ, _ := lookupJSON(req.Body, []string{"type"})
		return typ == "url_verification"
	},
	answer: func(_ *handshakeContext, req *Request, _ Result) (*Handshake, error) {
		c, _ := lookupJSON(req.Body, []string{"challenge"})
		if !echoable(c) {
			return nil, fmt.Errorf("slack: %w: url_verification challenge is empty, too long or not printable text", ErrMalformedPayload)
		}
		return jsonAnswer("url_verification", map[string]string{"challenge": c}), nil
	},
	probe: func(*handshakeContext) handshakeProbe {
		return handshakeProbe{method: http.MethodPost,
			body:  fmt.Appendf(nil, `{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":%q,"type":"url_verification"}`, probeChallenge),
			check: checkJSON(map[string]any{"challenge": probeChallenge})}
	},
}

// slackEvent returns Slack's own identity of a verified request. The id is
// the Events API event_id, which Slack keeps across its retries
// (X-Slack-Retry-Num); other requests (url_verification, slash commands,
// interactivity) have none and get the synthetic body hash. The type is
// event.type of an event_callback ("app_mention"), else the top-level type
// ("url_verification", "app_rate_limited"); for interactivity the
// payload's type ("block_actions"), for a slash command the command
// ("/deploy").
func slackEvent(body []byte, form url.Values, needID bool) (id, typ string, err error) {
	if form != nil {
		if payload := form.Get("payload"); payload != "" {
			typ, _ = lookupJSON([]byte(payload), []string{"type"})
		} else {
			typ = form.Get("command")
		}
		return syntheticID(body), typ, nil
	}
	var ev struct {
		EventID json.RawMessage `json:"event_id"`
		Type    json.RawMessage `json:"type"`
		Event   json.RawMessage `json:"event"`
	}
	if json.Unmarshal(body, &ev) != nil {
		return syntheticID(body), "", nil
	}
	typ, _ = lookupJSON(ev.Type, nil)
	if typ == "event_callback" {
		if inner, ok := lookupJSON(ev.Event, []string{"type"}); ok {
			typ = inner
		}
	}
	id, ok := lookupJSON(ev.EventID, nil)
	if !ok || id == "" {
		return syntheticID(body), typ, nil
	}
	if needID {
		if err := checkEventID("slack", "body event_id", id); err != nil {
			return "", "", err
		}
	}
	return id, typ, nil
}

// SignSlack returns the X-Slack-Signature and X-Slack-Request-Timestamp
// headers Slack would send for body at time t when signing with secret.
func SignSlack(secret string, t time.Time, body []byte) http.Header {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := newMACKey([]byte(secret)).sum(body, slackVersion, ":", ts, ":")
	h := make(http.Header, 2)
	h.Set(slackTimestampHeader, ts)
	h.Set(slackSignatureHeader, slackVersion+"="+hex.EncodeToString(mac[:]))
	return h
}
