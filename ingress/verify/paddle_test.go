//go:build !fuzzonly

package verify

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	paddle "github.com/PaddleHQ/paddle-go-sdk/v4"
)

const (
	paddleSecret    = "pdl_ntfset_01gkpjp8bkm3tm53kdgkx6sms7_6h3qd3uFSi9YCD3OLYAShQI90XTI5vEI"
	paddleOldSecret = "pdl_ntfset_01gkpjp8bkm3tm53kdgkx6sms7_OLDOLDOLDOLDOLDOLDOLDOLDOLD0"
)

var paddleBody = []byte(`{"event_id":"evt_01h8bkrw2b6e2p8a7b2w9yxk8t","event_type":"transaction.completed","occurred_at":"2023-11-14T22:13:20.000000Z","notification_id":"ntf_01h8bkrw5v8tv7k7yh6wz7q9zf","data":{"id":"txn_01h8bkrpy4f1y4xptw3dt8rwwc","status":"completed"}}`)

// paddleOracle computes the documented h1 independently:
// hex(HMAC-SHA256(secret, ts + ":" + body)).
func paddleOracle(secret, ts string, body []byte) string {
	return hex.EncodeToString(hmacOf(sha256.New, secret, ts+":"+string(body)))
}

func paddleHeaderOf(v string) http.Header {
	h := http.Header{}
	if v != "" {
		h.Set("Paddle-Signature", v)
	}
	return h
}

// paddleSDKAccepts asks paddle-go-sdk's WebhookVerifier, with a 5 minute
// tolerance against the real clock.
func paddleSDKAccepts(t *testing.T, secret string, h http.Header, body []byte) bool {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "https://inlet.example/webhooks/paddle", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	ok, err := paddle.NewWebhookVerifier(secret, paddle.VerifierWithTimestampTolerance(5*time.Minute)).Verify(req)
	return ok && err == nil
}

func TestPaddleVerify(t *testing.T) {
	t.Parallel()
	ts := strconv.FormatInt(testNow.Unix(), 10)
	h1 := paddleOracle(paddleSecret, ts, paddleBody)
	valid := "ts=" + ts + ";h1=" + h1
	wrong := changeHexAt(h1, 4)
	at := func(d time.Duration) http.Header {
		s := strconv.FormatInt(testNow.Add(d).Unix(), 10)
		return paddleHeaderOf("ts=" + s + ";h1=" + paddleOracle(paddleSecret, s, paddleBody))
	}
	signed := func(body string) (http.Header, []byte) {
		return paddleHeaderOf("ts=" + ts + ";h1=" + paddleOracle(paddleSecret, ts, []byte(body))), []byte(body)
	}
	ok := Result{EventID: "evt_01h8bkrw2b6e2p8a7b2w9yxk8t", EventType: "transaction.completed"}
	notJSONH, notJSON := signed("not json")
	noIDH, noID := signed(`{"event_type":"x"}`)

	runVerifyCases(t, Config{Type: "paddle", Secrets: []string{paddleSecret}}, paddleBody, []verifyCase{
		{name: "valid", header: paddleHeaderOf(valid), wantRes: ok},
		{name: "our signer", header: SignPaddle(paddleSecret, testNow, paddleBody), wantRes: ok},
		{name: "h1 before ts", header: paddleHeaderOf("h1=" + h1 + ";ts=" + ts), wantRes: ok},
		{name: "several h1 second valid", header: paddleHeaderOf("ts=" + ts + ";h1=" + wrong + ";h1=" + h1), wantRes: ok},
		{name: "several h1 first valid", header: paddleHeaderOf(valid + ";h1=" + wrong), wantRes: ok},
		{name: "several h1 none valid", header: paddleHeaderOf("ts=" + ts + ";h1=" + wrong + ";h1=" + changeHexAt(h1, 60)), wantErr: ErrSignatureMismatch},
		{name: "unknown element ignored", header: paddleHeaderOf(valid + ";h2=zz"), wantRes: ok},
		{name: "rotation new secret", secrets: []string{paddleOldSecret, paddleSecret}, header: paddleHeaderOf(valid), wantRes: Result{EventID: ok.EventID, EventType: ok.EventType, SecretIndex: 1}},
		{name: "rotation old secret", secrets: []string{paddleOldSecret, paddleSecret}, header: paddleHeaderOf("ts=" + ts + ";h1=" + paddleOracle(paddleOldSecret, ts, paddleBody)), wantRes: ok},

		{name: "body byte changed", header: paddleHeaderOf(valid), body: flipBit(paddleBody, 30), wantErr: ErrSignatureMismatch},
		{name: "timestamp plus one second", header: paddleHeaderOf("ts=" + strconv.FormatInt(testNow.Unix()+1, 10) + ";h1=" + h1), wantErr: ErrSignatureMismatch},
		{name: "one hex digit changed", header: paddleHeaderOf("ts=" + ts + ";h1=" + wrong), wantErr: ErrSignatureMismatch},
		{name: "wrong secret", secrets: []string{paddleOldSecret}, header: paddleHeaderOf(valid), wantErr: ErrSignatureMismatch},

		{name: "stale beyond tolerance", header: at(-5*time.Minute - time.Second), wantErr: ErrTimestampOutsideTolerance},
		{name: "future beyond tolerance", header: at(5*time.Minute + time.Second), wantErr: ErrTimestampOutsideTolerance},
		{name: "stale at edge", header: at(-5 * time.Minute), wantRes: ok},
		{name: "custom tolerance", cfg: func(c *Config) { c.Tolerance = 5 * time.Second }, header: at(-6 * time.Second), wantErr: ErrTimestampOutsideTolerance},
		{name: "stale ignored when re-verifying", header: at(-90 * 24 * time.Hour), ignore: true, wantRes: ok},

		{name: "no header", header: http.Header{}, wantErr: ErrSignatureMissing},
		{name: "no ts", header: paddleHeaderOf("h1=" + h1), wantErr: ErrSignatureMalformed},
		{name: "two ts", header: paddleHeaderOf("ts=" + ts + ";" + valid), wantErr: ErrSignatureMalformed},
		{name: "bad ts", header: paddleHeaderOf("ts=x;h1=" + h1), wantErr: ErrSignatureMalformed},
		{name: "no h1", header: paddleHeaderOf("ts=" + ts), wantErr: ErrSignatureMalformed},
		{name: "short h1", header: paddleHeaderOf("ts=" + ts + ";h1=" + h1[:60]), wantErr: ErrSignatureMalformed},
		{name: "comma separated", header: paddleHeaderOf("ts=" + ts + ",h1=" + h1), wantErr: ErrSignatureMalformed},
		{name: "element without =", header: paddleHeaderOf(valid + ";x"), wantErr: ErrSignatureMalformed},

		{name: "body not JSON", header: notJSONH, body: notJSON, wantErr: ErrMalformedPayload},
		{name: "no event_id", header: noIDH, body: noID, wantErr: ErrMalformedPayload},
		{name: "no event_id but configured id", cfg: func(c *Config) { c.EventIDHeader = "X-Req" }, header: func() http.Header { h := noIDH.Clone(); h.Set("X-Req", "r-1"); return h }(), body: noID, wantRes: Result{EventID: "r-1", EventType: "x"}},
	})
}

// TestPaddleMatchesSDK checks SignPaddle and the verifier against
// paddle-go-sdk's WebhookVerifier.
func TestPaddleMatchesSDK(t *testing.T) {
	t.Parallel()
	v := mustNew(t, Config{Type: "paddle", Secrets: []string{paddleSecret}})
	for _, body := range [][]byte{paddleBody, {}, []byte("\x00\xff")} {
		now := time.Now()
		h := SignPaddle(paddleSecret, now, body)
		if !paddleSDKAccepts(t, paddleSecret, h, body) {
			t.Errorf("paddle-go-sdk rejects SignPaddle output %q", h.Get("Paddle-Signature"))
		}
		if paddleSDKAccepts(t, paddleOldSecret, h, body) {
			t.Error("paddle-go-sdk accepts a wrong secret")
		}
		_, err := v.Verify(&Request{Header: h, Body: body, Now: now})
		if err != nil && !errors.Is(err, ErrMalformedPayload) {
			t.Errorf("Verify: %v", err)
		}
		// The SDK with its tolerance rejects a stale signature; so do we.
		old := SignPaddle(paddleSecret, now.Add(-time.Hour), body)
		if paddleSDKAccepts(t, paddleSecret, old, body) {
			t.Error("paddle-go-sdk accepts an hour-old signature")
		}
		if _, err := v.Verify(&Request{Header: old, Body: body, Now: now}); !errors.Is(err, ErrTimestampOutsideTolerance) {
			t.Errorf("stale: %v", err)
		}
	}
	// The SDK accepts one h1 only; Paddle sends several while rotating,
	// which we accept.
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	two := paddleHeaderOf("ts=" + ts + ";h1=" + paddleOracle(paddleOldSecret, ts, paddleBody) + ";h1=" + paddleOracle(paddleSecret, ts, paddleBody))
	if paddleSDKAccepts(t, paddleSecret, two, paddleBody) {
		t.Log("paddle-go-sdk now accepts several h1")
	}
	if _, err := v.Verify(&Request{Header: two, Body: paddleBody}); err != nil {
		t.Errorf("two h1: %v", err)
	}
}

// paddleReallySigned is the fuzz oracle: some h1 element is the HMAC of
// "{ts}:{body}" for a ts element.
func paddleReallySigned(secret, header string, body []byte) bool {
	elems := strings.Split(header, ";")
	for _, te := range elems {
		ts, ok := strings.CutPrefix(te, "ts=")
		if !ok {
			continue
		}
		want := "h1=" + paddleOracle(secret, ts, body)
		for _, e := range elems {
			if strings.EqualFold(e, want) {
				return true
			}
		}
	}
	return false
}

func FuzzPaddle(f *testing.F) {
	ts := strconv.FormatInt(testNow.Unix(), 10)
	f.Add("ts="+ts+";h1="+paddleOracle(paddleSecret, ts, paddleBody), paddleBody, int64(0), uint(0))
	f.Add("ts=1;h1="+strings.Repeat("f", 64)+";h1=00", []byte(`{"event_id":"e"}`), int64(7), uint(5))
	f.Add(";;=;ts=", []byte{}, int64(-9), uint(1<<33))
	secrets := []string{paddleOldSecret, paddleSecret}
	v := mustNew(f, Config{Type: "paddle", Secrets: secrets})
	f.Fuzz(func(t *testing.T, header string, body []byte, unix int64, flip uint) {
		req := &Request{Header: paddleHeaderOf(header), Body: body, IgnoreTolerance: true}
		res, err := v.Verify(req)
		if err == nil {
			if !paddleReallySigned(secrets[res.SecretIndex], header, body) || res.EventID == "" {
				t.Fatalf("accepted %q for body %q: not genuine", header, body)
			}
		} else {
			if Reason(err) == "unknown" {
				t.Fatalf("error without sentinel: %v", err)
			}
			checkErrorSafe(t, err, secrets, req)
		}
		if unix < 0 {
			unix = -(unix + 1)
		}
		at := time.Unix(unix%(1<<40), 0)
		h := SignPaddle(paddleSecret, at, body)
		res, err = v.Verify(&Request{Header: h, Body: body, Now: at})
		if err != nil && !errors.Is(err, ErrMalformedPayload) || err == nil && res.SecretIndex != 1 {
			t.Fatalf("genuine: %+v, %v", res, err)
		}
		if len(body) > 0 {
			if _, err := v.Verify(&Request{Header: h, Body: flipBit(body, flip), Now: at}); !errors.Is(err, ErrSignatureMismatch) {
				t.Fatalf("flipped body: %v", err)
			}
		}
	})
}
