package ingress_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestXCRCAfterRotationUsesTheSecretXSignsWith: once X's events verify
// with a later secret, its CRC is answered with that secret.
//
// Regression test (review helper-106; fixed: the text describes the
// behaviour before the fix). X's CRC (GET ?crc_token=) is always answered with secrets[0]
// (ingress/verify/handshake.go:265, hsCRC: crcResponse(hc.secrets[0], …)),
// whatever secret X actually signs with. The documented way to rotate is to
// list several secrets, every one tried (docs/configuration.md
// "sources[].secrets: one or more; each is tried (rotation)", verify.Config
// "a new secret can be added before the old one is removed"): an operator
// who regenerates the consumer secret and appends the new one
// (secrets: [old, new]) sees X's events verified with the new one
// (secret_index 1) but every CRC answered with the old one. X then fails its
// (hourly) CRC, marks the webhook invalid and stops delivering: events are
// lost, and nothing on Inlet's side (no 4xx, no log of a failed check) says
// so.
//
// Expected: once an X event has verified with secrets[i], the CRC is answered
// keyed with secrets[i] (the secret X is evidently using).
func TestXCRCAfterRotationUsesTheSecretXSignsWith(t *testing.T) {
	t.Parallel()
	const oldSecret, newSecret = "x-consumer-secret-old", "x-consumer-secret-new"
	b := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Sources = append(c.Sources, sources.Source{Name: "x",
			Config: verify.Config{Type: "x", Secrets: []string{oldSecret, newSecret}}})
	})
	mac := func(secret, msg string) string {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(msg))
		return "sha256=" + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}

	post := func(body []byte, secret string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, b.url+"/webhooks/x", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Twitter-Webhooks-Signature", mac(secret, string(body)))
		if code, answer, _ := do(t, req); code != http.StatusOK {
			t.Fatalf("X event: %d %s, want 200", code, answer)
		}
	}
	// An event of before the rotation, signed with the old secret.
	old := []byte(`{"for_user_id":"2244994945","tweet_create_events":[{"id_str":"0","text":"before"}]}`)
	post(old, oldSecret)
	// X has switched to the new consumer secret: its event verifies with
	// secrets[1] and is stored.
	body := []byte(`{"for_user_id":"2244994945","tweet_create_events":[{"id_str":"1","text":"hello"}]}`)
	post(body, newSecret)
	var idx int
	if err := b.admin.QueryRow(context.Background(),
		`SELECT secret_index FROM webhook_ingress.events WHERE provider = 'x' ORDER BY id DESC LIMIT 1`).Scan(&idx); err != nil || idx != 1 {
		t.Fatalf("stored secret_index %d (%v), want 1", idx, err)
	}
	// Someone replays the old event (X's signatures carry no time): a
	// duplicate, which must not move the CRC back to the old secret.
	post(old, oldSecret)

	// X's next CRC: X checks the answer against the new secret.
	const token = "9b4507b3-9040-4669-9ca3-6b94edb50553"
	get, _ := http.NewRequest(http.MethodGet, b.url+"/webhooks/x?crc_token="+token, nil)
	code, answer, _ := do(t, get)
	if code != http.StatusOK {
		t.Fatalf("CRC: %d %s", code, answer)
	}
	var got struct {
		ResponseToken string `json:"response_token"`
	}
	if err := json.Unmarshal([]byte(answer), &got); err != nil {
		t.Fatal(err)
	}
	if want := mac(newSecret, token); got.ResponseToken != want {
		keyed := "an unknown key"
		if got.ResponseToken == mac(oldSecret, token) {
			keyed = "the old secret (secrets[0])"
		}
		t.Errorf("CRC answered with %s although X's events verify with secrets[1]: X's CRC check fails and it disables the webhook", keyed)
	}
}
