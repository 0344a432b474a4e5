package httpforward_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers/httpforward"
)

const secret = "0123456789abcdef-test-secret"

// signed is a forwarded request's Inlet headers for job jobID (event 7 of
// stripe, invoice.paid).
func signed(t time.Time, jobID int64, body []byte) http.Header {
	return http.Header{
		httpforward.HeaderSignature: {httpforward.Sign(secret, t, httpforward.Signed{JobID: jobID, EventID: 7, Provider: "stripe", EventType: "invoice.paid"}, body)},
		httpforward.HeaderJobID:     {strconv.FormatInt(jobID, 10)},
		httpforward.HeaderEventID:   {"7"},
		httpforward.HeaderProvider:  {"stripe"},
		httpforward.HeaderEventType: {"invoice.paid"},
		"Idempotency-Key":           {"inlet-job-" + strconv.FormatInt(jobID, 10)},
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"evt_1"}`)
	good := signed(now, 42, body)
	parts := strings.Split(good.Get(httpforward.HeaderSignature), ",") // t, v1, v2
	v1, v2 := parts[1], parts[2]
	without := func(h http.Header, k string) http.Header {
		c := h.Clone()
		c.Del(k)
		return c
	}
	with := func(h http.Header, k, v string) http.Header {
		c := h.Clone()
		c.Set(k, v)
		return c
	}
	cases := []struct {
		name   string
		header http.Header
		body   []byte
		secret string
		now    time.Time
		want   error // nil = accepted
	}{
		{"valid", good, body, secret, now, nil},
		{"valid at the tolerance", good, body, secret, now.Add(5 * time.Minute), nil},
		{"one byte changed", good, []byte(`{"id":"evt_2"}`), secret, now, httpforward.ErrSignatureMismatch},
		{"byte appended", good, append([]byte(`{"id":"evt_1"}`), ' '), secret, now, httpforward.ErrSignatureMismatch},
		{"other job id", with(good, httpforward.HeaderJobID, "43"), body, secret, now, httpforward.ErrSignatureMismatch},
		{"other event id", with(good, httpforward.HeaderEventID, "8"), body, secret, now, httpforward.ErrSignatureMismatch},
		{"other provider", with(good, httpforward.HeaderProvider, "github"), body, secret, now, httpforward.ErrSignatureMismatch},
		{"other event type", with(good, httpforward.HeaderEventType, "invoice.voided"), body, secret, now, httpforward.ErrSignatureMismatch},
		{"type moved into the provider", with(with(good, httpforward.HeaderProvider, "stripe\ninvoice.paid"), httpforward.HeaderEventType, ""), body, secret, now, httpforward.ErrSignatureMismatch},
		{"other idempotency key", with(good, "Idempotency-Key", "inlet-job-999"), body, secret, now, httpforward.ErrSignatureMismatch},
		{"no idempotency key", without(good, "Idempotency-Key"), body, secret, now, nil},
		{"v1 only (a sender before v2)", with(good, httpforward.HeaderSignature, "t=1800000000,"+v1), body, secret, now, httpforward.ErrMalformedSignature},
		{"no event id", without(good, httpforward.HeaderEventID), body, secret, now, httpforward.ErrMalformedSignature},
		{"other secret", good, body, secret + "x", now, httpforward.ErrSignatureMismatch},
		{"timestamp changed", with(good, httpforward.HeaderSignature, "t=1800000001,"+v2), body, secret, now, httpforward.ErrSignatureMismatch},
		{"too old", good, body, secret, now.Add(6 * time.Minute), httpforward.ErrTimestampOutsideTolerance},
		{"from the future", good, body, secret, now.Add(-6 * time.Minute), httpforward.ErrTimestampOutsideTolerance},
		{"rotation: second v2 matches", with(good, httpforward.HeaderSignature, "t=1800000000,v2=00ff,"+v2), body, secret, now, nil},
		{"unknown scheme skipped", with(good, httpforward.HeaderSignature, "t=1800000000,v0=zz,"+v2), body, secret, now, nil},
		{"no signature", without(good, httpforward.HeaderSignature), body, secret, now, httpforward.ErrNoSignature},
		{"no job id", without(good, httpforward.HeaderJobID), body, secret, now, httpforward.ErrMalformedSignature},
		{"no t", with(good, httpforward.HeaderSignature, v2), body, secret, now, httpforward.ErrMalformedSignature},
		{"two t", with(good, httpforward.HeaderSignature, "t=1,t=1800000000,"+v2), body, secret, now, httpforward.ErrMalformedSignature},
		{"no v2", with(good, httpforward.HeaderSignature, "t=1800000000"), body, secret, now, httpforward.ErrMalformedSignature},
		{"garbage", with(good, httpforward.HeaderSignature, "garbage"), body, secret, now, httpforward.ErrMalformedSignature},
		{"bad hex", with(good, httpforward.HeaderSignature, "t=1800000000,v2=xyz"), body, secret, now, httpforward.ErrSignatureMismatch},
	}
	for _, c := range cases {
		err := httpforward.Verify(c.secret, c.header, c.body, 0, c.now)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: Verify = %v, want %v", c.name, err, c.want)
		}
	}
	if err := httpforward.Verify(secret, good, body, time.Hour, now.Add(30*time.Minute)); err != nil {
		t.Errorf("explicit tolerance not used: %v", err)
	}
	if err := httpforward.Verify("", good, body, 0, now); err == nil {
		t.Error("empty secret accepted")
	}
}

func FuzzVerify(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	f.Add(httpforward.Sign(secret, now, httpforward.Signed{JobID: 1, EventID: 7, Provider: "stripe", EventType: "invoice.paid"}, []byte("x")), "1", []byte("x"))
	f.Add("t=,v1=", "", []byte{})
	f.Add("t=1800000000,v1=00,v1=,=,,", "-1", []byte{0})
	f.Fuzz(func(t *testing.T, sig, jobID string, body []byte) {
		h := http.Header{httpforward.HeaderSignature: {sig}, httpforward.HeaderJobID: {jobID}, httpforward.HeaderEventID: {"7"}}
		_ = httpforward.Verify(secret, h, body, 0, now) // must not panic
		// Whatever the body, a fresh signature verifies and a changed body does not.
		id, _ := strconv.ParseInt(jobID, 10, 64)
		good := signed(now, id, body)
		if err := httpforward.Verify(secret, good, body, 0, now); err != nil {
			t.Fatalf("own signature rejected: %v", err)
		}
		if err := httpforward.Verify(secret, good, append(body[:len(body):len(body)], 'x'), 0, now); !errors.Is(err, httpforward.ErrSignatureMismatch) {
			t.Fatalf("changed body: %v", err)
		}
	})
}
