package verify

import (
	"crypto/hmac"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
)

// Header names are in canonical form (X-Github-*, not GitHub's X-GitHub-*
// spelling): http.Header.Get allocates to canonicalize any other form.
const (
	githubSignatureHeader = "X-Hub-Signature-256" // "sha256=<hex>"
	githubSHA1Header      = "X-Hub-Signature"     // legacy SHA-1; never used
	githubDeliveryHeader  = "X-Github-Delivery"
	githubEventHeader     = "X-Github-Event"
	githubSignaturePrefix = "sha256="
)

// githubVerifier implements GitHub's scheme: HMAC-SHA256 over the raw body,
// hex encoded. GitHub signs no timestamp, so there is no replay window to
// check; deduplication on the delivery id is what stops replays.
type githubVerifier struct {
	keys  []*macKey
	ident *identity
}

func newGitHub(cfg Config, ident *identity) *githubVerifier {
	v := &githubVerifier{ident: ident}
	v.keys = macKeys(cfg.Secrets)
	return v
}

func (v *githubVerifier) Verify(req *Request) (Result, error) {
	header := req.Header.Get(githubSignatureHeader)
	if header == "" {
		if req.Header.Get(githubSHA1Header) != "" {
			return Result{}, fmt.Errorf("github: %w: no %s header (SHA-1 %s is not accepted)",
				ErrSignatureMissing, githubSignatureHeader, githubSHA1Header)
		}
		return Result{}, fmt.Errorf("github: %w: no %s header", ErrSignatureMissing, githubSignatureHeader)
	}
	hexSig, ok := strings.CutPrefix(header, githubSignaturePrefix)
	if !ok {
		return Result{}, fmt.Errorf("github: %w: %s lacks the %q prefix",
			ErrSignatureMalformed, githubSignatureHeader, githubSignaturePrefix)
	}
	sig, ok := decodeHex32(hexSig)
	if !ok {
		return Result{}, fmt.Errorf("github: %w: %s is not 64 hex digits",
			ErrSignatureMalformed, githubSignatureHeader)
	}

	index := -1
	for i, k := range v.keys {
		mac := k.sum(req.Body)
		if hmac.Equal(sig[:], mac[:]) {
			index = i
			break
		}
	}
	if index < 0 {
		return Result{}, fmt.Errorf("github: %w", ErrSignatureMismatch)
	}

	id, typ, err := v.ident.resolve("github", req, nil, func(needID bool) (string, string, error) {
		delivery := req.Header.Get(githubDeliveryHeader)
		if needID {
			if err := checkEventID("github", githubDeliveryHeader+" header", delivery); err != nil {
				return "", "", err
			}
		}
		return delivery, req.Header.Get(githubEventHeader), nil
	})
	if err != nil {
		return Result{}, err
	}
	return Result{EventID: id, EventType: typ, SecretIndex: index}, nil
}

// SignGitHub returns the headers GitHub would send for body when signing with
// secret. Empty deliveryID or event leave that header out.
func SignGitHub(secret string, deliveryID, event string, body []byte) http.Header {
	mac := newMACKey([]byte(secret)).sum(body)
	h := make(http.Header, 3)
	h.Set(githubSignatureHeader, githubSignaturePrefix+hex.EncodeToString(mac[:]))
	if deliveryID != "" {
		h.Set(githubDeliveryHeader, deliveryID)
	}
	if event != "" {
		h.Set(githubEventHeader, event)
	}
	return h
}
