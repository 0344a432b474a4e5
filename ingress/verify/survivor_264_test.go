package verify

import (
	"net/http"
	"reflect"
	"slices"
	"testing"
)

// TestSurvivor264_RelayKeepsTheOccurredAtHeaderASourceReads: a header a
// source's configuration reads is forwarded and signed even when the
// relay's unsigned set lists it; occurred_at_header is one of them
// (RelaySourceHeaders: event id, type and time headers), as the event's
// occurred_at comes from it.
//
// Mutant (helper-264): ingress/verify/relay.go:269 RelaySourceHeaders'
// add(cfg.EventIDHeader, cfg.EventTypeHeader, cfg.OccurredAtHeader) without
// cfg.OccurredAtHeader: an edge-prefixed time header (X-Edge-Sent under
// relay.unsigned_headers X-Edge-*) was dropped by the relay and the
// ingress stored no occurred_at from it. TestRelayUnsignedConfigured sets
// event_id_header and event_type_header only.
func TestSurvivor264_RelayKeepsTheOccurredAtHeaderASourceReads(t *testing.T) {
	t.Parallel()
	u, err := NewRelayUnsigned([]string{"X-Edge-*"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Type: "hmac", Secrets: []string{"s"}, OccurredAtHeader: "x-edge-sent",
		HMAC: HMACConfig{Header: "X-Sig"}}
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	reads := RelaySourceHeaders(cfg)
	if !slices.Contains(reads, "X-Edge-Sent") {
		t.Errorf("RelaySourceHeaders = %q, want X-Edge-Sent (occurred_at_header) among them", reads)
	}
	h := http.Header{"X-Edge-Sent": {"2026-01-02T03:04:05Z"}, "X-Edge-Hop": {"h"}, "X-Sig": {"sig"}}
	got := u.Keeping(reads).ForwardHeaders(h)
	want := http.Header{"X-Edge-Sent": {"2026-01-02T03:04:05Z"}, "X-Sig": {"sig"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ForwardHeaders = %v, want %v: the occurred_at_header the source reads kept", got, want)
	}
}
