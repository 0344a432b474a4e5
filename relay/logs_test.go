package relay_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The source name of a request path is the sender's. The ingress cuts it to
// 64 bytes in its log line and writes one "unknown_source" line a second at
// most (internal/logvalue: "a sender must not be able to grow the log by
// the size of what it sends"). The relay, which runs outside the customer's
// database and answers anyone on the internet, logged the whole name, once
// per request (a review proved it): whatever a sender put in the path (a
// token of a misconfigured webhook URL, any bytes at all) was copied in full
// into its logs. It now logs through the same package (internal/logvalue).
func TestRelayLogsOfAnUnknownSourceAreCutAndLimited(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	name := strings.Repeat("p", 100) + canary + strings.Repeat("q", 4000)
	ingressClient := &http.Client{Transport: mustTransport(t, b.caFile)}
	started := time.Now()
	for range 20 {
		req, _ := http.NewRequest(http.MethodPost, b.relayURL+"/webhooks/"+name, strings.NewReader("{}"))
		if code, _, _ := do(t, req); code != http.StatusNotFound {
			t.Fatalf("status %d, want 404", code)
		}
		// The same request to the customer's ingress, for comparison.
		req, _ = http.NewRequest(http.MethodPost, b.ingressURL+"/webhooks/"+name, strings.NewReader("{}"))
		if resp, err := ingressClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	relayLogs := b.relayLogs.String()
	// One line a second: a loaded machine may take more than a second
	// for the 20 requests, each second allowing one more.
	allowed := 1 + int(time.Since(started)/time.Second)
	if strings.Contains(b.ingestLogs.String(), canary) {
		t.Errorf("ingress log holds the sender's path beyond its 64-byte cut")
	}
	lines := strings.Count(relayLogs, "unknown_source")
	if strings.Contains(relayLogs, canary) || lines > allowed {
		t.Errorf("relay log holds the sender's path beyond 64 bytes (%v) in %d lines for 20 requests, want at most %d (one a second; ingress: 1 line, cut); %d bytes of relay log",
			strings.Contains(relayLogs, canary), lines, allowed, len(relayLogs))
	}
}
