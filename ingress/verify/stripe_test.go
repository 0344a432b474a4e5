//go:build !fuzzonly

package verify

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"
)

const (
	stripeOldSecret = "whsec_test_OLD_aaaaaaaaaaaaaaaaaaaaaa"
)

// The api_version is deliberately one stripe-go would refuse in
// ConstructEvent: raw ingestion must not care.
var stripeBody = []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","api_version":"2019-02-19","created":1700000000,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","amount":2000}}}`)

// stripeOracle is the Stripe-Signature header stripe-go generates.
func stripeOracle(secret string, ts time.Time, body []byte) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{
		Payload: body, Secret: secret, Timestamp: ts,
	}).Header
}

func stripeHeaderOf(v string) http.Header {
	h := http.Header{}
	h.Set("Stripe-Signature", v)
	return h
}

// changeHexAt replaces the hex digit at index i of s with a different hex
// digit.
func changeHexAt(s string, i int) string {
	c := byte('0')
	if s[i] == '0' {
		c = '1'
	}
	return s[:i] + string(c) + s[i+1:]
}

func TestStripeVerify(t *testing.T) {
	t.Parallel()

	type input struct {
		header string
		body   []byte
		ignore bool
		clock  bool // leave Request.Now zero so the real clock is used
	}
	sdk := func(secret string, ts time.Time) string { return stripeOracle(secret, ts, stripeBody) }
	valid := sdk(stripeSecret, testNow)
	validSig := valid[strings.Index(valid, "v1=")+3:]
	ts := fmt.Sprint(testNow.Unix())
	wrongSig := changeHexAt(validSig, 10)

	tests := []struct {
		name      string
		secrets   []string
		tolerance time.Duration
		in        input
		wantErr   error
		wantIndex int
	}{
		{name: "sdk signed", in: input{header: valid}},
		{name: "our signer", in: input{header: SignStripe(stripeSecret, testNow, stripeBody).Get("Stripe-Signature")}},
		{name: "body byte changed", in: input{header: valid, body: bytes.Replace(stripeBody, []byte("2000"), []byte("2001"), 1)}, wantErr: ErrSignatureMismatch},
		{name: "body byte appended", in: input{header: valid, body: append(bytes.Clone(stripeBody), ' ')}, wantErr: ErrSignatureMismatch},
		{name: "timestamp plus one second", in: input{header: fmt.Sprintf("t=%d,v1=%s", testNow.Unix()+1, validSig)}, wantErr: ErrSignatureMismatch},
		{name: "timestamp minus one second", in: input{header: fmt.Sprintf("t=%d,v1=%s", testNow.Unix()-1, validSig)}, wantErr: ErrSignatureMismatch},
		{name: "one hex digit changed", in: input{header: "t=" + ts + ",v1=" + wrongSig}, wantErr: ErrSignatureMismatch},
		{name: "last hex digit changed", in: input{header: "t=" + ts + ",v1=" + changeHexAt(validSig, 63)}, wantErr: ErrSignatureMismatch},
		{name: "uppercase hex accepted", in: input{header: "t=" + ts + ",v1=" + strings.ToUpper(validSig)}},
		{name: "wrong secret", secrets: []string{stripeOldSecret}, in: input{header: valid}, wantErr: ErrSignatureMismatch},

		{name: "stale beyond tolerance", in: input{header: sdk(stripeSecret, testNow.Add(-5*time.Minute-time.Second))}, wantErr: ErrTimestampOutsideTolerance},
		{name: "future beyond tolerance", in: input{header: sdk(stripeSecret, testNow.Add(5*time.Minute+time.Second))}, wantErr: ErrTimestampOutsideTolerance},
		{name: "stale at tolerance edge", in: input{header: sdk(stripeSecret, testNow.Add(-5*time.Minute))}},
		{name: "future at tolerance edge", in: input{header: sdk(stripeSecret, testNow.Add(5*time.Minute))}},
		{name: "custom tolerance", tolerance: 10 * time.Minute, in: input{header: sdk(stripeSecret, testNow.Add(-9*time.Minute))}},
		{name: "custom tolerance exceeded", tolerance: time.Minute, in: input{header: sdk(stripeSecret, testNow.Add(-2*time.Minute))}, wantErr: ErrTimestampOutsideTolerance},
		{name: "stale ignored when re-verifying", in: input{header: sdk(stripeSecret, testNow.Add(-90*24*time.Hour)), ignore: true}},
		{name: "stale and forged is a mismatch", in: input{header: sdk(stripeOldSecret, testNow.Add(-time.Hour))}, wantErr: ErrSignatureMismatch},
		{name: "re-verifying still checks the signature", in: input{header: sdk(stripeOldSecret, testNow.Add(-time.Hour)), ignore: true}, wantErr: ErrSignatureMismatch},
		{name: "zero Now uses the clock", in: input{header: sdk(stripeSecret, time.Now()), clock: true}},

		{name: "rotation new secret", secrets: []string{stripeOldSecret, stripeSecret}, in: input{header: valid}, wantIndex: 1},
		{name: "rotation old secret", secrets: []string{stripeOldSecret, stripeSecret}, in: input{header: sdk(stripeOldSecret, testNow)}, wantIndex: 0},
		{name: "several v1 second valid", in: input{header: "t=" + ts + ",v1=" + wrongSig + ",v1=" + validSig}},
		{name: "several v1 first valid", in: input{header: "t=" + ts + ",v1=" + validSig + ",v1=" + wrongSig}},
		{name: "several v1 none valid", in: input{header: "t=" + ts + ",v1=" + wrongSig + ",v1=" + changeHexAt(validSig, 0)}, wantErr: ErrSignatureMismatch},
		{name: "undecodable v1 beside a valid one", in: input{header: "t=" + ts + ",v1=zz,v1=" + validSig}},
		{name: "v0 ignored", in: input{header: "t=" + ts + ",v1=" + validSig + ",v0=" + wrongSig}},
		{name: "valid sig only under v0", in: input{header: "t=" + ts + ",v0=" + validSig}, wantErr: ErrSignatureMalformed},
		{name: "t after v1", in: input{header: "v1=" + validSig + ",t=" + ts}},

		{name: "no header", in: input{header: ""}, wantErr: ErrSignatureMissing},
		{name: "no t", in: input{header: "v1=" + validSig}, wantErr: ErrSignatureMalformed},
		{name: "bad t", in: input{header: "t=abc,v1=" + validSig}, wantErr: ErrSignatureMalformed},
		{name: "signed t", in: input{header: "t=+" + ts + ",v1=" + validSig}, wantErr: ErrSignatureMalformed},
		{name: "leading zero t", in: input{header: "t=0" + ts + ",v1=" + validSig}, wantErr: ErrSignatureMalformed},
		{name: "two t", in: input{header: "t=" + ts + ",t=" + ts + ",v1=" + validSig}, wantErr: ErrSignatureMalformed},
		{name: "no v1", in: input{header: "t=" + ts}, wantErr: ErrSignatureMalformed},
		{name: "non-hex v1", in: input{header: "t=" + ts + ",v1=" + validSig[:63] + "g"}, wantErr: ErrSignatureMalformed},
		{name: "short v1", in: input{header: "t=" + ts + ",v1=" + validSig[:62]}, wantErr: ErrSignatureMalformed},
		{name: "element without =", in: input{header: "t=" + ts + ",v1=" + validSig + ",garbage"}, wantErr: ErrSignatureMalformed},
		{name: "trailing comma", in: input{header: valid + ","}, wantErr: ErrSignatureMalformed},
		{name: "space after comma", in: input{header: "t=" + ts + ", v1=" + validSig}, wantErr: ErrSignatureMalformed},

		{name: "body not JSON", in: input{header: stripeOracle(stripeSecret, testNow, []byte("not json")), body: []byte("not json")}, wantErr: ErrMalformedPayload},
		{name: "body without id", in: input{header: stripeOracle(stripeSecret, testNow, []byte(`{"type":"x"}`)), body: []byte(`{"type":"x"}`)}, wantErr: ErrMalformedPayload},
		{name: "empty id", in: input{header: stripeOracle(stripeSecret, testNow, []byte(`{"id":""}`)), body: []byte(`{"id":""}`)}, wantErr: ErrMalformedPayload},
		{name: "numeric id", in: input{header: stripeOracle(stripeSecret, testNow, []byte(`{"id":42}`)), body: []byte(`{"id":42}`)}, wantErr: ErrMalformedPayload},
		{name: "NUL in id", in: input{header: stripeOracle(stripeSecret, testNow, []byte(`{"id":"evt\u0000"}`)), body: []byte(`{"id":"evt\u0000"}`)}, wantErr: ErrMalformedPayload},
		{name: "JSON array", in: input{header: stripeOracle(stripeSecret, testNow, []byte(`[{"id":"evt_1"}]`)), body: []byte(`[{"id":"evt_1"}]`)}, wantErr: ErrMalformedPayload},
		{name: "empty body", in: input{header: stripeOracle(stripeSecret, testNow, nil), body: []byte{}}, wantErr: ErrMalformedPayload},
		{name: "stale and malformed body is stale", in: input{header: stripeOracle(stripeSecret, testNow.Add(-time.Hour), []byte("x")), body: []byte("x")}, wantErr: ErrTimestampOutsideTolerance},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			secrets := tt.secrets
			if secrets == nil {
				secrets = []string{stripeSecret}
			}
			v := mustNew(t, Config{Type: "stripe", Secrets: secrets, Tolerance: tt.tolerance})
			body := tt.in.body
			if body == nil {
				body = stripeBody
			}
			now := testNow
			if tt.in.clock {
				now = time.Time{}
			}
			req := &Request{Body: body, Now: now, IgnoreTolerance: tt.in.ignore, Header: http.Header{}}
			if tt.in.header != "" {
				req.Header = stripeHeaderOf(tt.in.header)
			}
			res, err := v.Verify(req)
			checkErr(t, err, tt.wantErr, secrets, req)
			if tt.wantErr != nil {
				if res != (Result{}) {
					t.Errorf("failed Verify returned %+v", res)
				}
				return
			}
			want := Result{EventID: "evt_1NG8Du2eZvKYlo2CUI79vXWy", EventType: "payment_intent.succeeded", SecretIndex: tt.wantIndex}
			if res != want {
				t.Errorf("Verify = %+v, want %+v", res, want)
			}
		})
	}
}

func TestStripeEventTypeOptional(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_2"}`)
	v := mustNew(t, Config{Type: "stripe", Secrets: []string{stripeSecret}})
	res, err := v.Verify(&Request{Header: SignStripe(stripeSecret, testNow, body), Body: body, Now: testNow})
	if err != nil || res.EventID != "evt_2" || res.EventType != "" {
		t.Fatalf("Verify = %+v, %v", res, err)
	}
}

// TestStripeSignerMatchesSDK checks SignStripe against stripe-go both ways:
// the exact header GenerateTestSignedPayload builds, and acceptance by
// ValidatePayloadWithTolerance.
func TestStripeSignerMatchesSDK(t *testing.T) {
	t.Parallel()
	for _, body := range [][]byte{stripeBody, nil, []byte("not json \x00\xff")} {
		if got, want := SignStripe(stripeSecret, testNow, body).Get("Stripe-Signature"), stripeOracle(stripeSecret, testNow, body); got != want {
			t.Errorf("SignStripe = %q, stripe-go = %q", got, want)
		}
		h := SignStripe(stripeSecret, time.Now(), body)
		if err := webhook.ValidatePayloadWithTolerance(body, h.Get("Stripe-Signature"), stripeSecret, 5*time.Minute); err != nil {
			t.Errorf("stripe-go rejects SignStripe output: %v", err)
		}
	}
}

// TestStripeFutureTimestamp pins the stripe-go trap we guard against: it
// accepts a far-future timestamp, we must not.
func TestStripeFutureTimestamp(t *testing.T) {
	t.Parallel()
	future := time.Now().Add(24 * time.Hour)
	header := stripeOracle(stripeSecret, future, stripeBody)
	if err := webhook.ValidatePayloadWithTolerance(stripeBody, header, stripeSecret, 5*time.Minute); err != nil {
		t.Logf("stripe-go now rejects future timestamps too (%v); the guard below still matters", err)
	}
	v := mustNew(t, Config{Type: "stripe", Secrets: []string{stripeSecret}})
	_, err := v.Verify(&Request{Header: stripeHeaderOf(header), Body: stripeBody})
	if !errors.Is(err, ErrTimestampOutsideTolerance) {
		t.Fatalf("Verify future timestamp error = %v, want ErrTimestampOutsideTolerance", err)
	}
	if !strings.Contains(err.Error(), "in the future") {
		t.Errorf("error %q does not say the timestamp is in the future", err)
	}
}

// stripeReallySigned is the fuzz oracle, written independently of the
// parser under test: some v1 element of header is the HMAC of "{t}.{body}"
// for a t element of header.
func stripeReallySigned(secret, header string, body []byte) bool {
	elems := strings.Split(header, ",")
	for _, te := range elems {
		ts, ok := strings.CutPrefix(te, "t=")
		if !ok {
			continue
		}
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(ts + "."))
		mac.Write(body)
		want := "v1=" + hex.EncodeToString(mac.Sum(nil))
		for _, e := range elems {
			if strings.EqualFold(e, want) {
				return true
			}
		}
	}
	return false
}

func FuzzStripe(f *testing.F) {
	valid := stripeOracle(stripeSecret, testNow, stripeBody)
	f.Add(valid, stripeBody, testNow.Unix(), uint(0))
	f.Add("t="+fmt.Sprint(testNow.Unix())+",v1=00,v1="+valid[strings.Index(valid, "v1=")+3:]+",v0=ab", stripeBody, int64(1), uint(7))
	f.Add("t=1,v1="+strings.Repeat("a", 64), []byte(`{"id":"evt_x","type":"t"}`), int64(0), uint(99))
	f.Add("", []byte{}, int64(-5), uint(1))
	f.Add("t=,=,,v1==", []byte("\xff"), int64(1<<62), uint(1<<40))

	v := mustNew(f, Config{Type: "stripe", Secrets: []string{stripeOldSecret, stripeSecret}})
	secrets := []string{stripeOldSecret, stripeSecret}

	f.Fuzz(func(t *testing.T, header string, body []byte, unix int64, flip uint) {
		// Arbitrary input: no panic, safe errors, and success only for a
		// genuine signature.
		req := &Request{Header: stripeHeaderOf(header), Body: body, IgnoreTolerance: true}
		res, err := v.Verify(req)
		if err == nil {
			if !stripeReallySigned(secrets[res.SecretIndex], header, body) {
				t.Fatalf("accepted header %q for body %q without a genuine signature", header, body)
			}
			if res.EventID == "" {
				t.Fatal("accepted with empty event id")
			}
		} else {
			if Reason(err) == "unknown" {
				t.Fatalf("error without sentinel: %v", err)
			}
			checkErrorSafe(t, err, secrets, req)
		}

		// A genuine stripe-go signature over the fuzzed body is accepted (or
		// fails only on the payload), and any one-bit change fails.
		if unix < 0 {
			unix = -(unix + 1)
		}
		ts := time.Unix(unix%(1<<40), 0)
		signed := stripeOracle(stripeSecret, ts, body)
		req = &Request{Header: stripeHeaderOf(signed), Body: body, Now: ts}
		res, err = v.Verify(req)
		if err != nil && !errors.Is(err, ErrMalformedPayload) {
			t.Fatalf("genuine signature rejected: %v", err)
		}
		if err == nil && res.SecretIndex != 1 {
			t.Fatalf("SecretIndex = %d, want 1", res.SecretIndex)
		}
		if len(body) > 0 {
			bad := bytes.Clone(body)
			bad[flip%uint(len(bad))] ^= 1 << (flip / uint(len(bad)) % 8)
			if _, err := v.Verify(&Request{Header: req.Header, Body: bad, Now: ts}); !errors.Is(err, ErrSignatureMismatch) {
				t.Fatalf("flipped body bit: error = %v, want mismatch", err)
			}
		}
		sigAt := strings.Index(signed, "v1=") + 3 + int(flip%64)
		if _, err := v.Verify(&Request{Header: stripeHeaderOf(changeHexAt(signed, sigAt)), Body: body, Now: ts}); !errors.Is(err, ErrSignatureMismatch) {
			t.Fatalf("changed signature digit: error = %v, want mismatch", err)
		}
	})
}

func BenchmarkStripeVerify(b *testing.B) {
	body := benchBody()
	v := mustNew(b, Config{Type: "stripe", Secrets: []string{stripeSecret}})
	req := &Request{Header: SignStripe(stripeSecret, testNow, body), Body: body, Now: testNow}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := v.Verify(req); err != nil {
			b.Fatal(err)
		}
	}
}

// benchBody is a realistic ~2 KiB Stripe-style event.
func benchBody() []byte {
	var b strings.Builder
	b.WriteString(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","api_version":"2024-06-20","created":1700000000,"type":"invoice.paid","data":{"object":{"id":"in_1","lines":[`)
	for i := range 16 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"il_%03d","amount":%d,"currency":"usd","description":"Line item number %d for the benchmark"}`, i, 1000+i, i)
	}
	b.WriteString(`]}},"livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null}}`)
	return []byte(b.String())
}
