package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	relayTestSecret = "relay-test-secret-0123456789"
	relayOldSecret  = "relay-old-secret-0123456789"
)

func relaySigned(t *testing.T, secrets []string, now time.Time) (http.Header, []byte) {
	t.Helper()
	body := []byte("{\"id\":\"evt_1\"}\n")
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Stripe-Signature", "t=1,v1=ab")
	h.Add("X-Multi", "one")
	h.Add("X-Multi", "two")
	h.Set("Connection", "keep-alive, X-Hop")
	h.Set("X-Hop", "gone")
	h.Set("Host", "relay.example")
	h.Set("Inlet-Relay-Signature", "forged by the sender")
	fwd := RelayForwardHeaders(h)
	for _, gone := range []string{"Connection", "X-Hop", "Host", "Inlet-Relay-Signature"} {
		if _, ok := fwd[gone]; ok {
			t.Fatalf("%s forwarded", gone)
		}
	}
	for k, v := range SignRelay(secrets, now, "stripe", "/webhooks/stripe?a=1", fwd, body) {
		fwd[k] = v
	}
	return fwd, body
}

// The signature is recomputed here from the documented format, not with
// relayMAC, so the format is pinned.
func TestRelaySignatureFormat(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h, body := relaySigned(t, []string{relayTestSecret}, now)
	if got := h.Get(RelayHeaderHeaders); got != "content-type,stripe-signature,x-multi" {
		t.Fatalf("%s = %q", RelayHeaderHeaders, got)
	}
	canon := "content-type:application/json\nstripe-signature:t=1,v1=ab\nx-multi:one\nx-multi:two\n"
	digest := sha256.Sum256([]byte(canon))
	m := hmac.New(sha256.New, []byte(relayTestSecret))
	m.Write([]byte("1700000000.stripe." + hex.EncodeToString(digest[:]) + "./webhooks/stripe?a=1\n"))
	m.Write(body)
	want := "t=1700000000,h=" + hex.EncodeToString(digest[:]) + ",v1=" + hex.EncodeToString(m.Sum(nil))
	if got := h.Get(RelayHeaderSignature); got != want {
		t.Fatalf("signature\n got %s\nwant %s", got, want)
	}
}

func TestVerifyRelay(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	secrets := []string{relayOldSecret, relayTestSecret}
	cases := []struct {
		name    string
		sign    []string
		change  func(h http.Header, body []byte, uri string) (http.Header, []byte, string)
		at      time.Time
		want    error
		wantIdx int
	}{
		{name: "valid", wantIdx: 1},
		{name: "signed with both during a rotation", sign: []string{relayTestSecret, relayOldSecret}, wantIdx: 0},
		{name: "proxy header added", change: func(h http.Header, b []byte, u string) (http.Header, []byte, string) {
			h.Set("X-Forwarded-For", "192.0.2.7")
			h.Set("Via", "1.1 proxy")
			return h, b, u
		}, wantIdx: 1},
		{name: "header case and surrounding spaces", change: func(h http.Header, b []byte, u string) (http.Header, []byte, string) {
			h["content-type"] = []string{"  application/json\t"}
			delete(h, "Content-Type")
			return h, b, u
		}, wantIdx: 1},
		{name: "missing", change: func(h http.Header, b []byte, u string) (http.Header, []byte, string) {
			h.Del(RelayHeaderSignature)
			return h, b, u
		}, want: ErrRelaySignatureMissing},
		{name: "wrong secret", sign: []string{"some-other-secret-0123456"}, want: ErrRelaySignatureMismatch},
		{name: "body changed", change: func(h http.Header, b []byte, u string) (http.Header, []byte, string) {
			return h, append(b, ' '), u
		}, want: ErrRelaySignatureMismatch},
		{name: "uri changed", change: func(h http.Header, b []byte, u string) (http.Header, []byte, string) {
			return h, b, "/webhooks/stripe?a=2"
		}, want: ErrRelaySignatureMismatch},
		{name: "digest replaced", change: func(h http.Header, b []byte, u string) (http.Header, []byte, string) {
			sig := h.Get(RelayHeaderSignature)
			i := strings.Index(sig, "h=") + 2
			h.Set(RelayHeaderSignature, sig[:i]+strings.Repeat("0", 64)+sig[i+64:])
			return h, b, u
		}, want: ErrRelaySignatureMismatch},
		{name: "malformed", change: func(h http.Header, b []byte, u string) (http.Header, []byte, string) {
			h.Set(RelayHeaderSignature, "t=1700000000")
			return h, b, u
		}, want: ErrRelaySignatureMismatch},
		{name: "value changed", change: func(h http.Header, b []byte, u string) (http.Header, []byte, string) {
			h.Set("Stripe-Signature", "t=2,v1=ab")
			return h, b, u
		}, want: ErrRelayHeadersMismatch},
		{name: "values reordered", change: func(h http.Header, b []byte, u string) (http.Header, []byte, string) {
			h["X-Multi"] = []string{"two", "one"}
			return h, b, u
		}, want: ErrRelayHeadersMismatch},
		{name: "values merged", change: func(h http.Header, b []byte, u string) (http.Header, []byte, string) {
			h["X-Multi"] = []string{"one,two"}
			return h, b, u
		}, want: ErrRelayHeadersMismatch},
		{name: "listed header dropped", change: func(h http.Header, b []byte, u string) (http.Header, []byte, string) {
			h.Del("X-Multi")
			h.Set(RelayHeaderHeaders, "content-type,stripe-signature")
			return h, b, u
		}, want: ErrRelayHeadersMismatch},
		{name: "unsigned header listed", change: func(h http.Header, b []byte, u string) (http.Header, []byte, string) {
			h.Set("X-Forwarded-For", "192.0.2.7")
			h.Set(RelayHeaderHeaders, h.Get(RelayHeaderHeaders)+",x-forwarded-for")
			return h, b, u
		}, want: ErrRelayHeadersMismatch},
		{name: "too old", at: now.Add(6 * time.Minute), want: ErrRelayTimestampOutsideTolerance},
		{name: "too far ahead", at: now.Add(-6 * time.Minute), want: ErrRelayTimestampOutsideTolerance},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sign := c.sign
			if sign == nil {
				sign = []string{relayTestSecret}
			}
			h, body := relaySigned(t, sign, now)
			uri := "/webhooks/stripe?a=1"
			if c.change != nil {
				h, body, uri = c.change(h, body, uri)
			}
			at := c.at
			if at.IsZero() {
				at = now.Add(time.Minute)
			}
			idx, err := VerifyRelay(secrets, 5*time.Minute, "stripe", uri, h, body, at)
			if !errors.Is(err, c.want) || (c.want == nil && idx != c.wantIdx) {
				t.Fatalf("VerifyRelay = %d, %v; want %d, %v", idx, err, c.wantIdx, c.want)
			}
		})
	}
}

func TestStripRelay(t *testing.T) {
	h := http.Header{"Inlet-Relay-Id": {"x"}, "inlet-relay-signature": {"y"}, "X-Keep": {"z"}}
	got := StripRelay(h)
	if len(got) != 1 || got.Get("X-Keep") != "z" || len(h) != 3 {
		t.Fatalf("StripRelay = %v (input now %v)", got, h)
	}
	plain := http.Header{"X-Keep": {"z"}}
	if out := StripRelay(plain); len(out) != 1 {
		t.Fatalf("StripRelay of a plain header = %v", out)
	}
}

func FuzzVerifyRelay(f *testing.F) {
	f.Add("t=1700000000,h="+strings.Repeat("a", 64)+",v1="+strings.Repeat("b", 64), "content-type", []byte("{}"))
	f.Add("t=,h=,v1=", "", []byte(""))
	f.Add("v1=zz,t=01", "a,a", []byte("x"))
	f.Fuzz(func(t *testing.T, sig, list string, body []byte) {
		h := http.Header{RelayHeaderSignature: {sig}, RelayHeaderHeaders: {list}, "Content-Type": {"application/json"}}
		idx, err := VerifyRelay([]string{relayTestSecret}, time.Minute, "stripe", "/webhooks/stripe", h, body, time.Unix(1_700_000_000, 0))
		if err == nil {
			t.Fatalf("forged signature %q accepted (secret %d)", sig, idx)
		}
		// A genuine signature over the same input always verifies.
		fwd := http.Header{"Content-Type": {"application/json"}, "X-Any": {strconv.Quote(list)}}
		for k, v := range SignRelay([]string{relayTestSecret}, time.Unix(1_700_000_000, 0), "stripe", "/webhooks/stripe", fwd, body) {
			fwd[k] = v
		}
		if _, err := VerifyRelay([]string{relayTestSecret}, time.Minute, "stripe", "/webhooks/stripe", fwd, body, time.Unix(1_700_000_000, 0)); err != nil {
			t.Fatalf("genuine signature refused: %v", err)
		}
	})
}
