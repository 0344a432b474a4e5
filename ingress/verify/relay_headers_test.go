package verify

import (
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"
)

// A relay does not forward or sign the headers a proxy in front of it adds
// about that hop: a proxy in front of the ingress sets or appends them again
// (review helper-228).
func TestRelayForwardHeadersDropsProxyHeaders(t *testing.T) {
	h := http.Header{
		"Content-Type":      {"application/json"},
		"X-Forwarded-For":   {"192.0.2.7"},
		"X-Forwarded-Proto": {"https"},
		"x-forwarded-host":  {"relay.example"}, // not in canonical form
		"Forwarded":         {"for=192.0.2.7;proto=https"},
		"X-Real-Ip":         {"192.0.2.7"},
		"Via":               {"1.1 proxy"},
		"X-Amzn-Trace-Id":   {"Root=1-67891233-abcdef012345678912345678"},
		"X-Forwardedness":   {"kept: not X-Forwarded-*"},
		"X-Github-Delivery": {"kept"},
	}
	got := RelayForwardHeaders(h)
	want := http.Header{
		"Content-Type":      {"application/json"},
		"X-Forwardedness":   {"kept: not X-Forwarded-*"},
		"X-Github-Delivery": {"kept"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("RelayForwardHeaders = %v, want %v", got, want)
	}
	if len(h) != 10 {
		t.Fatalf("RelayForwardHeaders changed its input: %v", h)
	}
}

// Whoever sits between relay and ingress cannot list a header of their own
// in Inlet-Relay-Headers (review helper-228): an entry in another case added
// no line to the digest and was read back case-insensitively.
func TestVerifyRelayRefusesAlteredList(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	cases := []struct {
		name   string
		change func(h http.Header)
	}{
		{"entry in another case", func(h http.Header) {
			h.Set("Idempotency-Key", "chosen-by-path")
			h.Set(RelayHeaderHeaders, "Idempotency-Key,"+h.Get(RelayHeaderHeaders))
		}},
		{"entry in another case, sorted among the rest", func(h http.Header) {
			h.Set("X-Event-Id", "chosen-by-path")
			h.Set(RelayHeaderHeaders, "X-Event-Id,"+h.Get(RelayHeaderHeaders))
		}},
		{"relay header listed", func(h http.Header) {
			h.Set(RelayHeaderHeaders, h.Get(RelayHeaderHeaders)+",inlet-relay-id")
		}},
		{"empty entry", func(h http.Header) {
			h.Set(RelayHeaderHeaders, ","+h.Get(RelayHeaderHeaders))
		}},
		{"entry that is not a header name", func(h http.Header) {
			h.Set(RelayHeaderHeaders, h.Get(RelayHeaderHeaders)+",x y")
		}},
		{"entry with no value received", func(h http.Header) {
			h.Set(RelayHeaderHeaders, h.Get(RelayHeaderHeaders)+",x-nothing")
		}},
		{"list given twice", func(h http.Header) {
			h.Add(RelayHeaderHeaders, "content-type")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, body := relaySigned(t, []string{relayTestSecret}, now)
			c.change(h)
			if _, err := VerifyRelay([]string{relayTestSecret}, 5*time.Minute, "stripe", "/webhooks/stripe?a=1", h, body, now); !errors.Is(err, ErrRelayHeadersMismatch) {
				t.Fatalf("VerifyRelay = %v, want %v", err, ErrRelayHeadersMismatch)
			}
			for k := range RelayListedHeaders(h) {
				if k == "Idempotency-Key" || k == "X-Event-Id" || k == "X-Nothing" || isRelayHeader(k) {
					t.Fatalf("RelayListedHeaders keeps %s", k)
				}
			}
		})
	}
}

// Whatever a party between relay and ingress does to the list and the
// headers, a request VerifyRelay accepts yields exactly the headers the
// relay signed.
func FuzzRelayListedHeaders(f *testing.F) {
	f.Add("Idempotency-Key,content-type,stripe-signature,x-multi", "Idempotency-Key", "chosen")
	f.Add("content-type,stripe-signature,x-multi,x-new", "X-New", "v")
	f.Add("content-type,stripe-signature", "", "")
	f.Add("content-type,stripe-signature,x-multi", "x-multi", "three")
	f.Fuzz(func(t *testing.T, list, name, value string) {
		now := time.Unix(1_700_000_000, 0)
		h, body := relaySigned(t, []string{relayTestSecret}, now)
		want := RelayListedHeaders(h)
		h.Set(RelayHeaderHeaders, list)
		if name != "" {
			h[name] = append(h[name], value)
		}
		if _, err := VerifyRelay([]string{relayTestSecret}, 5*time.Minute, "stripe", "/webhooks/stripe?a=1", h, body, now); err != nil {
			return
		}
		if got := RelayListedHeaders(h); !reflect.DeepEqual(got, want) {
			t.Fatalf("list %q, added %q: %q: accepted with headers %v, signed %v", list, name, value, got, want)
		}
	})
}
