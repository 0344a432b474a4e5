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

	"github.com/inlet-dev/inlet/consumers"
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

// Signed is what a v2 signature covers besides the timestamp and the body:
// the metadata a service routes and deduplicates on.
type Signed struct {
	JobID     int64
	EventID   int64
	Provider  string
	EventType string
}

// HeaderValue is s as an HTTP header carries it, and so as v2 signs it: its
// control characters (a newline, which net/http refuses to send, among them)
// as '?', and without the spaces and tabs around it, which a header value
// loses on the way. An event type from a body may hold either (review
// helper-129: such an event failed every attempt, or its service's Verify).
func HeaderValue(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
	return strings.Trim(s, " \t")
}

// Sign returns the Inlet-Signature value for body of the job at time t: a v1
// over "<t>.<job id>.<body>" (for services verifying with an SDK before v2)
// and a v2 over "<t>\n<job id>\n<event id>\n<provider>\n<event type>\n<body>",
// which also covers Inlet-Event-Id, Inlet-Provider and Inlet-Event-Type (a
// header value holds no newline, so the fields cannot be shifted into each
// other).
func Sign(secret string, t time.Time, m Signed, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, m.JobID, body)) + ",v2=" + hex.EncodeToString(mac2(secret, ts, m, body))
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

func mac2(secret, ts string, s Signed, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	for _, f := range []string{ts, strconv.FormatInt(s.JobID, 10), strconv.FormatInt(s.EventID, 10), s.Provider, s.EventType} {
		m.Write([]byte(f))
		m.Write([]byte{'\n'})
	}
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks a forwarded request: its Inlet-Signature must hold a v2, an
// HMAC with secret over its timestamp, Inlet-Job-Id, Inlet-Event-Id,
// Inlet-Provider, Inlet-Event-Type and body, its Idempotency-Key (when
// present) must be the job's, and the timestamp within tolerance of now
// (DefaultTolerance when tolerance <= 0). Several v2 values are accepted, any
// one matching, so a sender may sign with an old and a new secret during
// rotation. The comparison is constant-time. A request signed with v1 only
// (an Inlet consumer from before v2: upgrade the consumers before the
// services that verify) is refused, as is a second value of a signed header: v1 covers neither the event's id, source
// nor type, which a captured request could then be resent with, changed.
// Inlet-Attempt is not covered: a retry of the same attempt is the same
// request.
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
	// The ids as signed: canonical decimal only, so a captured request
	// resent as 042 or +42 (the same number, another text a receiver may
	// dedupe on) does not verify.
	jobID, ok := canonicalID(header.Get(HeaderJobID))
	if !ok {
		return ErrMalformedSignature
	}
	eventID, ok := canonicalID(header.Get(HeaderEventID))
	if !ok {
		return ErrMalformedSignature
	}
	if key := header.Values(HeaderIdempotencyKey); len(key) > 1 || (len(key) == 1 && key[0] != idempotencyKey(jobID)) {
		return fmt.Errorf("%w: %s is not the signed job's", ErrSignatureMismatch, HeaderIdempotencyKey)
	}
	for _, h := range []string{HeaderJobID, HeaderEventID, HeaderProvider, HeaderEventType} {
		if len(header.Values(h)) > 1 {
			return ErrMalformedSignature
		}
	}
	ts, sigs, err := parseSignature(value)
	if err != nil {
		return err
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrMalformedSignature
	}
	want := mac2(secret, ts, Signed{JobID: jobID, EventID: eventID, Provider: header.Get(HeaderProvider), EventType: header.Get(HeaderEventType)}, body)
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

// canonicalID parses a decimal id written as strconv writes it.
func canonicalID(text string) (int64, bool) {
	id, err := strconv.ParseInt(text, 10, 64)
	return id, err == nil && strconv.FormatInt(id, 10) == text
}

// idempotencyKey is the Idempotency-Key of job id (consumers.Event's).
func idempotencyKey(jobID int64) string {
	return (&consumers.Event{JobID: jobID}).IdempotencyKey()
}

// parseSignature splits "t=<ts>,v1=<hex>,v2=<hex>[,v2=<hex>...]" and returns
// the v2 values; unknown keys (v1 among them) are skipped so later schemes
// can be added beside v2.
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
		case "v2":
			sigs = append(sigs, v)
		}
	}
	if ts == "" || len(sigs) == 0 {
		return "", nil, ErrMalformedSignature
	}
	return ts, sigs, nil
}
