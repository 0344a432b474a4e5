//go:build !fuzzonly

package verify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mailgun/mailgun-go/v5"
	"github.com/mailgun/mailgun-go/v5/mtypes"
	"github.com/nicklaw5/helix/v2"
	square "github.com/square/square-go-sdk"
	squarewebhooks "github.com/square/square-go-sdk/webhooks/client"
	"go.yaml.in/yaml/v3"
)

// The secrets of the timed presets' tests: the current one and one rotated
// out, listed first in a rotation so that SecretIndex 1 proves the second
// was used.
const (
	timedSecret    = "timed-provider-secret-7f3a9c"
	timedOldSecret = "timed-provider-secret-old-0"
)

// timedHexMAC and timedB64MAC compute the providers' documented MAC with crypto/hmac
// directly: the independent oracle where the provider ships no Go signer.
func timedHexMAC(key, msg string) string { return hex.EncodeToString(hmacOf(sha256.New, key, msg)) }
func timedB64MAC(key, msg string) string {
	return base64.StdEncoding.EncodeToString(hmacOf(sha256.New, key, msg))
}

func unixText(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// withIndex is res verified by secret i.
func withIndex(res Result, i int) Result { res.SecretIndex = i; return res }

// headerWith returns a copy of h with name set to value, or removed when
// value is "".
func headerWith(h http.Header, name, value string) http.Header {
	h = h.Clone()
	if value == "" {
		h.Del(name)
	} else {
		h.Set(name, value)
	}
	return h
}

// checkOccurred checks the occurred_at NewOccurredAt reads for cfg.
func checkOccurred(t *testing.T, cfg Config, h http.Header, body []byte, want time.Time) {
	t.Helper()
	if got := NewOccurredAt(cfg)(h, body); !got.Equal(want) {
		t.Errorf("%s occurred_at = %v, want %v", cfg.Type, got, want)
	}
}

// answerProbe runs the handshake `inlet send --handshake` would send for
// cfg through the verifier at now and checks the answer with the probe's
// own check.
func answerProbe(t *testing.T, cfg Config, requestURL, kind string) {
	t.Helper()
	probe, err := HandshakeTest(cfg, requestURL, testNow)
	if err != nil {
		t.Fatalf("HandshakeTest: %v", err)
	}
	if probe.Kind != kind {
		t.Errorf("probe kind %q, want %q", probe.Kind, kind)
	}
	res, err := mustNew(t, cfg).Verify(&Request{Method: probe.Method, URL: probe.URL, Header: probe.Header, Body: probe.Body, Now: testNow})
	if err != nil || res.Handshake == nil {
		t.Fatalf("Verify(probe) = %+v, %v", res, err)
	}
	if err := probe.Check(http.StatusOK, res.Handshake.Header, res.Handshake.Body); err != nil {
		t.Error(err)
	}
}

// checkTimedHandshake verifies req with cfg and checks it is answered as kind
// with contentType and body.
func checkTimedHandshake(t *testing.T, cfg Config, req *Request, kind, contentType, body string, index int) {
	t.Helper()
	res, err := mustNew(t, cfg).Verify(req)
	if err != nil {
		t.Fatalf("Verify handshake: %v", err)
	}
	hs := res.Handshake
	switch {
	case hs == nil:
		t.Fatalf("Verify = %+v, want a handshake", res)
	case hs.Kind != kind || !strings.HasPrefix(hs.ContentType, contentType) || string(hs.Body) != body:
		t.Errorf("handshake = %s %s %s, want %s %s %s", hs.Kind, hs.ContentType, hs.Body, kind, contentType, body)
	case res.EventID != "" || res.SecretIndex != index:
		t.Errorf("handshake result %+v, want no event and secret %d", res, index)
	}
}

// Zoom: https://developers.zoom.us/docs/api/webhooks/#verify-webhook-events
// x-zm-signature = "v0=" + hex(HMAC-SHA256(secret token,
// "v0:{x-zm-request-timestamp}:{body}")), computed here with crypto/hmac
// (Zoom publishes no Go signer; zoom/webhook-sample's index.js does the same).
func zoomSigned(secret string, at time.Time, body []byte) http.Header {
	ts := unixText(at)
	return http.Header{"X-Zm-Signature": {"v0=" + timedHexMAC(secret, "v0:"+ts+":"+string(body))}, "X-Zm-Request-Timestamp": {ts}}
}

func TestZoom(t *testing.T) {
	t.Parallel()
	body := []byte(`{"event":"meeting.started","event_ts":1699999999123,"payload":{"account_id":"AAAAAABBBB","object":{"id":"89534827310","uuid":"4444AAAiAAAAAiAAAAA==","host_id":"x1yCzABCDEfg23HiJKl4mN","topic":"Weekly sync","type":2}}}`)
	good := zoomSigned(timedSecret, testNow, body)
	want := Result{EventID: syntheticID(body), EventType: "meeting.started"}
	runVerifyCases(t, Config{Type: "zoom", Secrets: []string{timedSecret}}, body, []verifyCase{
		{name: "valid", header: good, wantRes: want},
		{name: "tampered body", header: good, body: bytes.Replace(body, []byte("Weekly"), []byte("Weekly!"), 1), wantErr: ErrSignatureMismatch},
		{name: "timestamp changed", header: headerWith(good, "X-Zm-Request-Timestamp", unixText(testNow.Add(time.Second))), wantErr: ErrSignatureMismatch},
		{name: "stale", header: zoomSigned(timedSecret, testNow.Add(-5*time.Minute-time.Second), body), wantErr: ErrTimestampOutsideTolerance},
		{name: "future", header: zoomSigned(timedSecret, testNow.Add(5*time.Minute+time.Second), body), wantErr: ErrTimestampOutsideTolerance},
		{name: "stale at edge", header: zoomSigned(timedSecret, testNow.Add(-5*time.Minute), body), wantRes: want},
		{name: "stale re-verified", header: zoomSigned(timedSecret, testNow.Add(-30*24*time.Hour), body), ignore: true, wantRes: want},
		{name: "rotated", secrets: []string{timedOldSecret, timedSecret}, header: good, wantRes: withIndex(want, 1)},
		{name: "old secret only", secrets: []string{timedOldSecret}, header: good, wantErr: ErrSignatureMismatch},
		{name: "no signature", header: headerWith(good, "X-Zm-Signature", ""), wantErr: ErrSignatureMissing},
		{name: "no timestamp", header: headerWith(good, "X-Zm-Request-Timestamp", ""), wantErr: ErrSignatureMissing},
		{name: "no v0= prefix", header: headerWith(good, "X-Zm-Signature", strings.TrimPrefix(good.Get("X-Zm-Signature"), "v0=")), wantErr: ErrSignatureMalformed},
		{name: "not hex", header: headerWith(good, "X-Zm-Signature", "v0="+strings.Repeat("z", 64)), wantErr: ErrSignatureMalformed},
		{name: "timestamp not a number", header: headerWith(good, "X-Zm-Request-Timestamp", "yesterday"), wantErr: ErrSignatureMalformed},
	})
	checkOccurred(t, Config{Type: "zoom"}, good, body, time.UnixMilli(1699999999123).UTC())
}

// Zoom's endpoint.url_validation is signed like an event and answered with
// encryptedToken = hex(HMAC-SHA256(secret token, plainToken)):
// https://developers.zoom.us/docs/api/webhooks/#validate-your-webhook-endpoint
func TestZoomURLValidation(t *testing.T) {
	t.Parallel()
	cfg := Config{Type: "zoom", Secrets: []string{timedOldSecret, timedSecret}}
	body := []byte(`{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1699999999123,"event":"endpoint.url_validation"}`)
	answer := `{"encryptedToken":"` + timedHexMAC(timedSecret, "qgg8vlvZRS6UYooatFL8Aw") + `","plainToken":"qgg8vlvZRS6UYooatFL8Aw"}`
	checkTimedHandshake(t, cfg, &Request{Header: zoomSigned(timedSecret, testNow, body), Body: body, Now: testNow}, "url_validation", "application/json", answer, 1)

	noToken := []byte(`{"payload":{},"event_ts":1699999999123,"event":"endpoint.url_validation"}`)
	runVerifyCases(t, cfg, body, []verifyCase{
		{name: "forged", header: zoomSigned("guessed-secret", testNow, body), wantErr: ErrSignatureMismatch},
		{name: "unsigned", header: http.Header{}, wantErr: ErrSignatureMissing},
		{name: "stale", header: zoomSigned(timedSecret, testNow.Add(-time.Hour), body), wantErr: ErrTimestampOutsideTolerance},
		{name: "no plainToken", header: zoomSigned(timedSecret, testNow, noToken), body: noToken, wantErr: ErrMalformedPayload},
		{name: "malformed signature", header: headerWith(zoomSigned(timedSecret, testNow, body), "X-Zm-Signature", "v0=abc"), wantErr: ErrSignatureMalformed},
	})
	answerProbe(t, Config{Type: "zoom", Secrets: []string{timedSecret}}, "http://localhost:8080/webhooks/zoom", "url_validation")
}

// Twitch EventSub: https://dev.twitch.tv/docs/eventsub/handling-webhook-events/#verifying-the-event-message
// Every signed request here is checked against helix's
// VerifyEventSubNotification (github.com/nicklaw5/helix/v2 v2.32.0).
func twitchSigned(t *testing.T, secret, id, msgType string, at time.Time, body []byte) http.Header {
	t.Helper()
	ts := at.UTC().Format(time.RFC3339Nano)
	h := http.Header{}
	h.Set("Twitch-Eventsub-Message-Id", id)
	h.Set("Twitch-Eventsub-Message-Retry", "0")
	h.Set("Twitch-Eventsub-Message-Type", msgType)
	h.Set("Twitch-Eventsub-Message-Timestamp", ts)
	h.Set("Twitch-Eventsub-Subscription-Type", "channel.follow")
	h.Set("Twitch-Eventsub-Subscription-Version", "2")
	h.Set("Twitch-Eventsub-Message-Signature", "sha256="+timedHexMAC(secret, id+ts+string(body)))
	if !helix.VerifyEventSubNotification(secret, h, string(body)) {
		t.Fatal("helix.VerifyEventSubNotification rejects the test's own signature")
	}
	return h
}

func TestTwitch(t *testing.T) {
	t.Parallel()
	const id = "befa7b53-d79d-478f-86b9-120f112b044e"
	body := []byte(`{"subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","type":"channel.follow","version":"2","status":"enabled","cost":0,"condition":{"broadcaster_user_id":"1337","moderator_user_id":"1337"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},"created_at":"2019-11-16T10:11:12.634234626Z"},"event":{"user_id":"1234","user_login":"cool_user","user_name":"Cool_User","broadcaster_user_id":"1337","broadcaster_user_login":"cooler_user","broadcaster_user_name":"Cooler_User","followed_at":"2020-07-15T18:16:11.17106713Z"}}`)
	revoked := []byte(`{"subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","status":"authorization_revoked","type":"channel.follow","cost":1,"version":"2","condition":{"broadcaster_user_id":"12826"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},"created_at":"2019-11-16T10:11:12.634234626Z"}}`)
	good := twitchSigned(t, timedSecret, id, "notification", testNow, body)
	revocation := twitchSigned(t, timedSecret, id, "revocation", testNow, revoked)
	want := Result{EventID: id, EventType: "channel.follow"}
	runVerifyCases(t, Config{Type: "twitch", Secrets: []string{timedSecret}}, body, []verifyCase{
		{name: "valid", header: good, wantRes: want},
		{name: "revocation", header: revocation, body: revoked, wantRes: Result{EventID: id, EventType: "revocation.channel.follow"}},
		{name: "revocation typed from the body", header: headerWith(revocation, "Twitch-Eventsub-Subscription-Type", ""), body: revoked, wantRes: Result{EventID: id, EventType: "revocation.channel.follow"}},
		{name: "revocation with a configured type", cfg: func(c *Config) { c.EventTypeJSON = "subscription.status" }, header: revocation, body: revoked, wantRes: Result{EventID: id, EventType: "authorization_revoked"}},
		{name: "tampered body", header: good, body: flipBit(body, 200), wantErr: ErrSignatureMismatch},
		{name: "message id changed", header: headerWith(good, "Twitch-Eventsub-Message-Id", "a-replayed-id"), wantErr: ErrSignatureMismatch},
		{name: "stale", header: twitchSigned(t, timedSecret, id, "notification", testNow.Add(-10*time.Minute-time.Second), body), wantErr: ErrTimestampOutsideTolerance},
		{name: "future", header: twitchSigned(t, timedSecret, id, "notification", testNow.Add(10*time.Minute+time.Second), body), wantErr: ErrTimestampOutsideTolerance},
		{name: "stale at edge", header: twitchSigned(t, timedSecret, id, "notification", testNow.Add(-10*time.Minute), body), wantRes: want},
		{name: "rotated", secrets: []string{timedOldSecret, timedSecret}, header: good, wantRes: withIndex(want, 1)},
		{name: "old secret only", secrets: []string{timedOldSecret}, header: good, wantErr: ErrSignatureMismatch},
		{name: "no signature", header: headerWith(good, "Twitch-Eventsub-Message-Signature", ""), wantErr: ErrSignatureMissing},
		{name: "no message id", header: headerWith(good, "Twitch-Eventsub-Message-Id", ""), wantErr: ErrSignatureMissing},
		{name: "no timestamp", header: headerWith(good, "Twitch-Eventsub-Message-Timestamp", ""), wantErr: ErrSignatureMissing},
		{name: "timestamp not RFC 3339", header: headerWith(good, "Twitch-Eventsub-Message-Timestamp", "1700000000"), wantErr: ErrSignatureMalformed},
		{name: "no sha256= prefix", header: headerWith(good, "Twitch-Eventsub-Message-Signature", strings.TrimPrefix(good.Get("Twitch-Eventsub-Message-Signature"), "sha256=")), wantErr: ErrSignatureMalformed},
	})
	checkOccurred(t, Config{Type: "twitch"}, good, body, testNow.UTC())

	// What `inlet send` posts is accepted by helix too.
	cfg := Config{Type: "twitch", Secrets: []string{timedSecret}}
	h, b, err := SignTest(cfg, id, nil, "", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if !helix.VerifyEventSubNotification(timedSecret, h, string(b)) {
		t.Error("helix rejects SignTest's request")
	}
}

// Twitch's webhook_callback_verification is signed like a notification and
// answered with the challenge as text/plain:
// https://dev.twitch.tv/docs/eventsub/handling-webhook-events/#responding-to-a-challenge-request
func TestTwitchCallbackVerification(t *testing.T) {
	t.Parallel()
	const id = "e76c6bd4-55c9-4987-8304-da1588d8988b"
	cfg := Config{Type: "twitch", Secrets: []string{timedOldSecret, timedSecret}}
	body := []byte(`{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","status":"webhook_callback_verification_pending","type":"channel.follow","version":"2","cost":1,"condition":{"broadcaster_user_id":"12826"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},"created_at":"2019-11-16T10:11:12.634234626Z"}}`)
	good := twitchSigned(t, timedSecret, id, "webhook_callback_verification", testNow, body)
	checkTimedHandshake(t, cfg, &Request{Header: good, Body: body, Now: testNow}, "callback_verification", "text/plain", "pogchamp-kappa-360noscope-vohiyo", 1)

	noChallenge := []byte(`{"subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4"}}`)
	runVerifyCases(t, cfg, body, []verifyCase{
		{name: "forged", header: twitchSigned(t, "guessed-secret", id, "webhook_callback_verification", testNow, body), wantErr: ErrSignatureMismatch},
		{name: "unsigned", header: headerWith(good, "Twitch-Eventsub-Message-Signature", ""), wantErr: ErrSignatureMissing},
		{name: "stale", header: twitchSigned(t, timedSecret, id, "webhook_callback_verification", testNow.Add(-time.Hour), body), wantErr: ErrTimestampOutsideTolerance},
		{name: "no challenge", header: twitchSigned(t, timedSecret, id, "webhook_callback_verification", testNow, noChallenge), body: noChallenge, wantErr: ErrMalformedPayload},
		{name: "malformed signature", header: headerWith(good, "Twitch-Eventsub-Message-Signature", "sha256=12"), wantErr: ErrSignatureMalformed},
	})
	answerProbe(t, Config{Type: "twitch", Secrets: []string{timedSecret}}, "http://localhost:8080/webhooks/twitch", "callback_verification")
}

// X: https://docs.x.com/x-api/webhooks/quickstart (Securing webhooks):
// x-twitter-webhooks-signature = "sha256=" + base64(HMAC-SHA256(consumer
// secret, body)); the CRC's response_token the same MAC of crc_token.
// Computed here with crypto/hmac (X publishes no Go signer).
func xSigned(secret string, body []byte) http.Header {
	return http.Header{"X-Twitter-Webhooks-Signature": {"sha256=" + timedB64MAC(secret, string(body))}}
}

func TestX(t *testing.T) {
	t.Parallel()
	body := []byte(`{"for_user_id":"2244994945","user_has_blocked":"false","tweet_create_events":[{"created_at":"Tue Nov 14 22:13:20 +0000 2023","id_str":"1724580523212963840","text":"hello","user":{"id_str":"2244994945","screen_name":"XDevelopers"},"timestamp_ms":"1700000000000"}]}`)
	good := xSigned(timedSecret, body)
	want := Result{EventID: syntheticID(body), EventType: "tweet_create_events"}
	typed := func(b []byte, typ string) verifyCase {
		return verifyCase{name: "type " + typ, header: xSigned(timedSecret, b), body: b, wantRes: Result{EventID: syntheticID(b), EventType: typ}}
	}
	notJSON := []byte("AAAAAAAAAAAAAAAAAAAAAAAA")
	runVerifyCases(t, Config{Type: "x", Secrets: []string{timedSecret}}, body, []verifyCase{
		{name: "valid", header: good, wantRes: want},
		typed([]byte(`{"for_user_id":"2244994945","favorite_events":[{"id":"a7ba59eab0bfcba386f7acedac279542"}]}`), "favorite_events"),
		typed([]byte(`{"for_user_id":"2244994945","direct_message_events":[{"type":"message_create"}],"users":{}}`), "direct_message_events"),
		typed([]byte(`{"user_event":{"revoke":{"date_time":"2023-11-14T22:13:20+00:00"}}}`), "user_event"),
		typed([]byte(`{"data":{"event_type":"profile.update.bio","payload":{}}}`), "profile.update.bio"),
		typed([]byte(`{"for_user_id":"2244994945"}`), ""),
		{name: "type configured", cfg: func(c *Config) { c.EventTypeJSON = "for_user_id" }, header: good, wantRes: Result{EventID: want.EventID, EventType: "2244994945"}},
		{name: "not a JSON object", header: xSigned(timedSecret, notJSON), body: notJSON, wantErr: ErrMalformedPayload},
		{name: "tampered body", header: good, body: flipBit(body, 77), wantErr: ErrSignatureMismatch},
		{name: "no timestamp window", header: good, now: testNow.Add(1000 * time.Hour), wantRes: want},
		{name: "rotated", secrets: []string{timedOldSecret, timedSecret}, header: good, wantRes: withIndex(want, 1)},
		{name: "old secret only", secrets: []string{timedOldSecret}, header: good, wantErr: ErrSignatureMismatch},
		{name: "no signature", header: http.Header{}, wantErr: ErrSignatureMissing},
		{name: "hex, not base64", header: http.Header{"X-Twitter-Webhooks-Signature": {"sha256=" + timedHexMAC(timedSecret, string(body))}}, wantErr: ErrSignatureMalformed},
		{name: "no sha256= prefix", header: http.Header{"X-Twitter-Webhooks-Signature": {timedB64MAC(timedSecret, string(body))}}, wantErr: ErrSignatureMalformed},
	})
	checkOccurred(t, Config{Type: "x"}, good, body, time.Time{})
}

// X's CRC: GET ?crc_token= answered with {"response_token": "sha256=" +
// base64(HMAC-SHA256(consumer secret, crc_token))}.
func TestXCRC(t *testing.T) {
	t.Parallel()
	cfg := Config{Type: "x", Secrets: []string{timedSecret, timedOldSecret}}
	const token = "9b4507b3-9040-4669-9ca3-6b94edb50553" // the token of X's CRC example
	get := func(q string) *Request {
		return &Request{Method: http.MethodGet, URL: "https://hooks.example.com/webhooks/x?" + q, Now: testNow}
	}
	checkTimedHandshake(t, cfg, get("crc_token="+token+"&nonce=MTcwMDAwMDAwMA"), "crc", "application/json",
		`{"response_token":"sha256=`+timedB64MAC(timedSecret, token)+`"}`, 0)

	v := mustNew(t, cfg)
	for _, tt := range []struct {
		name string
		req  *Request
		want error
	}{
		{"JSON as crc_token", get(`crc_token=%7B%22for_user_id%22%3A%221%22%7D`), ErrSignatureMalformed},
		{"empty crc_token", get("crc_token="), ErrSignatureMalformed},
		{"short crc_token", get("crc_token=abc"), ErrSignatureMalformed},
		{"long crc_token", get("crc_token=" + strings.Repeat("A", 257)), ErrSignatureMalformed},
		{"GET without crc_token", get("hub.challenge=1"), ErrSignatureMissing},
	} {
		res, err := v.Verify(tt.req)
		if !errors.Is(err, tt.want) || res.Handshake != nil {
			t.Errorf("%s: Verify = %+v, %v; want %v", tt.name, res, err, tt.want)
		}
		checkErrorSafe(t, err, cfg.Secrets, tt.req)
	}

	// The CRC answer is the signature of a body equal to the token: posted
	// as an event, it is refused, so the CRC cannot sign a forged event.
	forged := "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB"
	res, err := v.Verify(get("crc_token=" + forged))
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		ResponseToken string `json:"response_token"`
	}
	if err := json.Unmarshal(res.Handshake.Body, &answer); err != nil {
		t.Fatal(err)
	}
	post := &Request{Header: http.Header{"X-Twitter-Webhooks-Signature": {answer.ResponseToken}}, Body: []byte(forged), Now: testNow}
	if _, err := v.Verify(post); !errors.Is(err, ErrMalformedPayload) {
		t.Errorf("event signed by a CRC answer: %v, want ErrMalformedPayload", err)
	}
	answerProbe(t, cfg, "http://localhost:8080/webhooks/x", "crc")
}

// Calendly: https://developer.calendly.com/api-docs/overview/webhooks/webhook-signatures
// Calendly-Webhook-Signature "t={t},v1={hex HMAC-SHA256(signing key,
// "{t}.{body}")}", rejected when older than 3 minutes; computed with
// crypto/hmac (Calendly publishes no signer).
func calendlySigned(secret string, at time.Time, body []byte) http.Header {
	ts := unixText(at)
	return http.Header{"Calendly-Webhook-Signature": {"t=" + ts + ",v1=" + timedHexMAC(secret, ts+"."+string(body))}}
}

func TestCalendly(t *testing.T) {
	t.Parallel()
	body := []byte(`{"created_at":"2023-11-14T22:13:19.000000Z","created_by":"https://api.calendly.com/users/AAAAAAAAAAAAAAAA","event":"invitee.created","payload":{"email":"test@example.com","name":"John Doe","status":"active","uri":"https://api.calendly.com/scheduled_events/GBGBDCAADAEDCRZ2/invitees/AAAAAAAAAAAAAAAA"}}`)
	good := calendlySigned(timedSecret, testNow, body)
	want := Result{EventID: syntheticID(body), EventType: "invitee.created"}
	ts := unixText(testNow)
	v1 := timedHexMAC(timedSecret, ts+"."+string(body))
	sig := func(s string) http.Header { return http.Header{"Calendly-Webhook-Signature": {s}} }
	runVerifyCases(t, Config{Type: "calendly", Secrets: []string{timedSecret}}, body, []verifyCase{
		{name: "valid", header: good, wantRes: want},
		{name: "tampered body", header: good, body: flipBit(body, 99), wantErr: ErrSignatureMismatch},
		{name: "stale", header: calendlySigned(timedSecret, testNow.Add(-3*time.Minute-time.Second), body), wantErr: ErrTimestampOutsideTolerance},
		{name: "future", header: calendlySigned(timedSecret, testNow.Add(3*time.Minute+time.Second), body), wantErr: ErrTimestampOutsideTolerance},
		{name: "stale at edge", header: calendlySigned(timedSecret, testNow.Add(-3*time.Minute), body), wantRes: want},
		{name: "rotated", secrets: []string{timedOldSecret, timedSecret}, header: good, wantRes: withIndex(want, 1)},
		{name: "old secret only", secrets: []string{timedOldSecret}, header: good, wantErr: ErrSignatureMismatch},
		{name: "no header", header: http.Header{}, wantErr: ErrSignatureMissing},
		{name: "no t=", header: sig("v1=" + v1), wantErr: ErrSignatureMissing},
		{name: "no v1=", header: sig("t=" + ts), wantErr: ErrSignatureMalformed},
		{name: "v1 not hex", header: sig("t=" + ts + ",v1=" + strings.Repeat("x", 64)), wantErr: ErrSignatureMalformed},
		{name: "t not a number", header: sig("t=now,v1=" + v1), wantErr: ErrSignatureMalformed},
		{name: "t changed", header: sig("t=" + unixText(testNow.Add(time.Second)) + ",v1=" + v1), wantErr: ErrSignatureMismatch},
	})
	checkOccurred(t, Config{Type: "calendly"}, good, body, time.Date(2023, 11, 14, 22, 13, 19, 0, time.UTC))
}

// Mux: https://www.mux.com/docs/core/verify-webhook-signatures
// Mux-Signature "t={t},v1={hex HMAC-SHA256(secret, "{t}.{body}")}";
// computed with crypto/hmac (mux-go ships no webhook verifier).
func muxSigned(secret string, at time.Time, body []byte) http.Header {
	ts := unixText(at)
	return http.Header{"Mux-Signature": {"t=" + ts + ",v1=" + timedHexMAC(secret, ts+"."+string(body))}}
}

func TestMux(t *testing.T) {
	t.Parallel()
	body := []byte(`{"type":"video.asset.ready","object":{"type":"asset","id":"0201p02fGKPE7MrbC269XRD7LpcHhrmbu0002"},"id":"3a56ac3d-33da-4366-855b-f592d898409d","environment":{"name":"Production","id":"j0863n"},"data":{"status":"ready","id":"0201p02fGKPE7MrbC269XRD7LpcHhrmbu0002"},"created_at":"2023-11-14T22:13:19.000000Z"}`)
	good := muxSigned(timedSecret, testNow, body)
	want := Result{EventID: "3a56ac3d-33da-4366-855b-f592d898409d", EventType: "video.asset.ready"}
	ts := unixText(testNow)
	runVerifyCases(t, Config{Type: "mux", Secrets: []string{timedSecret}}, body, []verifyCase{
		{name: "valid", header: good, wantRes: want},
		{name: "tampered body", header: good, body: flipBit(body, 123), wantErr: ErrSignatureMismatch},
		{name: "stale", header: muxSigned(timedSecret, testNow.Add(-5*time.Minute-time.Second), body), wantErr: ErrTimestampOutsideTolerance},
		{name: "future", header: muxSigned(timedSecret, testNow.Add(5*time.Minute+time.Second), body), wantErr: ErrTimestampOutsideTolerance},
		{name: "rotated", secrets: []string{timedOldSecret, timedSecret}, header: good, wantRes: withIndex(want, 1)},
		{name: "two v1 while the secret rotates", header: http.Header{"Mux-Signature": {"t=" + ts + ",v1=" + timedHexMAC(timedOldSecret, ts+"."+string(body)) + ",v1=" + timedHexMAC(timedSecret, ts+"."+string(body))}}, wantRes: want},
		{name: "old secret only", secrets: []string{timedOldSecret}, header: good, wantErr: ErrSignatureMismatch},
		{name: "no header", header: http.Header{}, wantErr: ErrSignatureMissing},
		{name: "no t=", header: http.Header{"Mux-Signature": {"v1=" + timedHexMAC(timedSecret, ts+"."+string(body))}}, wantErr: ErrSignatureMissing},
		{name: "v1 not hex", header: http.Header{"Mux-Signature": {"t=" + ts + ",v1=abc"}}, wantErr: ErrSignatureMalformed},
	})
	checkOccurred(t, Config{Type: "mux"}, good, body, time.Date(2023, 11, 14, 22, 13, 19, 0, time.UTC))
}

// HubSpot v3: https://developers.hubspot.com/docs/apps/developer-platform/build-apps/authentication/request-validation
// X-HubSpot-Signature-v3 = base64(HMAC-SHA256(client secret, method + URI +
// body + timestamp)), X-HubSpot-Request-Timestamp in ms, older than 5
// minutes rejected, and %3A %2F %3F %40 %21 %24 %27 %28 %29 %2A %2C %3B
// decoded in the URI before signing. uri is the decoded URI HubSpot signs;
// computed with crypto/hmac (HubSpot's node and python SDKs, which sign the
// URL as given, agree on the rest).
func hubspotSigned(secret, uri string, at time.Time, body []byte) http.Header {
	ts := strconv.FormatInt(at.UnixMilli(), 10)
	return http.Header{"X-Hubspot-Signature-V3": {timedB64MAC(secret, http.MethodPost+uri+string(body)+ts)}, "X-Hubspot-Request-Timestamp": {ts}}
}

func TestHubSpot(t *testing.T) {
	t.Parallel()
	body := []byte(`[{"eventId":1745263710,"subscriptionId":2150032,"portalId":62515,"appId":1160452,"occurredAt":1699999999123,"subscriptionType":"contact.propertyChange","attemptNumber":0,"objectId":1246965,"propertyName":"lifecyclestage","propertyValue":"customer","changeFlag":"UPDATED","changeSource":"CRM"}]`)
	const u = "https://hooks.example.com/webhooks/hubspot"
	good := hubspotSigned(timedSecret, u, testNow, body)
	// The id: the batch without attemptNumber, its keys in order, hashed.
	canon := sha256.Sum256([]byte(`[{"appId":1160452,"changeFlag":"UPDATED","changeSource":"CRM","eventId":1745263710,"objectId":1246965,"occurredAt":1699999999123,"portalId":62515,"propertyName":"lifecyclestage","propertyValue":"customer","subscriptionId":2150032,"subscriptionType":"contact.propertyChange"}]`))
	want := Result{EventID: "hubspot:" + hex.EncodeToString(canon[:]), EventType: "contact.propertyChange"}
	behindProxy := func(c *Config) { c.PublicURL = u }
	const escaped = u + "?from=a%3Ab%40c%2Fd%28e%29%2a%21%24%27%2C%3B%3F&q=a%20b%26c"
	const decoded = u + "?from=a:b@c/d(e)*!$',;?&q=a%20b%26c" // %20 and %26 are not in HubSpot's table
	runVerifyCases(t, Config{Type: "hubspot", Secrets: []string{timedSecret}}, body, []verifyCase{
		{name: "valid", header: good, url: u, wantRes: want},
		{name: "behind a proxy", cfg: behindProxy, header: hubspotSigned(timedSecret, u+"?portalId=62515", testNow, body), url: "http://10.0.0.7:8080/webhooks/hubspot?portalId=62515", wantRes: want},
		{name: "escapes decoded", header: hubspotSigned(timedSecret, decoded, testNow, body), url: escaped, wantRes: want},
		{name: "escapes signed as sent", header: hubspotSigned(timedSecret, escaped, testNow, body), url: escaped, wantErr: ErrSignatureMismatch},
		{name: "other URL", header: good, url: u + "-other", wantErr: ErrSignatureMismatch},
		{name: "no URL", header: good, wantErr: ErrSignatureMismatch, wantInErr: "public_url"},
		{name: "tampered body", header: good, url: u, body: flipBit(body, 150), wantErr: ErrSignatureMismatch},
		{name: "stale", header: hubspotSigned(timedSecret, u, testNow.Add(-5*time.Minute-time.Millisecond), body), url: u, wantErr: ErrTimestampOutsideTolerance},
		{name: "future", header: hubspotSigned(timedSecret, u, testNow.Add(5*time.Minute+time.Millisecond), body), url: u, wantErr: ErrTimestampOutsideTolerance},
		{name: "timestamp in seconds", header: headerWith(good, "X-Hubspot-Request-Timestamp", unixText(testNow)), url: u, wantErr: ErrSignatureMismatch},
		{name: "rotated", secrets: []string{timedOldSecret, timedSecret}, header: good, url: u, wantRes: withIndex(want, 1)},
		{name: "old secret only", secrets: []string{timedOldSecret}, header: good, url: u, wantErr: ErrSignatureMismatch},
		{name: "no signature", header: headerWith(good, "X-Hubspot-Signature-V3", ""), url: u, wantErr: ErrSignatureMissing},
		{name: "no timestamp", header: headerWith(good, "X-Hubspot-Request-Timestamp", ""), url: u, wantErr: ErrSignatureMissing},
		{name: "timestamp not a number", header: headerWith(good, "X-Hubspot-Request-Timestamp", "-1"), url: u, wantErr: ErrSignatureMalformed},
		{name: "signature not base64", header: headerWith(good, "X-Hubspot-Signature-V3", timedHexMAC(timedSecret, "x")), url: u, wantErr: ErrSignatureMalformed},
	})
	checkOccurred(t, Config{Type: "hubspot"}, good, body, time.UnixMilli(1699999999123).UTC())
}

// Square: the example of Square's validation guide
// (https://developer.squareup.com/docs/webhooks/step3validate), which the
// Go SDK's webhooks/client/verify_signature_test.go also uses, and the SDK's
// WebhooksHelper VerifySignature (github.com/square/square-go-sdk v1.5.0,
// webhooks/client.Client.VerifySignature) on every other signature.
func TestSquare(t *testing.T) {
	t.Parallel()
	const (
		docBody = `{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}`
		docSig  = "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4="
		docKey  = "Ibxx_5AKakO-3qeNVR61Dw"
		docURL  = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9"
	)
	sdk := squarewebhooks.NewClient()
	oracle := func(key, url string, body []byte, sig string) error {
		return sdk.VerifySignature(context.Background(), &square.VerifySignatureRequest{
			RequestBody: string(body), SignatureHeader: sig, SignatureKey: key, NotificationURL: url})
	}
	if err := oracle(docKey, docURL, []byte(docBody), docSig); err != nil {
		t.Fatalf("the SDK rejects Square's own example: %v", err)
	}
	sig := func(s string) http.Header { return http.Header{"X-Square-Hmacsha256-Signature": {s}} }
	docWant := Result{EventID: "ac3ac95b-f97d-458c-a6e6-18981597e05f", EventType: "webhooks.test_notification"}
	runVerifyCases(t, Config{Type: "square", Secrets: []string{docKey}, PublicURL: docURL}, []byte(docBody), []verifyCase{
		{name: "documented example behind a proxy", header: sig(docSig), url: "http://10.0.0.7:8080/webhooks/square", wantRes: docWant},
		{name: "documented example, own URL", cfg: func(c *Config) { c.PublicURL = "" }, header: sig(docSig), url: docURL, wantRes: docWant},
		{name: "another notification URL", cfg: func(c *Config) { c.PublicURL = docURL + "x" }, header: sig(docSig), wantErr: ErrSignatureMismatch},
		{name: "tampered body", header: sig(docSig), body: flipBit([]byte(docBody), 60), wantErr: ErrSignatureMismatch},
		{name: "rotated", secrets: []string{"MCmhFRxGX82xMwg5FsaoQA", docKey}, header: sig(docSig), wantRes: withIndex(docWant, 1)},
		{name: "other key", secrets: []string{"MCmhFRxGX82xMwg5FsaoQA"}, header: sig(docSig), wantErr: ErrSignatureMismatch},
		{name: "no signature", header: http.Header{}, wantErr: ErrSignatureMissing},
		{name: "SHA-1 length", header: sig("1z2n3DEJJiUPKcPzQo1ftvbxGdw="), wantErr: ErrSignatureMalformed},
		{name: "no timestamp window", header: sig(docSig), now: testNow.Add(10000 * time.Hour), wantRes: docWant},
	})
	checkOccurred(t, Config{Type: "square"}, nil, []byte(docBody), time.Date(2022, 7, 13, 20, 30, 59, 37339000, time.UTC))

	// What `inlet send` posts, with and without public_url, the SDK accepts.
	for _, c := range []Config{
		{Type: "square", Secrets: []string{timedSecret}},
		{Type: "square", Secrets: []string{timedSecret}, PublicURL: "https://hooks.example.com/webhooks/square"},
	} {
		reqURL := "http://localhost:8080/webhooks/square?from=test"
		h, b, err := SignTest(c, "evt_square_1", nil, reqURL, testNow)
		if err != nil {
			t.Fatal(err)
		}
		signed := reqURL
		if c.PublicURL != "" {
			signed = c.PublicURL + "?from=test"
		}
		if err := oracle(timedSecret, signed, b, h.Get("X-Square-Hmacsha256-Signature")); err != nil {
			t.Errorf("public_url %q: the SDK rejects SignTest's request: %v", c.PublicURL, err)
		}
	}
}

// Box: https://developer.box.com/guides/webhooks/v2/signatures-v2/
// box-signature-primary / -secondary = base64(HMAC-SHA256(primary /
// secondary key, body + box-delivery-timestamp)), the timestamp RFC 3339 and
// at most 10 minutes old; computed with crypto/hmac (box-go-sdk-gen is not
// served here).
func boxSigned(primary, secondary string, at time.Time, body []byte) http.Header {
	ts := at.Format(time.RFC3339)
	return http.Header{
		"Box-Delivery-Id":         {"673a081b-bb4b-4d45-b4f1-4131a29c1d07"},
		"Box-Delivery-Timestamp":  {ts},
		"Box-Signature-Primary":   {timedB64MAC(primary, string(body)+ts)},
		"Box-Signature-Secondary": {timedB64MAC(secondary, string(body)+ts)},
		"Box-Signature-Version":   {"1"},
		"Box-Signature-Algorithm": {"HmacSHA256"},
	}
}

func TestBox(t *testing.T) {
	t.Parallel()
	const primary, secondary = "box-primary-key-SaMpLe", "box-secondary-key-SaMpLe"
	body := []byte(`{"type":"webhook_event","id":"eb0c4e06-751f-442c-86f8-fd5bb404dbec","created_at":"2023-11-14T14:13:19-08:00","trigger":"FILE.UPLOADED","webhook":{"id":"1234567890","type":"webhook"},"created_by":{"type":"user","id":"2345678901","name":"Aaron Levie"},"source":{"id":"123456789","type":"file","name":"Test.txt"}}`)
	good := boxSigned(primary, secondary, testNow.In(time.FixedZone("PST", -8*3600)), body)
	want := Result{EventID: "eb0c4e06-751f-442c-86f8-fd5bb404dbec", EventType: "FILE.UPLOADED"}
	runVerifyCases(t, Config{Type: "box", Secrets: []string{primary, secondary}}, body, []verifyCase{
		{name: "valid", header: good, wantRes: want},
		{name: "a retry: new delivery id, same event", header: headerWith(good, "Box-Delivery-Id", "f96bb54b-ee16-4fc5-aa65-8c2d9e5b546f"), wantRes: want},
		{name: "secondary key only", secrets: []string{secondary}, header: good, wantRes: want},
		{name: "primary rotated away", secrets: []string{"box-new-primary-key", secondary}, header: good, wantRes: withIndex(want, 1)},
		{name: "only the secondary header", header: headerWith(good, "Box-Signature-Primary", ""), wantRes: withIndex(want, 1)},
		{name: "primary malformed, secondary good", header: headerWith(good, "Box-Signature-Primary", "%%%"), wantRes: withIndex(want, 1)},
		{name: "both malformed", header: headerWith(headerWith(good, "Box-Signature-Primary", "%%%"), "Box-Signature-Secondary", "abc"), wantErr: ErrSignatureMalformed},
		{name: "neither key", secrets: []string{"box-other-key"}, header: good, wantErr: ErrSignatureMismatch},
		{name: "tampered body", header: good, body: flipBit(body, 88), wantErr: ErrSignatureMismatch},
		{name: "timestamp changed", header: headerWith(good, "Box-Delivery-Timestamp", testNow.UTC().Format(time.RFC3339)), wantErr: ErrSignatureMismatch},
		{name: "stale", header: boxSigned(primary, secondary, testNow.Add(-10*time.Minute-time.Second), body), wantErr: ErrTimestampOutsideTolerance},
		{name: "future", header: boxSigned(primary, secondary, testNow.Add(10*time.Minute+time.Second), body), wantErr: ErrTimestampOutsideTolerance},
		{name: "stale at edge", header: boxSigned(primary, secondary, testNow.Add(-10*time.Minute), body), wantRes: want},
		{name: "no signatures", header: headerWith(headerWith(good, "Box-Signature-Primary", ""), "Box-Signature-Secondary", ""), wantErr: ErrSignatureMissing},
		{name: "no timestamp", header: headerWith(good, "Box-Delivery-Timestamp", ""), wantErr: ErrSignatureMissing},
		{name: "timestamp not RFC 3339", header: headerWith(good, "Box-Delivery-Timestamp", "Tue, 14 Nov 2023 22:13:20 GMT"), wantErr: ErrSignatureMalformed},
	})
	checkOccurred(t, Config{Type: "box"}, good, body, time.Date(2023, 11, 14, 22, 13, 19, 0, time.UTC))
}

// Mailgun: https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks
// signature.signature = hex(HMAC-SHA256(signing key, timestamp + token));
// every signature here is checked with mailgun-go's VerifyWebhookSignature
// (github.com/mailgun/mailgun-go/v5 v5.17.0).
func mailgunBody(t *testing.T, key, ts, token, eventData string) []byte {
	t.Helper()
	sig := timedHexMAC(key, ts+token)
	mailgunAccepts(t, key, ts, token, sig)
	return fmt.Appendf(nil, `{"signature":{"timestamp":%q,"token":%q,"signature":%q},"event-data":%s}`, ts, token, sig, eventData)
}

func mailgunAccepts(t *testing.T, key, ts, token, sig string) {
	t.Helper()
	mg := mailgun.NewMailgun("key-not-used")
	mg.SetWebhookSigningKey(key)
	ok, err := mg.VerifyWebhookSignature(mtypes.Signature{TimeStamp: ts, Token: token, Signature: sig})
	if err != nil || !ok {
		t.Fatalf("mailgun-go VerifyWebhookSignature = %v, %v", ok, err)
	}
}

func TestMailgun(t *testing.T) {
	t.Parallel()
	const token = "e0b5477167110d68991efc6b9f89f0a11066af27834600e123"
	const eventData = `{"id":"CPgfbmQMTCKtHW6uIWtuVe","timestamp":1699999999.908181,"log-level":"info","event":"delivered","recipient":"alice@example.com"}`
	ts := unixText(testNow)
	body := mailgunBody(t, timedSecret, ts, token, eventData)
	want := Result{EventID: token, EventType: "delivered"}
	at := func(d time.Duration) []byte {
		return mailgunBody(t, timedSecret, unixText(testNow.Add(d)), token, eventData)
	}
	sig := timedHexMAC(timedSecret, ts+token)
	const parentKey = "mailgun-parent-account-key"
	parent := fmt.Appendf(nil, `{"signature":{"timestamp":%q,"token":%q,"signature":%q,"parent-signature":%q},"event-data":%s}`,
		ts, token, timedHexMAC("mailgun-subaccount-key", ts+token), timedHexMAC(parentKey, ts+token), eventData)
	mailgunAccepts(t, parentKey, ts, token, timedHexMAC(parentKey, ts+token))
	replace := func(old, new string) []byte { return bytes.Replace(body, []byte(old), []byte(new), 1) }
	runVerifyCases(t, Config{Type: "mailgun", Secrets: []string{timedSecret}}, body, []verifyCase{
		{name: "valid", wantRes: want},
		// Mailgun signs only timestamp and token: the event data is not
		// covered, which the provider table says.
		{name: "event data changed, still valid", body: replace("delivered", "complained"), wantRes: Result{EventID: token, EventType: "complained"}},
		{name: "token changed", body: replace(token, token[:49]+"4"), wantErr: ErrSignatureMismatch},
		{name: "timestamp changed", body: replace(`"timestamp":"`+ts, `"timestamp":"`+unixText(testNow.Add(time.Second))), wantErr: ErrSignatureMismatch},
		{name: "signature changed", body: replace(sig, changeHexAt(sig, 3)), wantErr: ErrSignatureMismatch},
		{name: "resent after 8 hours", body: at(-8 * time.Hour), wantRes: want},
		{name: "stale", body: at(-9*time.Hour - time.Second), wantErr: ErrTimestampOutsideTolerance},
		{name: "future", body: at(9*time.Hour + time.Second), wantErr: ErrTimestampOutsideTolerance},
		{name: "rotated", secrets: []string{timedOldSecret, timedSecret}, wantRes: withIndex(want, 1)},
		{name: "old key only", secrets: []string{timedOldSecret}, wantErr: ErrSignatureMismatch},
		{name: "parent account key", secrets: []string{parentKey}, body: parent, wantRes: want},
		{name: "subaccount key", secrets: []string{"mailgun-subaccount-key"}, body: parent, wantRes: want},
		{name: "no signature object", body: []byte(`{"event-data":` + eventData + `}`), wantErr: ErrSignatureMissing},
		{name: "no signature", body: replace(`"signature":"`+sig+`"`, `"x":"`+sig+`"`), wantErr: ErrSignatureMissing},
		{name: "no token", body: replace(`"token"`, `"t"`), wantErr: ErrSignatureMissing},
		{name: "no timestamp", body: replace(`"timestamp":"`+ts, `"time":"`+ts), wantErr: ErrSignatureMissing},
		{name: "signature not hex", body: replace(sig, strings.Repeat("g", 64)), wantErr: ErrSignatureMalformed},
		{name: "timestamp not a number", body: replace(`"timestamp":"`+ts, `"timestamp":"x`+ts), wantErr: ErrSignatureMalformed},
		{name: "not JSON", body: []byte("signature=" + sig), wantErr: ErrSignatureMissing},
	})
	checkOccurred(t, Config{Type: "mailgun"}, nil, body, time.Unix(1699999999, 908181000).UTC())

	// What `inlet send` posts, mailgun-go accepts, and a given body gains
	// the signature object.
	for _, given := range [][]byte{nil, []byte(`{"event-data":` + eventData + `}`)} {
		_, b, err := SignTest(Config{Type: "mailgun", Secrets: []string{timedSecret}}, "evt_mailgun_1", given, "", testNow)
		if err != nil {
			t.Fatal(err)
		}
		var p mtypes.WebhookPayload
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		mailgunAccepts(t, timedSecret, p.Signature.TimeStamp, p.Signature.Token, p.Signature.Signature)
		if given == nil && p.Signature.Token != "evt_mailgun_1" {
			t.Errorf("sample token %q, want the id", p.Signature.Token)
		}
		if given != nil && !bytes.Contains(b, []byte(eventData)) {
			t.Errorf("SignTest changed the given event data: %s", b)
		}
	}
	if _, _, err := SignTest(Config{Type: "mailgun", Secrets: []string{timedSecret}}, "e", []byte("[1]"), "", testNow); err == nil {
		t.Error("SignTest put a signature into a JSON array")
	}
}

// TestTimedPresetDocs checks every timed preset's provider-table row is
// complete and its copy-ready source builds a verifier.
func TestTimedPresetDocs(t *testing.T) {
	t.Parallel()
	for _, p := range timedProviders {
		d := p.doc
		for field, v := range map[string]string{"Provider": d.Provider, "Headers": d.Headers, "Signed": d.Signed,
			"ID": d.ID, "Type": d.Type, "Occurred": d.Occurred, "Source": d.Source, "Docs": d.Docs} {
			if v == "" {
				t.Errorf("%s: PresetDoc.%s is empty", p.name, field)
			}
		}
		if (d.Handshake != "") != (len(p.handshakes) > 0) {
			t.Errorf("%s: PresetDoc.Handshake %q, %d handshakes", p.name, d.Handshake, len(p.handshakes))
		}
		if !strings.HasPrefix(d.Docs, "https://") {
			t.Errorf("%s: Docs %q", p.name, d.Docs)
		}
		var cfg Config
		dec := yaml.NewDecoder(strings.NewReader(strings.NewReplacer("${", "", "}", "").Replace(d.Source)))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil {
			t.Errorf("%s: Source: %v", p.name, err)
			continue
		}
		if cfg.Type != p.name {
			t.Errorf("%s: Source has type %q", p.name, cfg.Type)
		}
		if _, err := New(cfg); err != nil {
			t.Errorf("%s: New(Source): %v", p.name, err)
		}
		if p.sample == nil {
			t.Errorf("%s: no sample", p.name)
		}
	}
}

// TestTimedPresetConfig checks what the presets allow and refuse.
func TestTimedPresetConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{Type: "zoom", Secrets: []string{"s"}, PublicURL: "https://x.example/zoom"}, "public_url: not used by type zoom"},
		{Config{Type: "box", Secrets: []string{"s"}, VerifyToken: "t"}, "verify_token: not used by type box"},
		{Config{Type: "mux", Secrets: []string{"s"}, HMAC: HMACConfig{Header: "X"}}, "hmac: only used by type hmac"},
		{Config{Type: "square", Secrets: []string{"s"}, PublicURL: "/relative"}, "public_url: must be an absolute"},
		{Config{Type: "hubspot", Secrets: []string{"s"}, PublicURL: "https://x.example/hubspot"}, ""},
		{Config{Type: "twitch", Secrets: []string{"s"}, Tolerance: time.Hour}, ""},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.cfg.Type, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New error %v, want %q", tt.cfg.Type, err, tt.want)
		}
	}
	// A source's own tolerance replaces the preset's.
	body := []byte(`{"type":"video.asset.ready","id":"x"}`)
	v := mustNew(t, Config{Type: "mux", Secrets: []string{timedSecret}, Tolerance: time.Hour})
	if _, err := v.Verify(&Request{Header: muxSigned(timedSecret, testNow.Add(-50*time.Minute), body), Body: body, Now: testNow}); err != nil {
		t.Errorf("mux with tolerance 1h: %v", err)
	}
}

// FuzzTimedPresets mutates a genuine request of each timed preset (a body
// bit, a signature bit, the signed timestamp) and checks that no mutation
// is accepted and that arbitrary signature headers neither panic nor pass.
func FuzzTimedPresets(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint(3), "v0=00", "1700000000")
	f.Add(uint8(1), uint8(1), uint(100), "sha256=AAAA", "2023-11-14T22:13:20Z")
	f.Add(uint8(8), uint8(2), uint(7), "t=1,v1=ab", "")
	f.Add(uint8(5), uint8(3), uint(1<<20), "", "\x00")
	type genuine struct {
		cfg  Config
		v    Verifier
		h    http.Header
		body []byte
		url  string
	}
	var reqs []genuine
	for _, p := range timedProviders {
		cfg := Config{Type: p.name, Secrets: []string{timedOldSecret, timedSecret}}
		u := "https://hooks.example.com/webhooks/" + p.name
		h, b, err := SignTest(Config{Type: p.name, Secrets: []string{timedSecret}}, "evt_fuzz", nil, u, testNow)
		if err != nil {
			f.Fatal(err)
		}
		reqs = append(reqs, genuine{cfg, mustNew(f, cfg), h, b, u})
	}
	f.Fuzz(func(t *testing.T, which, mutation uint8, n uint, sig, ts string) {
		g := reqs[int(which)%len(reqs)]
		req := &Request{Header: g.h.Clone(), Body: g.body, URL: g.url, Now: testNow}
		p := presets[g.cfg.Type]
		sigHeader := p.hmac.Header
		switch mutation % 4 {
		case 0: // a body bit
			req.Body = flipBit(g.body, n)
		case 1: // a bit of the signature header (or of the body's signature)
			if sigHeader == "" {
				s, _ := lookupJSON(g.body, []string{"signature", "signature"})
				req.Body = bytes.Replace(g.body, []byte(s), []byte(changeHexAt(s, int(n%64))), 1)
				break
			}
			v := req.Header.Get(sigHeader)
			req.Header.Set(sigHeader, string(flipBit([]byte(v), n)))
		case 2: // the signed timestamp moved by one unit
			if name := p.hmac.TimestampHeader; name != "" {
				req.Header.Set(name, shiftTimestamp(req.Header.Get(name), p.hmac.TimestampFormat))
			} else if p.hmac.TimestampKey != "" {
				v := req.Header.Get(sigHeader)
				t0, _, _ := strings.Cut(strings.TrimPrefix(v, "t="), ",")
				req.Header.Set(sigHeader, strings.Replace(v, "t="+t0, "t="+shiftTimestamp(t0, timestampUnix), 1))
			} else if t0, ok := lookupJSON(g.body, []string{"signature", "timestamp"}); ok {
				req.Body = bytes.Replace(g.body, []byte(`"`+t0+`"`), []byte(`"`+shiftTimestamp(t0, timestampUnix)+`"`), 1)
			} else {
				return // no timestamp (x, square)
			}
		case 3: // arbitrary signature and timestamp text
			if sigHeader != "" {
				req.Header.Set(sigHeader, sig)
			}
			if p.hmac.TimestampHeader != "" {
				req.Header.Set(p.hmac.TimestampHeader, ts)
			}
		}
		res, err := g.v.Verify(req)
		if err != nil {
			if Reason(err) == "unknown" {
				t.Fatalf("%s: error without sentinel: %v", g.cfg.Type, err)
			}
			checkErrorSafe(t, err, g.cfg.Secrets, req)
			return
		}
		if res.Handshake != nil {
			t.Fatalf("%s: a mutated event answered as a handshake", g.cfg.Type)
		}
		// Hex is read in either case: a letter's case is no change.
		hexCase := sigHeader != "" && p.hmac.Encoding != "base64" &&
			strings.EqualFold(req.Header.Get(sigHeader), g.h.Get(sigHeader))
		if hexCase {
			req.Header.Set(sigHeader, g.h.Get(sigHeader))
		}
		unchanged := bytes.Equal(req.Body, g.body) && headersEqual(req.Header, g.h)
		if !unchanged && !(p.hmac.bodyUnsigned && mailgunSignatureUnchanged(req.Body, g.body)) {
			t.Fatalf("%s: accepted a mutated request (mutation %d)", g.cfg.Type, mutation%4)
		}
	})
}

func headersEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\x00") != strings.Join(b[k], "\x00") {
			return false
		}
	}
	return true
}

// mailgunSignatureUnchanged reports whether two Mailgun bodies carry the
// same signed fields (the rest of a Mailgun body is not signed).
func mailgunSignatureUnchanged(a, b []byte) bool {
	for _, f := range []string{"timestamp", "token", "signature"} {
		x, _ := lookupJSON(a, []string{"signature", f})
		y, _ := lookupJSON(b, []string{"signature", f})
		if x != y {
			return false
		}
	}
	return true
}

// shiftTimestamp moves a signed timestamp one unit later, keeping its
// format.
func shiftTimestamp(s, format string) string {
	if format == timestampRFC3339 {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return s + "0"
		}
		return t.Add(time.Second).Format(time.RFC3339Nano)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return s + "0"
	}
	return strconv.FormatInt(n+1, 10)
}
