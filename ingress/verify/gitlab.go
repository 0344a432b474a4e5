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
	// gitlabIdempotencyHeader is the same across the retries of one delivery.
	gitlabIdempotencyHeader = "Idempotency-Key"
	gitlabEventHeader       = "X-Gitlab-Event"
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
		// Idempotency-Key (GitLab 17.4 on) is the same across the retries of
		// one delivery and differs between deliveries. X-Gitlab-Event-UUID
		// is not an event's id: GitLab gives every hook fired within one
		// request the same one, and passes a webhook's on to the hooks its
		// receiver's own API calls fire (recursion detection), so a push and
		// the pipeline it triggers can share it. Without Idempotency-Key it
		// is taken with the body's digest: a retry repeats both. Releases
		// with neither get the synthetic body hash.
		id, header := req.Header.Get(gitlabIdempotencyHeader), gitlabIdempotencyHeader
		if id == "" {
			id, header = req.Header.Get(gitlabUUIDHeader), gitlabUUIDHeader
			if id != "" {
				sum := sha256.Sum256(req.Body)
				id += "/" + hex.EncodeToString(sum[:8])
			}
		}
		if id == "" {
			id = syntheticID(req.Body)
		} else if needID {
			if err := checkEventID("gitlab", header+" header", id); err != nil {
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

// gitlabFormerIDs is the gitlab scheme's id rule before Idempotency-Key
// (review helper-77): X-Gitlab-Event-UUID as it is, else the synthetic body
// hash. An event stored under it verifies today with another id (the
// Idempotency-Key, or the UUID with the body's digest); re-verification
// accepts the stored one ([FormerEventIDs]).
func gitlabFormerIDs(header http.Header, body []byte) []string {
	if id := header.Get(gitlabUUIDHeader); id != "" {
		return []string{id}
	}
	return []string{syntheticID(body)}
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

// SignGitLab returns the headers GitLab (17.4 on) would send with the secret
// token token: id as Idempotency-Key (the event's id) and as
// X-Gitlab-Event-UUID. Empty id or event ("Push Hook") leave those headers
// out.
func SignGitLab(token, id, event string) http.Header {
	h := make(http.Header, 4)
	h.Set(gitlabTokenHeader, token)
	if id != "" {
		h.Set(gitlabIdempotencyHeader, id)
		h.Set(gitlabUUIDHeader, id)
	}
	if event != "" {
		h.Set(gitlabEventHeader, event)
	}
	return h
}
