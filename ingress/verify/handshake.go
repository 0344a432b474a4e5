package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
)

// Handshake is the answer to a provider's check of the endpoint: not an
// event, so it is answered and never stored. Ingress writes it as is (status
// 200) and counts it in metrics by source and Kind.
type Handshake struct {
	// Kind labels the handshake in metrics and logs: "url_verification"
	// and "ssl_check" (Slack), "subscribe" (Meta), "crc" (X), "url_validation" (Zoom),
	// "callback_verification" (Twitch), "ping" (Discord, WooCommerce),
	// "challenge" (Dropbox), "validation_token" (Microsoft Graph),
	// "verification" (Okta).
	Kind string
	// ContentType of Body.
	ContentType string
	// Body is the answer's body.
	Body []byte
	// Header holds further response headers, nil for none.
	Header http.Header
}

// Write answers w with h: its headers, its content type, status 200 and
// its body.
func (h *Handshake) Write(w http.ResponseWriter) {
	for name, vals := range h.Header {
		w.Header()[name] = vals
	}
	w.Header().Set("Content-Type", h.ContentType)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(h.Body)
}

// HandshakeKinds is every Handshake.Kind a verifier returns.
func HandshakeKinds() []string {
	return []string{"url_verification", "ssl_check", "subscribe", "crc", "url_validation", "callback_verification",
		"ping", "challenge", "validation_token", "verification"}
}

// handshakeKind is one provider's way of checking an endpoint. A preset
// lists the kinds its provider sends; the preset's verifier tries each
// before treating the request as an event.
type handshakeKind struct {
	// kind is Handshake.Kind.
	kind string
	// method is the request method the handshake comes with.
	method string
	// signed: the request carries the provider's usual signature (or
	// token), checked by the scheme before answer runs; otherwise answer
	// authenticates what it can itself (a verify token) or nothing (a
	// challenge echo proves only that the URL is reachable, and the source's
	// secrets are still required to be configured).
	signed bool
	// match reports whether req is this handshake. It must be cheap: an
	// unsigned kind's match runs on any request, and so does a signed
	// kind's where the scheme cannot check the signature first
	// (presetVerifier.Verify); a match that reads the body uses lookupJSON,
	// which keeps nothing of it.
	match func(req *Request) bool
	// answer builds the answer; res is the verified request's result for a
	// signed kind.
	answer func(hc *handshakeContext, req *Request, res Result) (*Handshake, error)
	// probe builds a request of this handshake for `inlet send --handshake`
	// (unsigned; a signed kind's probe is signed by the preset's signer)
	// and checks the answer.
	probe func(hc *handshakeContext) handshakeProbe
}

// handshakeContext is what answering a handshake may need from the source.
type handshakeContext struct {
	scheme      string
	secrets     []string
	verifyToken string
	// lastVerified is the index of the secret the source's newest stored
	// event was signed with (0 before any; SecretConfirmed): the one the
	// provider signs with now, during a rotation too.
	lastVerified atomic.Int32
}

// currentSecret is the secret the provider signs with now, as far as this
// process has seen: the newest stored event's, else the first.
func (hc *handshakeContext) currentSecret() string {
	if i := int(hc.lastVerified.Load()); i >= 0 && i < len(hc.secrets) {
		return hc.secrets[i]
	}
	return hc.secrets[0]
}

type handshakeProbe struct {
	method string
	query  url.Values
	header http.Header
	body   []byte
	check  func(status int, header http.Header, body []byte) error
}

// HandshakeProbe is a handshake request built for a source (`inlet send
// SOURCE --handshake`) and the check of its answer.
type HandshakeProbe struct {
	// Kind is the Handshake.Kind the request should be answered as.
	Kind string
	// Method, URL, Header and Body are the request to send.
	Method string
	URL    string
	Header http.Header
	Body   []byte
	// Check returns nil when the answer is what the provider expects.
	Check func(status int, header http.Header, body []byte) error
}

// maxEcho bounds a challenge that is echoed back.
const maxEcho = 2048

// echoable reports whether s may be echoed back as a challenge: not empty,
// short, printable text.
func echoable(s string) bool {
	if s == "" || len(s) > maxEcho || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func textAnswer(kind, s string) *Handshake {
	return &Handshake{Kind: kind, ContentType: "text/plain; charset=utf-8", Body: []byte(s),
		Header: http.Header{"X-Content-Type-Options": {"nosniff"}}}
}

func jsonAnswer(kind string, v any) *Handshake {
	b, _ := json.Marshal(v)
	return &Handshake{Kind: kind, ContentType: "application/json", Body: b}
}

func query(req *Request) url.Values {
	_, q, _ := strings.Cut(req.URL, "?")
	q, _, _ = strings.Cut(q, "#")
	vals, _ := url.ParseQuery(q)
	return vals
}

func method(req *Request) string { return cmpOr(req.Method, http.MethodPost) }

// checkText compares the answer's body with want.
func checkText(want string) func(int, http.Header, []byte) error {
	return func(status int, _ http.Header, body []byte) error {
		if status != http.StatusOK || string(body) != want {
			return fmt.Errorf("answer: want 200 %q, got %d %q", want, status, body)
		}
		return nil
	}
}

// checkJSON compares the answer's body, as JSON, with want.
func checkJSON(want map[string]any) func(int, http.Header, []byte) error {
	return func(status int, _ http.Header, body []byte) error {
		var got map[string]any
		if status != http.StatusOK || json.Unmarshal(body, &got) != nil {
			return fmt.Errorf("answer: want 200 with JSON %v, got %d %q", want, status, body)
		}
		for k, v := range want {
			if fmt.Sprint(got[k]) != fmt.Sprint(v) {
				return fmt.Errorf("answer: %s is %v, want %v", k, got[k], v)
			}
		}
		return nil
	}
}

const probeChallenge = "inlet-handshake-probe-4f2a"

// hsQueryEcho answers a request carrying param in its query string with the
// parameter's value as text: Dropbox's GET ?challenge=, Microsoft Graph's
// POST ?validationToken=. Neither provider signs it.
func hsQueryEcho(kind, method, param string) handshakeKind {
	return handshakeKind{
		kind: kind, method: method,
		match: func(req *Request) bool { return strings.Contains(req.URL, param+"=") && query(req).Has(param) },
		answer: func(hc *handshakeContext, req *Request, _ Result) (*Handshake, error) {
			v := query(req).Get(param)
			if !echoable(v) {
				return nil, fmt.Errorf("%s: %w: %s is empty, too long or not printable text", hc.scheme, ErrSignatureMalformed, param)
			}
			return textAnswer(kind, v), nil
		},
		probe: func(*handshakeContext) handshakeProbe {
			return handshakeProbe{method: method, query: url.Values{param: {probeChallenge}}, check: checkText(probeChallenge)}
		},
	}
}

// hsMeta answers Meta's (Facebook, Instagram, WhatsApp) subscription check:
// GET ?hub.mode=subscribe&hub.verify_token=…&hub.challenge=…, echoing the
// challenge when the verify token is Config.VerifyToken.
func hsMeta() handshakeKind {
	return handshakeKind{
		kind: "subscribe", method: http.MethodGet,
		match: func(req *Request) bool { return query(req).Has("hub.mode") },
		answer: func(hc *handshakeContext, req *Request, _ Result) (*Handshake, error) {
			q := query(req)
			token, challenge := q.Get("hub.verify_token"), q.Get("hub.challenge")
			switch {
			case q.Get("hub.mode") != "subscribe":
				return nil, fmt.Errorf("%s: %w: hub.mode is not subscribe", hc.scheme, ErrSignatureMalformed)
			case token == "":
				return nil, fmt.Errorf("%s: %w: no hub.verify_token", hc.scheme, ErrSignatureMissing)
			case subtle.ConstantTimeCompare([]byte(token), []byte(hc.verifyToken)) != 1:
				return nil, fmt.Errorf("%s: %w: hub.verify_token is not verify_token", hc.scheme, ErrSignatureMismatch)
			case !echoable(challenge):
				return nil, fmt.Errorf("%s: %w: hub.challenge is empty, too long or not printable text", hc.scheme, ErrSignatureMalformed)
			}
			return textAnswer("subscribe", challenge), nil
		},
		probe: func(hc *handshakeContext) handshakeProbe {
			return handshakeProbe{method: http.MethodGet, query: url.Values{
				"hub.mode": {"subscribe"}, "hub.verify_token": {hc.verifyToken}, "hub.challenge": {"1158201444"},
			}, check: checkText("1158201444")}
		},
	}
}

// crcResponse is X's response_token for crc_token: "sha256=" +
// base64(HMAC-SHA256(consumer secret, crc_token)).
func crcResponse(secret, token string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(token))
	return "sha256=" + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// crcToken reports whether s has the shape of X's crc_token: an opaque
// base64, base64url or UUID string. The answer to a CRC is exactly the
// x-twitter-webhooks-signature of a body equal to the token (same key, same
// MAC, same encoding), so answering any text would sign forged events for
// whoever asks; no JSON body (it needs '{' and '"') has this shape.
func crcToken(s string) bool {
	if len(s) < 8 || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '+' || c == '/' || c == '=' || c == '-' || c == '_':
		default:
			return false
		}
	}
	return true
}

// hsCRC answers X's (Twitter's) challenge-response check: GET ?crc_token=…
// answered with {"response_token": "sha256=" + base64(HMAC-SHA256(consumer
// secret, crc_token))}, keyed with the secret X signs with now: the one the
// source's newest stored event (not a duplicate) was signed with, the first before any (so
// during a rotation, once X signs with the new secret, its CRC is answered
// with it, wherever it is listed; it was always the first, and X disables a
// webhook whose CRC fails). The answer itself proves the secret; the request
// is not signed, so only token-shaped values are answered (see crcToken).
func hsCRC() handshakeKind {
	return handshakeKind{
		kind: "crc", method: http.MethodGet,
		match: func(req *Request) bool { return query(req).Has("crc_token") },
		answer: func(hc *handshakeContext, req *Request, _ Result) (*Handshake, error) {
			token := query(req).Get("crc_token")
			if !crcToken(token) {
				return nil, fmt.Errorf("%s: %w: crc_token is not 8-256 characters of base64, base64url or a UUID", hc.scheme, ErrSignatureMalformed)
			}
			return jsonAnswer("crc", map[string]string{"response_token": crcResponse(hc.currentSecret(), token)}), nil
		},
		probe: func(hc *handshakeContext) handshakeProbe {
			// Ingress answers with the secret of the newest event it
			// verified: any of the source's secrets is right.
			checks := make([]func(int, http.Header, []byte) error, len(hc.secrets))
			for i, s := range hc.secrets {
				checks[i] = checkJSON(map[string]any{"response_token": crcResponse(s, probeChallenge)})
			}
			return handshakeProbe{method: http.MethodGet, query: url.Values{"crc_token": {probeChallenge}},
				check: func(status int, h http.Header, body []byte) error {
					var err error
					for _, c := range checks {
						if err = c(status, h, body); err == nil {
							return nil
						}
					}
					return err
				}}
		},
	}
}

// zoomEncrypted is Zoom's encryptedToken: hex(HMAC-SHA256(secret token,
// plainToken)).
func zoomEncrypted(secret, plain string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(plain))
	return hex.EncodeToString(m.Sum(nil))
}

// hsZoom answers Zoom's signed endpoint.url_validation event with
// {"plainToken": …, "encryptedToken": hex(HMAC-SHA256(secret, plainToken))},
// keyed with the secret that verified the request.
func hsZoom() handshakeKind {
	return handshakeKind{
		kind: "url_validation", method: http.MethodPost, signed: true,
		match: func(req *Request) bool {
			ev, _ := lookupJSON(req.Body, []string{"event"})
			return ev == "endpoint.url_validation"
		},
		answer: func(hc *handshakeContext, req *Request, res Result) (*Handshake, error) {
			plain, _ := lookupJSON(req.Body, []string{"payload", "plainToken"})
			if !echoable(plain) {
				return nil, fmt.Errorf("%s: %w: payload.plainToken is empty, too long or not printable text", hc.scheme, ErrMalformedPayload)
			}
			return jsonAnswer("url_validation", map[string]string{
				"plainToken": plain, "encryptedToken": zoomEncrypted(hc.secrets[res.SecretIndex], plain),
			}), nil
		},
		probe: func(hc *handshakeContext) handshakeProbe {
			return handshakeProbe{method: http.MethodPost,
				body:  fmt.Appendf(nil, `{"payload":{"plainToken":%q},"event_ts":%d,"event":"endpoint.url_validation"}`, probeChallenge, time.Now().UnixMilli()),
				check: checkJSON(map[string]any{"plainToken": probeChallenge, "encryptedToken": zoomEncrypted(hc.secrets[0], probeChallenge)})}
		},
	}
}

// twitchMessageType is the header saying what a Twitch EventSub message is.
const twitchMessageType = "Twitch-Eventsub-Message-Type"

// hsTwitch answers Twitch EventSub's signed webhook_callback_verification
// with the body's challenge as text.
func hsTwitch() handshakeKind {
	return handshakeKind{
		kind: "callback_verification", method: http.MethodPost, signed: true,
		match: func(req *Request) bool { return req.Header.Get(twitchMessageType) == "webhook_callback_verification" },
		answer: func(hc *handshakeContext, req *Request, _ Result) (*Handshake, error) {
			challenge, _ := lookupJSON(req.Body, []string{"challenge"})
			if !echoable(challenge) {
				return nil, fmt.Errorf("%s: %w: challenge is empty, too long or not printable text", hc.scheme, ErrMalformedPayload)
			}
			return textAnswer("callback_verification", challenge), nil
		},
		probe: func(*handshakeContext) handshakeProbe {
			return handshakeProbe{method: http.MethodPost,
				header: http.Header{
					twitchMessageType:                      {"webhook_callback_verification"},
					"Twitch-Eventsub-Message-Id":           {"e76c6bd4-55c9-4987-8304-da1588d8988b"},
					"Twitch-Eventsub-Message-Retry":        {"0"},
					"Twitch-Eventsub-Subscription-Type":    {"channel.follow"},
					"Twitch-Eventsub-Subscription-Version": {"2"},
				},
				body:  fmt.Appendf(nil, `{"challenge":%q,"subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","status":"webhook_callback_verification_pending","type":"channel.follow","version":"2","condition":{"broadcaster_user_id":"12826"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},"created_at":"2019-11-16T10:11:12.634234626Z"}}`, probeChallenge),
				check: checkText(probeChallenge)}
		},
	}
}

// hsDiscordPing answers a signed Discord interaction of type 1 (PING) with
// {"type": 1} (PONG).
func hsDiscordPing() handshakeKind {
	return handshakeKind{
		kind: "ping", method: http.MethodPost, signed: true,
		match: func(req *Request) bool {
			typ, _ := lookupJSON(req.Body, []string{"type"})
			return typ == "1"
		},
		answer: func(*handshakeContext, *Request, Result) (*Handshake, error) {
			return jsonAnswer("ping", map[string]int{"type": 1}), nil
		},
		probe: func(*handshakeContext) handshakeProbe {
			return handshakeProbe{method: http.MethodPost, body: []byte(`{"type":1,"id":"1181112222333344445","application_id":"1181112222333344440","version":1,"token":"probe"}`),
				check: checkJSON(map[string]any{"type": 1})}
		},
	}
}

// wooSignature is the header of WooCommerce's signature.
const wooSignature = "X-WC-Webhook-Signature"

// wooPing reports whether body is WooCommerce's ping: "webhook_id=" and
// the webhook's decimal id.
func wooPing(body []byte) bool {
	id, ok := strings.CutPrefix(string(body), "webhook_id=")
	if !ok || id == "" || len(id) > 20 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < '0' || id[i] > '9' {
			return false
		}
	}
	return true
}

// hsWooPing answers the ping WooCommerce posts when a webhook is created or
// activated (WC_Webhook::deliver_ping): a POST of the form body
// "webhook_id=N" with no signature header. WooCommerce reports the
// delivery URL as failing unless the answer is exactly 200. It carries no
// signature, so it is answered (with an empty body) and never stored, like
// Dropbox's unsigned challenge; a request carrying X-WC-Webhook-Signature is
// verified as an event instead.
func hsWooPing() handshakeKind {
	return handshakeKind{
		kind: "ping", method: http.MethodPost,
		match: func(req *Request) bool { return req.Header.Get(wooSignature) == "" && wooPing(req.Body) },
		answer: func(*handshakeContext, *Request, Result) (*Handshake, error) {
			return textAnswer("ping", ""), nil
		},
		probe: func(*handshakeContext) handshakeProbe {
			return handshakeProbe{method: http.MethodPost,
				header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}},
				body:   []byte("webhook_id=12"),
				check:  checkText("")}
		},
	}
}

// oktaChallenge is the header of Okta's one-time event hook verification.
const oktaChallenge = "X-Okta-Verification-Challenge"

// hsOkta answers Okta's event hook verification (a GET carrying the hook's
// Authorization header, checked by the scheme) with {"verification": the
// challenge header}.
func hsOkta() handshakeKind {
	return handshakeKind{
		kind: "verification", method: http.MethodGet, signed: true,
		match: func(req *Request) bool { return req.Header.Get(oktaChallenge) != "" },
		answer: func(hc *handshakeContext, req *Request, _ Result) (*Handshake, error) {
			c := req.Header.Get(oktaChallenge)
			if !echoable(c) {
				return nil, fmt.Errorf("%s: %w: %s is too long or not printable text", hc.scheme, ErrSignatureMalformed, oktaChallenge)
			}
			return jsonAnswer("verification", map[string]string{"verification": c}), nil
		},
		probe: func(*handshakeContext) handshakeProbe {
			return handshakeProbe{method: http.MethodGet, header: http.Header{oktaChallenge: {probeChallenge}},
				check: checkJSON(map[string]any{"verification": probeChallenge})}
		},
	}
}
