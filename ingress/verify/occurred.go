package verify

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// OccurredAt finds when the provider says an event happened (stored as
// events.occurred_at), from the field each provider documents:
//
//	stripe             body created (Unix seconds)
//	paddle             body occurred_at (RFC 3339)
//	shopify            X-Shopify-Triggered-At header (RFC 3339)
//	slack              body event_time (Unix seconds; Events API only)
//	gitlab             body object_attributes.updated_at, where present
//	standard-webhooks  body timestamp (RFC 3339), where present
//	hmac               where Config.OccurredAtHeader or OccurredAtJSON says
//	github, twilio     none: the provider sends no event time
//
// OccurredAtHeader or OccurredAtJSON, when set, replace the scheme's field
// for any type. It never fails: a missing or malformed field gives the zero
// time (stored as NULL), because the raw bytes, not this copy, are the record.
// An extractor is safe for concurrent use.
type OccurredAt func(header http.Header, body []byte) time.Time

// NewOccurredAt returns the extractor for a source configured as cfg.
func NewOccurredAt(cfg Config) OccurredAt {
	if p, ok := presets[cfg.Type]; ok {
		cfg = p.apply(cfg)
	}
	switch {
	case cfg.OccurredAtHeader != "":
		name := http.CanonicalHeaderKey(cfg.OccurredAtHeader)
		return func(h http.Header, _ []byte) time.Time { return parseOccurred(h.Get(name)) }
	case cfg.OccurredAtJSON != "":
		return occurredJSON(strings.Split(cfg.OccurredAtJSON, ".")...)
	}
	switch cfg.Type {
	case typeStripe:
		return occurredJSON("created")
	case typePaddle:
		return occurredJSON("occurred_at")
	case typeShopify:
		return func(h http.Header, _ []byte) time.Time { return parseOccurred(h.Get("X-Shopify-Triggered-At")) }
	case typeSlack:
		return occurredJSON("event_time")
	case typeGitLab:
		return occurredJSON("object_attributes", "updated_at")
	case typeStandardWebhooks, typeSvix:
		return occurredJSON("timestamp")
	}
	return func(http.Header, []byte) time.Time { return time.Time{} }
}

func occurredJSON(path ...string) OccurredAt {
	return func(_ http.Header, body []byte) time.Time {
		// An object, or an array (SendGrid's batch of events: 0.timestamp).
		if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) == 0 || (trimmed[0] != '{' && trimmed[0] != '[') {
			return time.Time{}
		}
		s, ok := lookupJSON(body, path)
		if !ok {
			return time.Time{}
		}
		return parseOccurred(s)
	}
}

// occurredLayouts are the textual times providers send: RFC 3339 (Paddle,
// Shopify, Standard Webhooks, GitLab's newer payloads) and GitLab's older
// "2013-12-03 17:23:34 UTC".
var occurredLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05 MST", "2006-01-02 15:04:05 -0700", "2006-01-02T15:04:05.999999999"}

// parseOccurred reads Unix seconds (an integer or decimal number) or one of
// occurredLayouts. Anything else, or a time outside 1970–9999 (PostgreSQL
// could store it, but it is no provider's clock), is the zero time.
func parseOccurred(s string) time.Time {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 64 {
		return time.Time{}
	}
	var t time.Time
	if c := s[0]; '0' <= c && c <= '9' && !strings.ContainsAny(s, "-:T ") {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return time.Time{}
		}
		sec := int64(f)
		t = time.Unix(sec, int64((f-float64(sec))*1e9)).UTC()
		if f >= 1e12 { // milliseconds, as some senders write it
			t = time.UnixMilli(int64(f)).UTC()
		}
	} else {
		for _, layout := range occurredLayouts {
			var err error
			if t, err = time.Parse(layout, s); err == nil {
				break
			}
		}
	}
	if t.Year() < 1970 || t.Year() > 9999 {
		return time.Time{}
	}
	return t.Truncate(time.Microsecond) // PostgreSQL's precision
}

func validateOccurred(c Config) error {
	if c.OccurredAtHeader != "" && c.OccurredAtJSON != "" {
		return fmt.Errorf("occurred_at_header and occurred_at_json: set at most one")
	}
	if c.OccurredAtHeader != "" && !validHeaderName(c.OccurredAtHeader) {
		return fmt.Errorf("occurred_at_header: %q is not a valid header name", c.OccurredAtHeader)
	}
	for _, seg := range strings.Split(c.OccurredAtJSON, ".") {
		if c.OccurredAtJSON != "" && seg == "" {
			return fmt.Errorf("occurred_at_json: %q has an empty segment (write a dotted path like data.created_at)", c.OccurredAtJSON)
		}
	}
	return nil
}
