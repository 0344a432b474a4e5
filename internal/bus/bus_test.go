package bus

import (
	"strings"
	"testing"
)

func TestRefRoundTrip(t *testing.T) {
	t.Parallel()
	in := Ref{JobID: 7, EventID: 3, Handler: "billing", Provider: "stripe", EventType: "invoice.paid", Attempt: 2}
	msg, err := NewMessage(in)
	if err != nil {
		t.Fatal(err)
	}
	if msg.UUID != "7-2" {
		t.Fatalf("uuid = %q", msg.UUID)
	}
	out, err := ParseMessage(msg)
	if err != nil || out != in {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	// The payload is exactly the reference fields: nothing else can ride along.
	for _, k := range []string{`"job_id"`, `"event_id"`, `"handler"`, `"provider"`, `"event_type"`, `"attempt"`} {
		if !strings.Contains(string(msg.Payload), k) {
			t.Fatalf("payload %s lacks %s", msg.Payload, k)
		}
	}
	if n := strings.Count(string(msg.Payload), `":`); n != 6 {
		t.Fatalf("payload has %d fields, want 6: %s", n, msg.Payload)
	}
	msg.Payload = []byte(`{"job_id":1}`)
	if _, err := ParseMessage(msg); err == nil {
		t.Fatal("a reference without attempt and handler parsed")
	}
}

func TestValidHandlerName(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{"billing": true, "a-b_c9": true, "": false, "Billing": false, "a.b": false, "a b": false, "a>": false} {
		if err := ValidHandlerName(name); (err == nil) != ok {
			t.Errorf("ValidHandlerName(%q) = %v", name, err)
		}
	}
}
