package ingress

import (
	"errors"
	"fmt"
	"net/http"
)

// Limits on what an event may carry into the database. Each stored key field
// is indexed (event_keys on (provider, external_event_id), the events index
// on (provider, event_type, received_at)), and a B-tree entry cannot exceed
// about 2.7 kB: past that PostgreSQL refuses the row ("index row size
// exceeds maximum"), and it would refuse every retry of it. So ingress
// refuses such a request itself, with a 4xx and a reason, before anything is
// written; the limits are far above what any provider sends (ids of 20-70
// bytes, types under 60).
const (
	// MaxExternalIDBytes bounds the event id (external_event_id): 400
	// event_id_too_long.
	MaxExternalIDBytes = 1024
	// MaxEventTypeBytes bounds the event type (event_type): 400
	// event_type_too_long.
	MaxEventTypeBytes = 256
	// MaxSourceNameBytes bounds a source's name (provider), as the
	// configuration does (1-63 characters); checked when ingress starts.
	MaxSourceNameBytes = 63
	// MaxHeaderCount bounds the header lines of a request, every value of a
	// repeated name counted (stored in events.headers): 431
	// too_many_headers.
	MaxHeaderCount = 100
	// MaxHeaderBytes bounds the header names and values of a request
	// together (stored in events.headers): 431 headers_too_large. The HTTP
	// server itself refuses a header block over 64 KiB (431 with no reason).
	MaxHeaderBytes = 32 << 10
)

// ErrUnstorable is wrapped by every error that says an event can never be
// stored as it is: a field over its limit, or data the database refused
// (SQLSTATE classes 22 and 54). Retrying the same event fails the same way,
// so ingress answers it 4xx, never 5xx.
var ErrUnstorable = errors.New("event cannot be stored")

// limitError is an event or request over one of the limits above. Its text
// names the field and the sizes, never the value.
type limitError struct {
	field  string
	size   int
	limit  int
	reason string // the answer's reason
	status int    // the answer's status
}

func (e *limitError) Error() string {
	return fmt.Sprintf("%s: %s is %d bytes, limit %d", ErrUnstorable, e.field, e.size, e.limit)
}

func (e *limitError) Unwrap() error { return ErrUnstorable }

// checkEvent reports the first stored key field of e over its limit.
func checkEvent(e *Event) error {
	switch {
	case len(e.Provider) > MaxSourceNameBytes:
		return &limitError{"source name", len(e.Provider), MaxSourceNameBytes, "source_name_too_long", http.StatusBadRequest}
	case len(e.ExternalID) > MaxExternalIDBytes:
		return &limitError{"event id", len(e.ExternalID), MaxExternalIDBytes, "event_id_too_long", http.StatusBadRequest}
	case len(e.EventType) > MaxEventTypeBytes:
		return &limitError{"event type", len(e.EventType), MaxEventTypeBytes, "event_type_too_long", http.StatusBadRequest}
	}
	return checkHeaders(e.Headers)
}

// checkHeaders reports headers over MaxHeaderCount or MaxHeaderBytes.
func checkHeaders(h http.Header) error {
	lines, size := 0, 0
	for name, values := range h {
		lines += len(values)
		for _, v := range values {
			size += len(name) + len(v)
		}
	}
	switch {
	case lines > MaxHeaderCount:
		return &limitError{"header count", lines, MaxHeaderCount, "too_many_headers", http.StatusRequestHeaderFieldsTooLarge}
	case size > MaxHeaderBytes:
		return &limitError{"headers", size, MaxHeaderBytes, "headers_too_large", http.StatusRequestHeaderFieldsTooLarge}
	}
	return nil
}

// limitReasons are the rejections for a limit (pre-created metric series).
var limitReasons = []string{"event_id_too_long", "event_type_too_long", "too_many_headers", "headers_too_large"}
