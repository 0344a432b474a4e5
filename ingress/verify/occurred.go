package verify

import (
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

// EventTypeOf reads an event's type from its body as ingress does for a
// source that takes it from there (event_type_json); ok is false when the
// source does not, so the scheme's own type (or a header's) applies.
type EventTypeOf func(body []byte) (typ string, ok bool)

// NewEventTypeOf returns cfg's EventTypeOf, nil when cfg takes no event type
// from the body. For the tools that store events outside ingress (backfill,
// reconcile), from bodies as the provider's API returns them.
func NewEventTypeOf(cfg Config) EventTypeOf {
	if p, ok := presets[cfg.Type]; ok {
		cfg = p.apply(cfg)
	}
	if cfg.EventTypeJSON == "" {
		return nil
	}
	path := strings.Split(cfg.EventTypeJSON, ".")
	return func(body []byte) (string, bool) {
		typ, _ := lookupJSON(body, path) // none: "", as ingress stores it
		return typ, true
	}
}

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
		if !jsonObject(body) && !jsonArray(body) { // an array: a batch (HubSpot's)
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
// The plausible window of an event's own time (parseOccurred).
var (
	occurredNotBefore = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	occurredAhead     = 24 * time.Hour
)

// GitLab's zone is the literal UTC (or GMT): layout "MST" would take any
// abbreviation and, for one this process's zone does not define (PST on a
// UTC server), read the time as UTC, hours off (review helper-77).
var occurredLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05 UTC", "2006-01-02 15:04:05 GMT", "2006-01-02 15:04:05 -0700", "2006-01-02T15:04:05.999999999"}

// parseOccurred reads Unix seconds (an integer or decimal number) or one of
// occurredLayouts. Anything else, or a time before 2000 or more than a day
// ahead of this clock, is the zero time (occurred_at NULL): no provider's
// clock says 1970 (an unset "created": 0) or 9999, and an ordered
// handler's lane sorts events by this time, so one such value would go
// before, or after, every real one.
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
		if whole, frac, ok := strings.Cut(s, "."); ok && f < 1e12 && len(frac) <= 9 {
			// Exactly, not through a float64 (Mailgun's 1699999999.908181).
			n, err1 := strconv.ParseInt(whole, 10, 64)
			ns, err2 := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
			if err1 == nil && err2 == nil {
				t = time.Unix(n, ns).UTC()
			}
		}
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
	if t.Before(occurredNotBefore) || t.After(time.Now().Add(occurredAhead)) {
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
