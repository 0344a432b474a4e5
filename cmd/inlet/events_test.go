package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

// inlet events show: how long after the provider's time an event arrived.
func TestDeliveryLag(t *testing.T) {
	for d, want := range map[time.Duration]string{
		780 * time.Millisecond:              "received 780ms later",
		0:                                   "received 0s later",
		1500 * time.Millisecond:             "received 2s later",
		3*time.Hour + 2*time.Second:         "received 3h0m2s later",
		-400 * time.Millisecond:             "received 400ms before it: the provider's clock runs ahead",
		-(2*time.Second + time.Millisecond): "received 2s before it: the provider's clock runs ahead",
	} {
		if got := deliveryLag(d); got != want {
			t.Errorf("deliveryLag(%s) = %q, want %q", d, got, want)
		}
	}
}

// A carriage return is text only as the start of a CRLF: a lone one moves
// the cursor back, so the rest of the line would overwrite what the
// operator sees (review helper-142).
func TestPrintableTextCarriageReturn(t *testing.T) {
	for body, want := range map[string]bool{
		"a\r\nb\r\n":             true,
		"\r\n":                   true,
		"grüße\r\n✓":             true,
		"\r":                     false,
		"a\rb":                   false,
		"a\r":                    false, // at the very end
		"\rb":                    false,
		"a\r\r\nb":               false, // CR CR LF: the first is lone
		"a\r\n\rb":               false,
		"a\n\rb":                 false, // LF CR is no CRLF
		"{\"amount\":100}\r{}  ": false,
	} {
		if got := printableText([]byte(body)); got != want {
			t.Errorf("printableText(%q) = %v, want %v", body, got, want)
		}
	}
}

// Nothing stored reaches the terminal as a control character through inlet
// events show: not the body, nor a header, the request URI, the metadata or
// a job's error text. Tab, newline and CRLF are all it may write.
func TestPrintEventWritesNoControlCharacters(t *testing.T) {
	const hostile = "x\ry\x1b[2J\u202e\u0085z"
	s := func(v string) *string { return &v }
	now := time.Date(2026, 3, 3, 10, 0, 0, 0, time.UTC)
	e := admin.EventDetail{
		EventMeta: admin.EventMeta{ID: 7, Provider: hostile, Scheme: hostile, ExternalEventID: hostile, EventType: hostile,
			ReceivedAt: now, BodySHA256: "00"},
		Headers:    map[string][]string{"X-Hostile" + hostile: {hostile, "ok"}, "Content-Type": {"application/json\r"}},
		RequestURI: "/webhooks/stripe?" + hostile,
		RawBody:    []byte(`{"amount":100000}` + "\r" + `{"amount":1}`),
		Jobs: []admin.Job{{ID: 1, EventID: 7, Handler: hostile, Status: "dead_letter", AttemptCount: 1, MaxAttempts: 1,
			LastError: s(hostile), LastErrorClass: s(hostile), CreatedAt: now, UpdatedAt: now,
			Attempts: []admin.Attempt{{ID: 1, Run: 1, Attempt: 1, WorkerID: s(hostile), StartedAt: now, FinishedAt: now,
				Outcome: "failed", ErrorClass: s(hostile), Error: s(hostile)}}}},
	}
	var out bytes.Buffer
	if err := printEvent(&out, e); err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(out.String(), "\r\n", "\n")
	if i := strings.IndexFunc(text, func(r rune) bool {
		return r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e')
	}); i >= 0 {
		t.Fatalf("events show wrote %q at byte %d:\n%s", text[i:i+1], i, out.String())
	}
	if !strings.Contains(text, "(not printable text; inlet events show 7 --raw") {
		t.Errorf("a body with a lone CR is not shown as a hex dump:\n%s", text)
	}
}
