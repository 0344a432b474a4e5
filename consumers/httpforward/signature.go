package httpforward

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers Inlet sets on every forwarded request.
const (
	HeaderJobID          = "Inlet-Job-Id"
	HeaderEventID        = "Inlet-Event-Id"
	HeaderProvider       = "Inlet-Provider"
	HeaderEventType      = "Inlet-Event-Type"
	HeaderAttempt        = "Inlet-Attempt"
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderSignature      = "Inlet-Signature"
)

// DefaultTolerance is how far a signature's timestamp may be from now when
// Verify is given no tolerance.
const DefaultTolerance = 5 * time.Minute

// Errors Verify returns; callers answer 401 to any of them.
var (
	ErrNoSignature               = errors.New("no " + HeaderSignature + " header")
	ErrMalformedSignature        = errors.New("malformed " + HeaderSignature + " or " + HeaderJobID + " header")
	ErrSignatureMismatch         = errors.New("signature does not match")
	ErrTimestampOutsideTolerance = errors.New("signature timestamp outside the tolerance")
)

// Sign returns the Inlet-Signature value for body of job jobID at time t.
func Sign(secret string, t time.Time, jobID int64, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, jobID, body))
}

func mac(secret, ts string, jobID int64, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write([]byte(strconv.FormatInt(jobID, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks a forwarded request: its Inlet-Signature must be an HMAC with
// secret over its timestamp, its Inlet-Job-Id and body, and the timestamp
// within tolerance of now (DefaultTolerance when tolerance <= 0). Several
// v1 values are accepted, any one matching, so a sender may sign with an old
// and a new secret during rotation. The comparison is constant-time.
func Verify(secret string, header http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	if secret == "" {
		return errors.New("verify " + HeaderSignature + ": empty secret")
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	value := header.Get(HeaderSignature)
	if value == "" {
		return ErrNoSignature
	}
	// The job id as signed: canonical decimal only, so a captured request
	// resent as 042 or +42 (the same number, another text a receiver may
	// dedupe on) does not verify.
	jobText := header.Get(HeaderJobID)
	jobID, err := strconv.ParseInt(jobText, 10, 64)
	if err != nil || strconv.FormatInt(jobID, 10) != jobText {
		return ErrMalformedSignature
	}
	ts, sigs, err := parseSignature(value)
	if err != nil {
		return err
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrMalformedSignature
	}
	want := mac(secret, ts, jobID, body)
	matched := false
	for _, s := range sigs {
		got, err := hex.DecodeString(s)
		if err == nil && hmac.Equal(got, want) {
			matched = true
		}
	}
	if !matched {
		return ErrSignatureMismatch
	}
	if d := now.Sub(time.Unix(t, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %s from now, tolerance %s", ErrTimestampOutsideTolerance, d.Round(time.Second), tolerance)
	}
	return nil
}

// parseSignature splits "t=<ts>,v1=<hex>[,v1=<hex>...]"; unknown keys are
// skipped so later schemes can be added beside v1.
func parseSignature(value string) (ts string, sigs []string, err error) {
	for part := range strings.SplitSeq(value, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return "", nil, ErrMalformedSignature
		}
		switch k {
		case "t":
			if ts != "" {
				return "", nil, ErrMalformedSignature
			}
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	if ts == "" || len(sigs) == 0 {
		return "", nil, ErrMalformedSignature
	}
	return ts, sigs, nil
}
