//go:build !fuzzonly

package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
)

const (
	slackSecret    = "e6b19c573432dcc6b075501d51b51bb8"
	slackOldSecret = "0ld5ecret0000000000000000000000a"
)

var slackBody = []byte(`{"token":"aF5ynEYQH0dFN9imlgcADxDB","team_id":"T061EG9R6","api_app_id":"A0MDYCDME","event":{"type":"app_mention","user":"U061F7AUR","text":"<@U0LAN0Z89> is it everything a river should be?","ts":"1515449522.000016","channel":"C0LAN2Q65","event_ts":"1515449522000016"},"type":"event_callback","event_id":"Ev0LAN670R","event_time":1515449522,"authed_users":["U0LAN0Z89"]}`)

// slackOracle computes the documented signature independently:
// "v0=" + hex(HMAC-SHA256(secret, "v0:" + ts + ":" + body)).
func slackOracle(secret, ts string, body []byte) string {
	return "v0=" + hex.EncodeToString(hmacOf(sha256.New, secret, "v0:"+ts+":"+string(body)))
}

func slackHeaders(sig, ts string) http.Header {
	h := http.Header{}
	if sig != "" {
		h.Set("X-Slack-Signature", sig)
	}
	if ts != "" {
		h.Set("X-Slack-Request-Timestamp", ts)
	}
	return h
}

// slackSDKAccepts asks slack-go's SecretsVerifier, which checks against
// the real clock, whether it accepts h for body.
func slackSDKAccepts(h http.Header, secret string, body []byte) error {
	sv, err := slack.NewSecretsVerifier(h, secret)
	if err != nil {
		return err
	}
	if _, err := sv.Write(body); err != nil {
		return err
	}
	return sv.Ensure()
}

// TestSlackDocumentedVector is the example of Slack's "Verifying requests
// from Slack" guide, a slash command.
func TestSlackDocumentedVector(t *testing.T) {
	t.Parallel()
	const (
		secret = "8f742231b10e8888abcd99yyyzzz85a5"
		ts     = "1531420618"
		want   = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
	)
	body := []byte("token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
	if got := slackOracle(secret, ts, body); got != want {
		t.Fatalf("test oracle = %s, documented %s", got, want)
	}
	at := time.Unix(1531420618, 0)
	if got := SignSlack(secret, at, body).Get("X-Slack-Signature"); got != want {
		t.Errorf("SignSlack = %s, want %s", got, want)
	}
	res, err := mustNew(t, Config{Type: "slack", Secrets: []string{secret}}).Verify(&Request{Header: slackHeaders(want, ts), Body: body, Now: at.Add(time.Minute)})
	if err != nil {
		t.Fatalf("Verify documented vector: %v", err)
	}
	if want := (Result{EventID: syntheticID(body), EventType: "/webhook-collect"}); res != want {
		t.Errorf("Verify = %+v, want %+v", res, want)
	}
}

func TestSlackVerify(t *testing.T) {
	t.Parallel()
	ts := strconv.FormatInt(testNow.Unix(), 10)
	valid := slackOracle(slackSecret, ts, slackBody)
	at := func(d time.Duration) http.Header {
		s := strconv.FormatInt(testNow.Add(d).Unix(), 10)
		return slackHeaders(slackOracle(slackSecret, s, slackBody), s)
	}
	signed := func(body string) (http.Header, []byte) {
		return slackHeaders(slackOracle(slackSecret, ts, []byte(body)), ts), []byte(body)
	}
	challengeH, challenge := signed(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
	blockH, block := signed("payload=" + strings.ReplaceAll(`{"type":"block_actions","trigger_id":"13345224609.738474920.8088930838d88f008e0","actions":[]}`, `"`, "%22"))
	rateH, rate := signed(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","type":"app_rate_limited","team_id":"T123456","minute_rate_limited":1518467820,"api_app_id":"A123456"}`)
	ok := Result{EventID: "Ev0LAN670R", EventType: "app_mention"}

	runVerifyCases(t, Config{Type: "slack", Secrets: []string{slackSecret}}, slackBody, []verifyCase{
		{name: "valid", header: slackHeaders(valid, ts), wantRes: ok},
		{name: "our signer", header: SignSlack(slackSecret, testNow, slackBody), wantRes: ok},
		{name: "uppercase hex", header: slackHeaders("v0="+strings.ToUpper(valid[3:]), ts), wantRes: ok},
		{name: "url_verification verifies", header: challengeH, body: challenge, wantRes: Result{Handshake: jsonAnswer("url_verification", map[string]string{"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})}},
		{name: "url_verification forged", header: slackHeaders(slackOracle(slackOldSecret, ts, challenge), ts), body: challenge, wantErr: ErrSignatureMismatch},
		{name: "interactivity", header: blockH, body: block, wantRes: Result{EventID: syntheticID(block), EventType: "block_actions"}},
		{name: "interactivity id by path", cfg: func(c *Config) { c.EventIDJSON = "payload.trigger_id" }, header: blockH, body: block, wantRes: Result{EventID: "13345224609.738474920.8088930838d88f008e0", EventType: "block_actions"}},
		{name: "app_rate_limited", header: rateH, body: rate, wantRes: Result{EventID: syntheticID(rate), EventType: "app_rate_limited"}},
		{name: "rotation new secret", secrets: []string{slackOldSecret, slackSecret}, header: slackHeaders(valid, ts), wantRes: Result{EventID: "Ev0LAN670R", EventType: "app_mention", SecretIndex: 1}},
		{name: "rotation old secret", secrets: []string{slackOldSecret, slackSecret}, header: slackHeaders(slackOracle(slackOldSecret, ts, slackBody), ts), wantRes: ok},

		{name: "body byte changed", header: slackHeaders(valid, ts), body: flipBit(slackBody, 40), wantErr: ErrSignatureMismatch},
		{name: "timestamp plus one second", header: slackHeaders(valid, strconv.FormatInt(testNow.Unix()+1, 10)), wantErr: ErrSignatureMismatch},
		{name: "timestamp minus one second", header: slackHeaders(valid, strconv.FormatInt(testNow.Unix()-1, 10)), wantErr: ErrSignatureMismatch},
		{name: "one hex digit changed", header: slackHeaders(changeHexAt(valid, 5), ts), wantErr: ErrSignatureMismatch},
		{name: "wrong secret", secrets: []string{slackOldSecret}, header: slackHeaders(valid, ts), wantErr: ErrSignatureMismatch},

		{name: "stale beyond tolerance", header: at(-5*time.Minute - time.Second), wantErr: ErrTimestampOutsideTolerance},
		{name: "future beyond tolerance", header: at(5*time.Minute + time.Second), wantErr: ErrTimestampOutsideTolerance},
		{name: "stale at edge", header: at(-5 * time.Minute), wantRes: ok},
		{name: "future at edge", header: at(5 * time.Minute), wantRes: ok},
		{name: "custom tolerance", cfg: func(c *Config) { c.Tolerance = 30 * time.Second }, header: at(-31 * time.Second), wantErr: ErrTimestampOutsideTolerance},
		{name: "stale ignored when re-verifying", header: at(-24 * time.Hour), ignore: true, wantRes: ok},
		{name: "stale and forged is a mismatch", header: slackHeaders(slackOracle(slackOldSecret, "1000", slackBody), "1000"), wantErr: ErrSignatureMismatch},

		{name: "no signature", header: slackHeaders("", ts), wantErr: ErrSignatureMissing},
		{name: "no timestamp", header: slackHeaders(valid, ""), wantErr: ErrSignatureMissing},
		{name: "bad timestamp", header: slackHeaders(valid, ts+".5"), wantErr: ErrSignatureMalformed},
		{name: "no version", header: slackHeaders(valid[3:], ts), wantErr: ErrSignatureMalformed},
		{name: "v1 version", header: slackHeaders("v1="+valid[3:], ts), wantErr: ErrSignatureMalformed},
		{name: "short", header: slackHeaders(valid[:len(valid)-2], ts), wantErr: ErrSignatureMalformed},
		{name: "event_id not UTF-8", header: func() http.Header {
			h, _ := signed(`{"type":"event_callback","event_id":"\udcff\u0000"}`)
			return h
		}(), body: []byte(`{"type":"event_callback","event_id":"\udcff\u0000"}`), wantErr: ErrMalformedPayload},
	})
}

// TestSlackSignerMatchesSDK checks SignSlack against slack-go's
// SecretsVerifier both ways, and that slack-go accepts what we accept.
func TestSlackSignerMatchesSDK(t *testing.T) {
	t.Parallel()
	v := mustNew(t, Config{Type: "slack", Secrets: []string{slackSecret}})
	for _, body := range [][]byte{slackBody, {}, []byte("payload=%7B%7D")} {
		now := time.Now()
		h := SignSlack(slackSecret, now, body)
		if err := slackSDKAccepts(h, slackSecret, body); err != nil {
			t.Errorf("slack-go rejects SignSlack output: %v", err)
		}
		if _, err := v.Verify(&Request{Header: h, Body: body, Now: now}); err != nil {
			t.Errorf("Verify: %v", err)
		}
		if err := slackSDKAccepts(h, slackOldSecret, body); err == nil {
			t.Error("slack-go accepts a wrong secret")
		}
	}
	// slack-go's own vector.
	h := slackHeaders("v0=adada4ed31709aef585c2580ca3267678c6a8eaeb7e0c1aca3ee57b656886b2c", "1531431954")
	body := []byte(`{"token":"aF5ynEYQH0dFN9imlgcADxDB","team_id":"XXXXXXXXX","api_app_id":"YYYYYYYYY","event":{"type":"app_mention","user":"AAAAAAAAA","text":"<@EEEEEEEEE> hello world","client_msg_id":"477cc591-ch73-a14z-4db8-g0cd76321bec","ts":"1531431954.000073","channel":"TTTTTTTTT","event_ts":"1531431954.000073"},"type":"event_callback","event_id":"TvBP7LRED7","event_time":1531431954,"authed_users":["EEEEEEEEE"]}`)
	res, err := v.Verify(&Request{Header: h, Body: body, IgnoreTolerance: true})
	if err != nil || res.EventID != "TvBP7LRED7" || res.EventType != "app_mention" {
		t.Errorf("slack-go vector: %+v, %v", res, err)
	}
}

func FuzzSlack(f *testing.F) {
	ts := strconv.FormatInt(testNow.Unix(), 10)
	f.Add(slackOracle(slackSecret, ts, slackBody), ts, slackBody, int64(0), uint(0))
	f.Add("v0="+strings.Repeat("0", 64), "0", []byte("payload=%7B"), int64(1), uint(3))
	f.Add("v0=", "01", []byte(`{"type":"event_callback","event":"x"}`), int64(-1), uint(99))
	secrets := []string{slackOldSecret, slackSecret}
	v := mustNew(f, Config{Type: "slack", Secrets: secrets})
	f.Fuzz(func(t *testing.T, sig, ts string, body []byte, unix int64, flip uint) {
		req := &Request{Header: slackHeaders(sig, ts), Body: body, IgnoreTolerance: true}
		res, err := v.Verify(req)
		if err == nil {
			if !strings.EqualFold(sig, slackOracle(secrets[res.SecretIndex], ts, body)) || !strings.HasPrefix(sig, "v0=") {
				t.Fatalf("accepted %q ts %q body %q: not genuine", sig, ts, body)
			}
			if res.EventID == "" {
				t.Fatal("empty event id")
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
		h := SignSlack(slackSecret, at, body)
		res, err = v.Verify(&Request{Header: h, Body: body, Now: at})
		if err != nil && !errors.Is(err, ErrMalformedPayload) || err == nil && res.SecretIndex != 1 {
			t.Fatalf("genuine: %+v, %v", res, err)
		}
		if len(body) > 0 {
			if _, err := v.Verify(&Request{Header: h, Body: flipBit(body, flip), Now: at}); !errors.Is(err, ErrSignatureMismatch) {
				t.Fatalf("flipped body: %v", err)
			}
		}
		if _, err := v.Verify(&Request{Header: h, Body: body, Now: at.Add(6 * time.Minute)}); !errors.Is(err, ErrTimestampOutsideTolerance) {
			t.Fatalf("stale: %v", err)
		}
	})
}

func TestSlackURLVerificationCarriesTheChallenge(t *testing.T) {
	t.Parallel()
	v, err := New(Config{Type: "slack", Secrets: []string{"slack-signing-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	body := []byte(`{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
	res, err := v.Verify(&Request{Header: SignSlack("slack-signing-secret", now, body), Body: body, Now: now})
	if err != nil || res.Handshake == nil || string(res.Handshake.Body) != `{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}` || res.EventID != "" {
		t.Fatalf("url_verification: %+v, %v", res, err)
	}
	cb := []byte(`{"type":"event_callback","event_id":"Ev1","challenge":"no","event":{"type":"app_mention"}}`)
	if res, err := v.Verify(&Request{Header: SignSlack("slack-signing-secret", now, cb), Body: cb, Now: now}); err != nil || res.Handshake != nil {
		t.Fatalf("event_callback: %+v, %v", res, err)
	}
}
