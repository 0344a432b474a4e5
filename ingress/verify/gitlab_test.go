package verify

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

const (
	gitlabToken    = "glwht-7f3a9c1e5b2d4f6a8c0e"
	gitlabOldToken = "glwht-old-00000000000000000"
	gitlabUUID     = "0c2b7f4e-3b8a-4a57-9e61-1d0f4c2a9b31"
)

var gitlabBody = []byte(`{"object_kind":"push","ref":"refs/heads/main","checkout_sha":"da1560886d4f094c3e6c9ef40349f7d38b5d27d7"}`)

func gitlabHeaders(token, uuid, event string) http.Header {
	h := http.Header{}
	for k, v := range map[string]string{"X-Gitlab-Token": token, "Idempotency-Key": uuid, "X-Gitlab-Event-UUID": uuid, "X-Gitlab-Event": event} {
		if v != "" {
			h.Set(k, v)
		}
	}
	return h
}

// GitLab signs nothing and has no SDK verifier: the documented check is
// that X-Gitlab-Token equals the configured secret token.
func TestGitLabVerify(t *testing.T) {
	t.Parallel()
	ok := Result{EventID: gitlabUUID, EventType: "Push Hook"}
	runVerifyCases(t, Config{Type: "gitlab", Secrets: []string{gitlabToken}}, gitlabBody, []verifyCase{
		{name: "valid", header: gitlabHeaders(gitlabToken, gitlabUUID, "Push Hook"), wantRes: ok},
		{name: "our signer", header: SignGitLab(gitlabToken, gitlabUUID, "Push Hook"), wantRes: ok},
		{name: "body is not signed", header: gitlabHeaders(gitlabToken, gitlabUUID, "Push Hook"), body: []byte("anything"), wantRes: ok},
		{name: "no uuid: synthetic", header: gitlabHeaders(gitlabToken, "", "Push Hook"), wantRes: Result{EventID: syntheticID(gitlabBody), EventType: "Push Hook"}},
		{name: "idempotency key, not the shared uuid", header: func() http.Header {
			h := gitlabHeaders(gitlabToken, gitlabUUID, "Push Hook")
			h.Set("X-Gitlab-Event-UUID", "shared-by-the-hooks-of-one-request")
			return h
		}(), wantRes: ok},
		{name: "before 17.4: uuid with the body's digest", header: func() http.Header {
			h := gitlabHeaders(gitlabToken, gitlabUUID, "Push Hook")
			h.Del("Idempotency-Key")
			return h
		}(), wantRes: Result{EventID: gitlabUUID + "/" + syntheticID(gitlabBody)[len("sha256:"):len("sha256:")+16], EventType: "Push Hook"}},
		{name: "no timestamp window", header: gitlabHeaders(gitlabToken, gitlabUUID, "Push Hook"), now: testNow.Add(1e5 * time.Hour), wantRes: ok},
		{name: "rotation new token", secrets: []string{gitlabOldToken, gitlabToken}, header: gitlabHeaders(gitlabToken, gitlabUUID, "Push Hook"), wantRes: Result{EventID: gitlabUUID, EventType: "Push Hook", SecretIndex: 1}},
		{name: "rotation old token", secrets: []string{gitlabOldToken, gitlabToken}, header: gitlabHeaders(gitlabOldToken, gitlabUUID, "Push Hook"), wantRes: ok},

		{name: "one byte changed", header: gitlabHeaders(gitlabToken[:len(gitlabToken)-1]+"f", gitlabUUID, "Push Hook"), wantErr: ErrSignatureMismatch},
		{name: "prefix of the token", header: gitlabHeaders(gitlabToken[:10], gitlabUUID, "Push Hook"), wantErr: ErrSignatureMismatch},
		{name: "token plus a byte", header: gitlabHeaders(gitlabToken+"x", gitlabUUID, "Push Hook"), wantErr: ErrSignatureMismatch},
		{name: "case changed", header: gitlabHeaders("GLWHT-7f3a9c1e5b2d4f6a8c0e", gitlabUUID, "Push Hook"), wantErr: ErrSignatureMismatch},
		{name: "surrounding space", header: gitlabHeaders(" "+gitlabToken, gitlabUUID, "Push Hook"), wantErr: ErrSignatureMismatch},
		{name: "no token", header: gitlabHeaders("", gitlabUUID, "Push Hook"), wantErr: ErrSignatureMissing},
		{name: "nil header", header: nil, wantErr: ErrSignatureMissing},
		{name: "uuid not UTF-8", header: gitlabHeaders(gitlabToken, "\xff\xfe\xfd\xfc", "Push Hook"), wantErr: ErrMalformedPayload},
	})
}

func FuzzGitLab(f *testing.F) {
	f.Add(gitlabToken, gitlabUUID, gitlabBody)
	f.Add("", "", []byte{})
	f.Add(gitlabToken+"\x00", "\x00", []byte("x"))
	secrets := []string{gitlabOldToken, gitlabToken}
	v := mustNew(f, Config{Type: "gitlab", Secrets: secrets})
	f.Fuzz(func(t *testing.T, token, uuid string, body []byte) {
		req := &Request{Header: http.Header{"X-Gitlab-Token": {token}, "X-Gitlab-Event-Uuid": {uuid}}, Body: body}
		res, err := v.Verify(req)
		if err == nil {
			if token != secrets[res.SecretIndex] {
				t.Fatalf("accepted token %q", token)
			}
			if uuid != "" && res.EventID != uuid+"/"+syntheticID(body)[len("sha256:"):len("sha256:")+16] || uuid == "" && res.EventID != syntheticID(body) {
				t.Fatalf("EventID %q for uuid %q", res.EventID, uuid)
			}
		} else {
			if Reason(err) == "unknown" {
				t.Fatalf("error without sentinel: %v", err)
			}
			checkErrorSafe(t, err, secrets, req)
		}
	})
}

func TestGitLabStoredTokenIsADigestThatReverifies(t *testing.T) {
	t.Parallel()
	cfg := Config{Type: "gitlab", Secrets: []string{"old-token", "gitlab-token-1"}}
	v, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := SignGitLab("gitlab-token-1", "uuid-1", "Push Hook")
	stored := v.(StorageRedactor).RedactForStorage(h)
	if got := stored.Get("X-Gitlab-Token"); !strings.HasPrefix(got, "sha256:") || strings.Contains(got, "gitlab-token-1") {
		t.Fatalf("stored token %q", got)
	}
	if h.Get("X-Gitlab-Token") != "gitlab-token-1" {
		t.Fatal("RedactForStorage changed the request's own headers")
	}
	res, err := Reverify(cfg, stored, []byte(`{}`), "")
	if err != nil || res.SecretIndex != 1 {
		t.Fatalf("Reverify of the stored digest: %+v, %v", res, err)
	}
	// The digest is no credential on a live request.
	if _, err := v.Verify(&Request{Header: stored, Body: []byte(`{}`)}); !errors.Is(err, ErrSignatureMismatch) {
		t.Fatalf("live request with the stored digest: %v, want mismatch", err)
	}
	// A digest of another token does not re-verify.
	other := v.(StorageRedactor).RedactForStorage(SignGitLab("forged", "uuid-1", "Push Hook"))
	if _, err := Reverify(cfg, other, []byte(`{}`), ""); !errors.Is(err, ErrSignatureMismatch) {
		t.Fatalf("Reverify of a wrong digest: %v", err)
	}
}
