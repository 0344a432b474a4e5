package relay_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/relay"
	"github.com/inlet-dev/inlet/schema"
)

// TestRelayXCRCFollowsTheSecretXSignsWith: the relay answers X's CRC with
// the secret of the newest event it relayed that the ingress stored.
//
// Regression test (review helper-114; fixed: the text describes the
// behaviour before the fix). A regression of fdb5b4a "X's CRC secret moves only with a newly
// stored event"): the secret X's CRC is answered with used to move inside
// presetVerifier.Verify, for every verified event. The fix moved it to
// presetVerifier.SecretConfirmed, which only ingress calls
// (ingress/server.go accepted, after a store). `inlet relay` answers X's
// GET ?crc_token= itself (relay/relay.go:259, hs.Write) with its own
// verifier, and never calls SecretConfirmed (relay/relay.go ~278-290, the
// 2xx case). So behind a relay the CRC is now answered with secrets[0]
// forever: during the documented rotation (secrets: [old, new]) X signs its
// events with the new secret, the relay verifies and forwards them, the
// customer's ingress stores them, and X's next CRC is answered with the OLD
// secret; X fails the CRC and disables the webhook (events lost). Before
// fdb5b4a the relay followed the rotation.
//
// Expected: once the relay has forwarded an event signed with secrets[i]
// that the ingress answered {"status":"stored"}, the relay answers X's CRC
// keyed with secrets[i], as ingress does.
func TestRelayXCRCFollowsTheSecretXSignsWith(t *testing.T) {
	t.Parallel()
	const oldSecret, newSecret = "x-consumer-secret-old", "x-consumer-secret-new"
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	pool, err := database.Open(ctx, dbURL, database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	xsrc := func(relaySecrets ...string) []sources.Source {
		return []sources.Source{{Name: "x", Config: verify.Config{Type: "x", Secrets: []string{oldSecret, newSecret}}, RelaySecrets: relaySecrets}}
	}
	ing, err := ingress.New(ingress.Config{
		Section: ingress.Section{MaxBodyBytes: 1 << 20, StoreTimeout: 10 * time.Second},
		Sources: xsrc(relaySecret),
		Store:   ingress.NewPGStore(pool, nil),
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(ing.Handler())
	t.Cleanup(hs.Close)
	srv, err := relay.New(relay.Config{
		Section: relay.Section{Target: hs.URL, AllowInsecureTarget: true, Secrets: []string{relaySecret},
			Timeout: 5 * time.Second, MaxBodyBytes: 4 << 10},
		Sources: xsrc(),
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	rs := httptest.NewServer(srv.Handler())
	t.Cleanup(rs.Close)

	mac := func(secret, msg string) string {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(msg))
		return "sha256=" + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	// X has switched to the new consumer secret: its event, through the
	// relay, verifies with secrets[1] and is stored by the ingress.
	body := []byte(`{"for_user_id":"2244994945","tweet_create_events":[{"id_str":"1","text":"hello"}]}`)
	req, _ := http.NewRequest(http.MethodPost, rs.URL+"/webhooks/x", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Twitter-Webhooks-Signature", mac(newSecret, string(body)))
	if code, answer, _ := do(t, req); code != http.StatusOK || !bytes.Contains([]byte(answer), []byte(`"stored"`)) {
		t.Fatalf("X event through the relay: %d %s, want 200 stored", code, answer)
	}

	// X's next CRC, answered by the relay.
	const token = "9b4507b3-9040-4669-9ca3-6b94edb50553"
	get, _ := http.NewRequest(http.MethodGet, rs.URL+"/webhooks/x?crc_token="+token, nil)
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
	if got.ResponseToken != mac(newSecret, token) {
		keyed := "an unknown key"
		if got.ResponseToken == mac(oldSecret, token) {
			keyed = "the old secret (secrets[0])"
		}
		t.Errorf("relay answered X's CRC with %s although the event it just relayed (stored by the ingress) was signed with secrets[1]: "+
			"X's CRC check fails and it disables the webhook", keyed)
	}
}
