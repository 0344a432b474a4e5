package verify

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
)

// Canonical spellings of GitLab's X-Gitlab-* headers.
const (
	gitlabTokenHeader = "X-Gitlab-Token" //nolint:gosec // G101: a header name, not a credential
	gitlabUUIDHeader  = "X-Gitlab-Event-Uuid"
	gitlabEventHeader = "X-Gitlab-Event"
)

// gitlabVerifier implements GitLab's scheme, which signs nothing: the
// webhook's secret token is sent as is in X-Gitlab-Token and compared with
// each configured secret. The comparison is of SHA-256 digests in constant
// time, so neither the token's bytes nor its length show in the timing.
// Anyone who sees one request (or the stored headers) can forge others:
// keep it on HTTPS and treat stored X-Gitlab-Token values as secrets.
type gitlabVerifier struct {
	digests [][sha256.Size]byte
	ident   *identity
}

func newGitLab(cfg Config, ident *identity) *gitlabVerifier {
	v := &gitlabVerifier{ident: ident}
	for _, s := range cfg.Secrets {
		v.digests = append(v.digests, sha256.Sum256([]byte(s)))
	}
	return v
}

func (v *gitlabVerifier) Verify(req *Request) (Result, error) {
	token := req.Header.Get(gitlabTokenHeader)
	if token == "" {
		return Result{}, fmt.Errorf("gitlab: %w: no %s header", ErrSignatureMissing, gitlabTokenHeader)
	}
	got := sha256.Sum256([]byte(token))
	if req.IgnoreTolerance && strings.HasPrefix(token, storedTokenPrefix) {
		// A stored event: ingress kept only the token's digest.
		b, err := hex.DecodeString(token[len(storedTokenPrefix):])
		if err != nil || len(b) != sha256.Size {
			return Result{}, fmt.Errorf("gitlab: %w: stored %s is not a sha256 digest", ErrSignatureMalformed, gitlabTokenHeader)
		}
		copy(got[:], b)
	}
	index := -1
	for i := range v.digests {
		if subtle.ConstantTimeCompare(got[:], v.digests[i][:]) == 1 {
			index = i
			break
		}
	}
	if index < 0 {
		return Result{}, fmt.Errorf("gitlab: %w: %s matches no configured secret", ErrSignatureMismatch, gitlabTokenHeader)
	}
	id, typ, err := v.ident.resolve("gitlab", req, nil, func(needID bool) (string, string, error) {
		// X-Gitlab-Event-UUID is the same across GitLab's retries. GitLab
		// releases before it existed get the synthetic body hash.
		id := req.Header.Get(gitlabUUIDHeader)
		if id == "" {
			id = syntheticID(req.Body)
		} else if needID {
			if err := checkEventID("gitlab", gitlabUUIDHeader+" header", id); err != nil {
				return "", "", err
			}
		}
		return id, req.Header.Get(gitlabEventHeader), nil
	})
	if err != nil {
		return Result{}, err
	}
	return Result{EventID: id, EventType: typ, SecretIndex: index}, nil
}

const storedTokenPrefix = "sha256:"

// RedactForStorage implements StorageRedactor: X-Gitlab-Token is stored as
// "sha256:<hex>", so whoever reads the stored headers cannot replay it.
func (v *gitlabVerifier) RedactForStorage(h http.Header) http.Header {
	token := h.Get(gitlabTokenHeader)
	if token == "" {
		return h
	}
	out := h.Clone()
	sum := sha256.Sum256([]byte(token))
	out.Set(gitlabTokenHeader, storedTokenPrefix+hex.EncodeToString(sum[:]))
	return out
}

// SignGitLab returns the headers GitLab would send with the secret token
// token. Empty eventUUID or event ("Push Hook") leave that header out.
func SignGitLab(token, eventUUID, event string) http.Header {
	h := make(http.Header, 3)
	h.Set(gitlabTokenHeader, token)
	if eventUUID != "" {
		h.Set(gitlabUUIDHeader, eventUUID)
	}
	if event != "" {
		h.Set(gitlabEventHeader, event)
	}
	return h
}
