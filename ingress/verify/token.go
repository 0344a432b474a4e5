package verify

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// tokenConfig says where a preset of scheme schemeToken finds the token
// it compares with Config.Secrets: a header, or a field of every item of
// an array in the JSON body. Set header, or items and field.
type tokenConfig struct {
	// header carries the token as is (Okta's Authorization).
	header string
	// items names the body's array of notifications (Microsoft Graph's
	// value) and field the string every item must carry (clientState).
	items, field string
}

// tokenVerifier implements the schemes that sign nothing but send a
// shared token, which is compared with each configured secret: in a
// header (Okta event hooks, like GitLab's X-Gitlab-Token) or in every
// notification of the body (Microsoft Graph's clientState). The
// comparison is of SHA-256 digests in constant time, so neither the
// token's bytes nor its length show in the timing. The body is not
// signed: anyone who sees one request can forge others, so keep the
// endpoint on HTTPS and treat the stored token as a secret (a header
// token is stored as its digest, see RedactForStorage; a body token is
// part of the stored body).
type tokenVerifier struct {
	scheme  string
	cfg     tokenConfig
	header  string // canonical, "" for a body token
	digests [][sha256.Size]byte
	ident   *identity
}

func newToken(p *preset, cfg Config, ident *identity) *tokenVerifier {
	v := &tokenVerifier{scheme: p.name, cfg: p.token, ident: ident}
	if p.token.header != "" {
		v.header = http.CanonicalHeaderKey(p.token.header)
	}
	for _, s := range cfg.Secrets {
		v.digests = append(v.digests, sha256.Sum256([]byte(s)))
	}
	return v
}

// match returns the index of the secret whose digest is got, or -1.
func (v *tokenVerifier) match(got [sha256.Size]byte) int {
	index := -1
	for i := range v.digests {
		if subtle.ConstantTimeCompare(got[:], v.digests[i][:]) == 1 && index < 0 {
			index = i
		}
	}
	return index
}

func (v *tokenVerifier) checkSignature(req *Request) (int, error) {
	if v.header == "" {
		return v.checkBody(req)
	}
	token := req.Header.Get(v.header)
	if token == "" {
		return -1, fmt.Errorf("%s: %w: no %s header", v.scheme, ErrSignatureMissing, v.header)
	}
	got := sha256.Sum256([]byte(token))
	if req.IgnoreTolerance && strings.HasPrefix(token, storedTokenPrefix) {
		// A stored event: ingress kept only the token's digest.
		b, err := hex.DecodeString(token[len(storedTokenPrefix):])
		if err != nil || len(b) != sha256.Size {
			return -1, fmt.Errorf("%s: %w: stored %s is not a sha256 digest", v.scheme, ErrSignatureMalformed, v.header)
		}
		copy(got[:], b)
	}
	index := v.match(got)
	if index < 0 {
		return -1, fmt.Errorf("%s: %w: %s matches no configured secret", v.scheme, ErrSignatureMismatch, v.header)
	}
	return index, nil
}

// checkBody checks that every item of the body's array carries a
// configured secret (each may carry a different one: Microsoft Graph
// batches the notifications of several subscriptions to one URL) and
// returns the index of the first item's.
func (v *tokenVerifier) checkBody(req *Request) (int, error) {
	items, err := v.bodyItems(req.Body)
	if err != nil {
		return -1, err
	}
	first := -1
	for n, item := range items {
		raw, ok := item[v.cfg.field]
		if !ok {
			return -1, fmt.Errorf("%s: %w: %s[%d] has no %s", v.scheme, ErrSignatureMissing, v.cfg.items, n, v.cfg.field)
		}
		var token string
		if json.Unmarshal(raw, &token) != nil || token == "" {
			return -1, fmt.Errorf("%s: %w: %s[%d].%s is not a non-empty string", v.scheme, ErrSignatureMalformed, v.cfg.items, n, v.cfg.field)
		}
		index := v.match(sha256.Sum256([]byte(token)))
		if index < 0 {
			return -1, fmt.Errorf("%s: %w: %s[%d].%s matches no configured secret", v.scheme, ErrSignatureMismatch, v.cfg.items, n, v.cfg.field)
		}
		if first < 0 {
			first = index
		}
	}
	return first, nil
}

// bodyItems decodes the body's array of notifications: at least one, each
// an object.
func (v *tokenVerifier) bodyItems(body []byte) ([]map[string]json.RawMessage, error) {
	var doc map[string]json.RawMessage
	if !jsonObject(body) || json.Unmarshal(body, &doc) != nil {
		return nil, fmt.Errorf("%s: %w: the body is not a JSON object carrying %s[].%s", v.scheme, ErrSignatureMissing, v.cfg.items, v.cfg.field)
	}
	raw, ok := doc[v.cfg.items]
	if !ok {
		return nil, fmt.Errorf("%s: %w: the body has no %s array", v.scheme, ErrSignatureMissing, v.cfg.items)
	}
	var items []map[string]json.RawMessage
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, fmt.Errorf("%s: %w: %s is not an array of objects", v.scheme, ErrSignatureMalformed, v.cfg.items)
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%s: %w: %s is empty", v.scheme, ErrSignatureMissing, v.cfg.items)
	}
	for n, item := range items {
		if item == nil {
			return nil, fmt.Errorf("%s: %w: %s[%d] is not an object", v.scheme, ErrSignatureMalformed, v.cfg.items, n)
		}
	}
	return items, nil
}

func (v *tokenVerifier) Verify(req *Request) (Result, error) {
	index, err := v.checkSignature(req)
	if err != nil {
		return Result{}, err
	}
	return resolveEvent(v.scheme, v.ident, req, index)
}

// RedactForStorage implements StorageRedactor for a header token: it is
// stored as "sha256:<hex>", as GitLab's, so whoever reads the stored
// headers cannot replay it, and Reverify still checks it. A body token
// stays in the stored body.
func (v *tokenVerifier) RedactForStorage(h http.Header) http.Header {
	if v.header == "" {
		return h
	}
	token := h.Get(v.header)
	if token == "" {
		return h
	}
	out := h.Clone()
	sum := sha256.Sum256([]byte(token))
	out.Set(v.header, storedTokenPrefix+hex.EncodeToString(sum[:]))
	return out
}

// signToken puts the token secret where the provider sends it: the
// header, or every item of the body's array (an item that already carries
// it is left as is, so a body signed twice is unchanged).
func (p *preset) signToken(secret string, h http.Header, body []byte) ([]byte, error) {
	if p.token.header != "" {
		h.Set(p.token.header, secret)
		return body, nil
	}
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // numbers are encoded again as they came
	if !jsonObject(body) || dec.Decode(&doc) != nil {
		return nil, fmt.Errorf("body: not a JSON object with a %s array to put %s into", p.token.items, p.token.field)
	}
	items, ok := doc[p.token.items].([]any)
	if !ok || len(items) == 0 {
		return nil, fmt.Errorf("body: no %s array of objects to put %s into", p.token.items, p.token.field)
	}
	changed := false
	for _, it := range items {
		item, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("body: an item of %s is not an object", p.token.items)
		}
		if item[p.token.field] != secret {
			item[p.token.field] = secret
			changed = true
		}
	}
	if !changed {
		return body, nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, errors.New("body: cannot encode it again")
	}
	return out, nil
}
