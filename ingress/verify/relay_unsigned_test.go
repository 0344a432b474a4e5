package verify

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The relay neither forwards nor signs the headers proxies and CDN edges
// set about each hop, so an edge in front of the relay and another in front
// of the ingress do not get every relayed delivery refused (review
// helper-242, fixed by helper-248). Names that merely look alike are kept.
func TestRelayUnsignedForwardHeaders(t *testing.T) {
	t.Parallel()
	dropped := []string{
		"X-Forwarded-For", "x-forwarded-host", "Forwarded", "X-Real-Ip", "Via", "X-Amzn-Trace-Id", "X-Cloud-Trace-Context",
		"Cf-Ray", "CF-Connecting-IP", "Cf-Connecting-Ipv6", "Cf-Ipcountry", "Cf-Visitor", "Cf-Ew-Via", "Cf-Pseudo-Ipv4", "Cf-Worker",
		"Cdn-Loop", "True-Client-Ip", "x-request-id", "X-Envoy-External-Address", "X-Envoy-Attempt-Count",
		"Traceparent", "Tracestate", "B3", "X-B3-Traceid", "X-B3-Spanid", "Fastly-Client-Ip", "Fastly-Ff",
		"X-Azure-Ref", "X-Azure-Clientip", "Akamai-Origin-Hop",
	}
	kept := []string{
		"Content-Type", "Stripe-Signature", "Request-Id", "X-Request-Uuid", "X-Requestid", "Cf-Webhook-Auth",
		"X-Envoy", "Fastly", "X-Azure", "X-Forwardedness", "X-Github-Delivery", "Sentry-Hook-Resource",
	}
	h := http.Header{}
	for _, n := range slices.Concat(dropped, kept) {
		h[n] = []string{"v-" + n}
	}
	got := RelayForwardHeaders(h)
	want := http.Header{}
	for _, n := range kept {
		want[n] = []string{"v-" + n}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("RelayForwardHeaders = %v, want %v", got, want)
	}
	if len(h) != len(dropped)+len(kept) {
		t.Fatalf("RelayForwardHeaders changed its input: %v", h)
	}
	// What is not forwarded is not signed: one set for both.
	if list := SignRelay([]string{relayTestSecret}, testNow, "stripe", "/webhooks/stripe", got, nil).Get(RelayHeaderHeaders); strings.Contains(list, "cf-ray") || strings.Contains(list, "x-request-id") {
		t.Fatalf("%s = %q", RelayHeaderHeaders, list)
	}
}

// relay.unsigned_headers adds names and prefixes in any case; the names a
// source's configuration reads are forwarded and signed all the same.
func TestRelayUnsignedConfigured(t *testing.T) {
	t.Parallel()
	u, err := NewRelayUnsigned([]string{"x-edge-*", "X-Hop-Id"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"X-Edge-Hop": true, "X-EDGE-": true, "x-hop-id": true, "Cf-Ray": true,
		"X-Edge": false, "X-Hop-Idx": false, "Stripe-Signature": false,
	} {
		if got := u.Matches(name); got != want {
			t.Errorf("Matches(%q) = %v, want %v", name, got, want)
		}
	}
	cfg := Config{Type: "hmac", Secrets: []string{"s"}, EventIDHeader: "x-request-id", EventTypeHeader: "X-Edge-Kind",
		HMAC: HMACConfig{Header: "X-Sig", SignedPayload: "{header:x-b3-traceid}.{body}"}}
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	reads := RelaySourceHeaders(cfg)
	if want := []string{"X-B3-Traceid", "X-Edge-Kind", "X-Request-Id", "X-Sig"}; !slices.Equal(reads, want) {
		t.Fatalf("RelaySourceHeaders = %q, want %q", reads, want)
	}
	h := http.Header{"X-Request-Id": {"id"}, "X-Edge-Kind": {"k"}, "X-B3-Traceid": {"t"}, "X-B3-Spanid": {"s"},
		"X-Edge-Hop": {"h"}, "X-Hop-Id": {"i"}, "X-Sig": {"sig"}}
	got := u.Keeping(reads).ForwardHeaders(h)
	want := http.Header{"X-Request-Id": {"id"}, "X-Edge-Kind": {"k"}, "X-B3-Traceid": {"t"}, "X-Sig": {"sig"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ForwardHeaders = %v, want %v", got, want)
	}
	if len(u.keep) != 0 {
		t.Fatalf("Keeping changed its receiver: %v", u.keep)
	}
	for _, bad := range []string{"*", "", "X Edge", "X-*-Id", "X-Edge**", "Ünicode", "X-Edge:"} {
		if _, err := NewRelayUnsigned([]string{"X-Ok", bad}); err == nil || !strings.HasPrefix(err.Error(), "[1]: ") {
			t.Errorf("NewRelayUnsigned(%q) = %v, want an error naming entry 1", bad, err)
		}
	}
}

// headerLiteral is a string literal that may be a header name, or a
// {header:Name} placeholder in a signed-payload template.
var (
	headerLiteral     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*$`)
	headerPlaceholder = regexp.MustCompile(`\{header:([^}]*)\}`)
)

// No provider preset or scheme reads a header the relay leaves unsigned by
// default: the relay would not forward it, and relayed deliveries of that
// provider would fail or lose their id. Every string literal of the
// package's code is checked, handshake headers included, and so is what
// RelaySourceHeaders says each type reads.
func TestRelayUnsignedDefaultsReadByNoProvider(t *testing.T) {
	t.Parallel()
	var u RelayUnsigned
	for _, typ := range append(Types(), typeSvix) {
		reads := RelaySourceHeaders(Config{Type: typ})
		if len(reads) == 0 && typ != typeHMAC && !slices.Contains([]string{"mailgun", "microsoft-graph"}, typ) {
			t.Errorf("type %s reads no header, says RelaySourceHeaders", typ)
		}
		for _, name := range reads {
			if u.Matches(name) {
				t.Errorf("type %s reads %s, which the relay neither forwards nor signs", typ, name)
			}
		}
	}
	// A source's own reads are kept, whatever the operator lists.
	for typ, want := range map[string]string{"stripe": "Stripe-Signature", "github": "X-Github-Delivery",
		"svix": "Svix-Signature", "clerk": "Svix-Id", "bitbucket": "X-Request-Uuid"} {
		if reads := RelaySourceHeaders(Config{Type: typ}); !slices.Contains(reads, want) {
			t.Errorf("RelaySourceHeaders(%s) = %q, lacks %s", typ, reads, want)
		}
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "relay.go" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			names := []string{s}
			for _, m := range headerPlaceholder.FindAllStringSubmatch(s, -1) {
				names = append(names, m[1])
			}
			for _, name := range names {
				if headerLiteral.MatchString(name) {
					checked++
					if u.Matches(name) {
						t.Errorf("%s: %q is a header the relay neither forwards nor signs by default", fset.Position(lit.Pos()), name)
					}
				}
			}
			return true
		})
	}
	if checked < 50 {
		t.Fatalf("only %d header-like literals found: is the scan looking at the package's files?", checked)
	}
}
