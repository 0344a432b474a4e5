package verify

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // G505: Twilio signs with HMAC-SHA1
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

const (
	twilioSignatureHeader   = "X-Twilio-Signature"
	twilioIdempotencyHeader = "I-Twilio-Idempotency-Token"
	twilioBodyHashParam     = "bodySHA256"
)

// twilioVerifier implements Twilio's request validation: HMAC-SHA1, keyed
// with the account's auth token, base64 encoded, over the URL Twilio
// requested followed by the form parameters of the body, sorted by name,
// each written as name+value. A repeated name contributes every value,
// sorted, as Twilio signs it (twilio-go's validator signs only the first
// value and rejects such requests; twilio-node and twilio-python sign them
// all). A JSON webhook instead carries bodySHA256 (hex SHA-256 of the body)
// in the URL's query: the signature covers the URL alone and the body must
// hash to that value.
//
// As in Twilio's own SDKs, the URL is also tried with the port toggled
// (dropped when present, the scheme's default added when not), because
// Twilio has signed both spellings.
type twilioVerifier struct {
	keys       []*hashKey
	publicBase string // Config.PublicURL without its fragment, "" if unset
	ident      *identity
}

func newTwilio(cfg Config, ident *identity) (*twilioVerifier, error) {
	v := &twilioVerifier{ident: ident}
	if cfg.PublicURL != "" {
		base, err := twilioBaseURL(cfg.PublicURL)
		if err != nil {
			return nil, fmt.Errorf("public_url: %w", err)
		}
		v.publicBase = base
	}
	for _, s := range cfg.Secrets {
		v.keys = append(v.keys, newHashKey(sha1.New, []byte(s)))
	}
	return v, nil
}

// twilioBaseURL checks a configured public URL and returns it as written,
// minus any fragment. Errors do not quote it: it could hold credentials.
func twilioBaseURL(s string) (string, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", errors.New("not a valid URL")
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return "", errors.New("must be an absolute http:// or https:// URL, as configured in Twilio")
	case u.User != nil:
		return "", errors.New("must not contain user:password@ (Twilio sends credentials in the Authorization header)")
	case u.RawQuery != "" || u.ForceQuery:
		return "", errors.New("must not have a query string: the query each request arrives with is what Twilio signed, and is used as received")
	}
	base, _, _ := strings.Cut(s, "#") // connection overrides: never sent, never signed
	return base, nil
}

// signedURL is the URL Twilio signed: the request URL, or the public base
// followed by the request's query string (publicSignedURL; the base never
// has a query of its own, twilioBaseURL refuses one).
func (v *twilioVerifier) signedURL(reqURL string) string {
	return publicSignedURL(v.publicBase, reqURL)
}

func (v *twilioVerifier) Verify(req *Request) (Result, error) {
	header := req.Header.Get(twilioSignatureHeader)
	if header == "" {
		return Result{}, fmt.Errorf("twilio: %w: no %s header", ErrSignatureMissing, twilioSignatureHeader)
	}
	sig, ok := decodeTwilioSignature(header)
	if !ok {
		return Result{}, fmt.Errorf("twilio: %w: %s is not the base64 of 20 bytes", ErrSignatureMalformed, twilioSignatureHeader)
	}
	signedURL := v.signedURL(req.URL)
	if signedURL == "" {
		return Result{}, fmt.Errorf("twilio: %w: no request URL to check the signature against (set public_url)", ErrSignatureMismatch)
	}

	bodyHash, isJSON := twilioBodyHash(signedURL)
	var form url.Values
	params := [][]byte{nil}
	if !isJSON {
		var err error
		if form, err = url.ParseQuery(string(req.Body)); err != nil {
			return Result{}, fmt.Errorf("twilio: %w: body is not form-encoded and the URL has no %s", ErrSignatureMismatch, twilioBodyHashParam)
		}
		params = twilioParams(form)
	}
	urls := twilioURLVariants(signedURL)

	index := -1
	var buf [sha1.Size]byte
search:
	for i, k := range v.keys {
		for _, u := range urls {
			for _, p := range params {
				if hmac.Equal(sig[:], k.sum(buf[:0], []byte(u), p)) {
					index = i
					break search
				}
			}
		}
	}
	if index < 0 {
		return Result{}, fmt.Errorf("twilio: %w", ErrSignatureMismatch)
	}
	if isJSON {
		// The signature covers bodySHA256, so only the body is left to check.
		want, ok := decodeHex32(bodyHash)
		got := sha256.Sum256(req.Body)
		if !ok || !hmac.Equal(want[:], got[:]) {
			return Result{}, fmt.Errorf("twilio: %w: body does not hash to the signed %s", ErrSignatureMismatch, twilioBodyHashParam)
		}
	}

	id, typ, err := v.ident.resolve("twilio", req, form, func(needID bool) (string, string, error) {
		return twilioEvent(req, form, needID)
	})
	if err != nil {
		return Result{}, err
	}
	return Result{EventID: id, EventType: typ, SecretIndex: index}, nil
}

// twilioEvent is Twilio's identity of a verified request. Twilio has no
// event id: a MessageSid or CallSid names the message or call, and every
// status callback of one message or call repeats it, so deduplicating on
// it would drop all but the first ("sent" would swallow "delivered").
// The id is the I-Twilio-Idempotency-Token header, which Twilio keeps
// across its retries of one webhook, else the synthetic body hash (a retry
// repeats the same bytes; distinct callbacks differ in their status). The
// type is MessageStatus, SmsStatus or CallStatus, whichever comes first.
func twilioEvent(req *Request, form url.Values, needID bool) (id, typ string, err error) {
	for _, name := range []string{"MessageStatus", "SmsStatus", "CallStatus"} {
		if typ = form.Get(name); typ != "" {
			break
		}
	}
	if !needID {
		return "", typ, nil
	}
	if id = req.Header.Get(twilioIdempotencyHeader); id == "" {
		return syntheticID(req.Body), typ, nil
	}
	if err := checkEventID("twilio", twilioIdempotencyHeader+" header", id); err != nil {
		return "", "", err
	}
	return id, typ, nil
}

func decodeTwilioSignature(s string) (out [sha1.Size]byte, ok bool) {
	if len(s) != base64.StdEncoding.EncodedLen(sha1.Size) || strings.ContainsAny(s, "\r\n") {
		return out, false
	}
	var buf [sha1.Size + 1]byte
	n, err := standardSigEncoding.Decode(buf[:], []byte(s))
	if err != nil || n != sha1.Size {
		return out, false
	}
	copy(out[:], buf[:n])
	return out, true
}

// twilioBodyHash returns the bodySHA256 query parameter of u, and whether
// there is one (the JSON variant). Like Twilio's SDKs it takes the first.
func twilioBodyHash(u string) (string, bool) {
	_, query, ok := strings.Cut(u, "?")
	if !ok {
		return "", false
	}
	for rest := query; rest != ""; {
		var pair string
		pair, rest, _ = strings.Cut(rest, "&")
		key, val, _ := strings.Cut(pair, "=")
		if k, err := url.QueryUnescape(key); err != nil || k != twilioBodyHashParam {
			continue
		}
		if v, err := url.QueryUnescape(val); err == nil {
			return v, true
		}
		return "", true
	}
	return "", false
}

// twilioParams returns the signed parameter string of form: names in byte
// order, each followed by its value, every value of a repeated name in
// byte order. When a name repeats the same value, a second string with
// duplicates removed follows, as twilio-node builds it.
func twilioParams(form url.Values) [][]byte {
	names := make([]string, 0, len(form))
	for name := range form {
		names = append(names, name)
	}
	slices.Sort(names)
	var all, dedup []byte
	dups := false
	for _, name := range names {
		vals := slices.Clone(form[name])
		slices.Sort(vals)
		for i, val := range vals {
			all = append(all, name...)
			all = append(all, val...)
			if i > 0 && vals[i-1] == val {
				dups = true
				continue
			}
			dedup = append(dedup, name...)
			dedup = append(dedup, val...)
		}
	}
	if dups {
		return [][]byte{all, dedup}
	}
	return [][]byte{all}
}

// twilioURLVariants returns u and, where one exists, u with the port
// toggled: dropped if u has one, the scheme's default added if not.
func twilioURLVariants(u string) []string {
	i := strings.Index(u, "://")
	if i < 0 {
		return []string{u}
	}
	hostStart := i + 3
	hostEnd := len(u)
	if j := strings.IndexAny(u[hostStart:], "/?#"); j >= 0 {
		hostEnd = hostStart + j
	}
	authority := u[hostStart:hostEnd]
	at := strings.LastIndexByte(authority, '@') + 1 // userinfo, if any, stays
	hostport := authority[at:]
	if c := strings.LastIndexByte(hostport, ':'); c >= 0 && !strings.Contains(hostport[c:], "]") {
		return []string{u, u[:hostStart+at+c] + u[hostEnd:]}
	}
	var port string
	switch strings.ToLower(u[:i]) {
	case "https":
		port = ":443"
	case "http":
		port = ":80"
	default:
		return []string{u}
	}
	return []string{u, u[:hostEnd] + port + u[hostEnd:]}
}

// SignTwilio returns the X-Twilio-Signature header Twilio would send when
// requesting requestURL with body, signing with authToken. body must be
// form-encoded, unless requestURL carries bodySHA256 (see
// [SignTwilioJSON]), in which case only the URL is signed. requestURL is
// the URL Twilio calls: public_url plus the query string when Inlet is
// behind a proxy.
func SignTwilio(authToken, requestURL string, body []byte) (http.Header, error) {
	params := []byte(nil)
	if _, isJSON := twilioBodyHash(requestURL); !isJSON {
		form, err := parseForm(body)
		if err != nil {
			return nil, err
		}
		params = twilioParams(form)[0]
	}
	mac := newHashKey(sha1.New, []byte(authToken)).sum(nil, []byte(requestURL), params)
	h := make(http.Header, 1)
	h.Set(twilioSignatureHeader, base64.StdEncoding.EncodeToString(mac))
	return h, nil
}

// SignTwilioJSON is SignTwilio for a JSON webhook: it returns requestURL
// with the bodySHA256 query parameter Twilio adds, and the signature of
// that URL.
func SignTwilioJSON(authToken, requestURL string, body []byte) (signedURL string, h http.Header) {
	sum := sha256.Sum256(body)
	sep := "?"
	if strings.Contains(requestURL, "?") {
		sep = "&"
	}
	signedURL = requestURL + sep + twilioBodyHashParam + "=" + hex.EncodeToString(sum[:])
	mac := newHashKey(sha1.New, []byte(authToken)).sum(nil, []byte(signedURL))
	h = make(http.Header, 1)
	h.Set(twilioSignatureHeader, base64.StdEncoding.EncodeToString(mac))
	return signedURL, h
}

func parseForm(body []byte) (url.Values, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, errors.New("body: not application/x-www-form-urlencoded")
	}
	return form, nil
}
