package monitor_test

// Review helper-181, on 9284f37 (monitor: a 4xx refusing one alert's
// payload is recorded and not retried); fixed, this describes the code
// before the fix.
//
// Defect: postAlert (monitor/silence.go, the `case code/100 == 4:` branch)
// treats every 4xx that is not 408, 429 or one of sinkConfigRefusal's
// (401, 403, 404, 405, 407, 410) as "this payload is refused for good"
// (errAlertRejected): the alert is recorded as reported (source_alerts /
// event_types.alerted_at) and never sent again. But HTTP itself defines two
// 4xx answers that say the opposite — the request was fine, send it again:
//
//   - 425 Too Early (RFC 8470 §5.2: "A client that receives a 425 response
//     MAY automatically retry the request"), answered by a TLS-terminating
//     proxy or CDN that refuses a request it deems replayable right now;
//   - 421 Misdirected Request (RFC 9110 §15.5.20: "Clients receiving a 421
//     response MAY retry the request, whether or not the original request
//     was idempotent"), answered by a load balancer/CDN that routed the
//     request to a server not configured for that authority (connection
//     reuse, a TLS certificate covering several names).
//
// Neither says anything about the payload: the same alert, sent again, is
// taken. Yet a sink that answers one of them once, then is fine, loses the
// alert for good: the "silent" (or "new event type") alert is recorded as
// reported, logged "refused by the sink, not retried", and the operator is
// never told that the source went silent — exactly what the commit meant to
// prevent for a sink that is down (5xx, 408, 429 "stop the check and are
// retried").
//
// Expected: a 421 or 425 is handled like 408/429 (errSinkUnavailable: not
// recorded, sent again at the next check), so the alert is taken at the
// second check.
//
// Fixed: sinkTransient (408, 421, 425, 429) and sinkConfigRefusal (now
// with 415 and 426 too) hold the alert and retry it.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/monitor"
)

var retryableStatuses = []int{http.StatusMisdirectedRequest, http.StatusTooEarly}

func TestSilenceAlertRetryable4xxIsNotDroppedForGood(t *testing.T) {
	t.Parallel()
	for _, status := range retryableStatuses {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			_, streamer := pools(t)
			// The sink answers `status` to the first alert of a_src only,
			// then takes everything.
			sink := newPickySink(t, "source", "a_src", status, true)
			var logs strings.Builder
			var logMu sync.Mutex
			h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
				DB: streamer, AlertURL: sink.srv.URL,
				MaxSilence: map[string]time.Duration{"a_src": time.Hour},
				Logger:     newLogger(&logs, &logMu),
			})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, err := h.Check(ctx); err != nil {
					t.Fatal(err)
				}
			}
			taken, posts := sink.state()
			if !slices.Contains(taken, "a_src") {
				logMu.Lock()
				logged := logs.String()
				logMu.Unlock()
				t.Errorf("a_src's \"silent\" alert, answered %d %s once (a retryable answer, RFC 9110/8470), was POSTed %d time(s) "+
					"over two checks and never taken: recorded as reported and dropped for good; want it sent again at the next check. log:\n%s",
					status, http.StatusText(status), posts, logged)
			}
		})
	}
}

func TestEventTypeAlertRetryable4xxIsNotDroppedForGood(t *testing.T) {
	t.Parallel()
	for _, status := range retryableStatuses {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			super, streamer := pools(t)
			exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
				VALUES ('github', 'github', 'd1', 'a.type', '{}', true)`)
			sink := newPickySink(t, "event_type", "a.type", status, true)
			var logs strings.Builder
			var logMu sync.Mutex
			w, err := monitor.NewEventTypes(monitor.EventTypesConfig{
				DB: streamer, AlertURL: sink.srv.URL, Logger: newLogger(&logs, &logMu),
			})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := w.Check(ctx); err != nil {
					t.Fatal(err)
				}
			}
			taken, posts := sink.state()
			if !slices.Contains(taken, "a.type") {
				logMu.Lock()
				logged := logs.String()
				logMu.Unlock()
				t.Errorf("github/a.type's new-type alert, answered %d %s once (a retryable answer), was POSTed %d time(s) "+
					"over two checks and never taken: recorded as alerted and dropped for good; want it sent again. log:\n%s",
					status, http.StatusText(status), posts, logged)
			}
		})
	}
}

// Defect 2 (same branch of postAlert; fixed): 426 Upgrade Required (RFC 9110
// §15.5.22: "the server refuses to perform the request using the current
// protocol") refuses EVERY request to that URL, whatever its payload — e.g.
// an alert_url written http:// for a sink that demands TLS, or HTTP/1.1 to
// one that demands HTTP/2. It is a configuration refusal of the same kind as
// 405 or 410, which sinkConfigRefusal holds ("held and sent once the URL or
// token is fixed", docs/operations.md), but postAlert treats it as "this
// payload refused for good": at the first check every pending alert (here
// three sources' "silent") is recorded as reported and dropped, one after
// another, so once the operator fixes the sink none of them is ever sent.
//
// Expected: a 426 holds the alerts like 401/403/404/405/407/410 (sink
// down for this check, retried), so they are all taken once the sink is
// fixed.
func TestSilenceAlertsHeldOnUpgradeRequired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, streamer := pools(t)
	var mu sync.Mutex
	fixed := false
	var taken []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a map[string]any
		_ = json.NewDecoder(r.Body).Decode(&a)
		mu.Lock()
		defer mu.Unlock()
		if !fixed {
			w.Header().Set("Upgrade", "TLS/1.2, HTTP/1.1")
			w.WriteHeader(http.StatusUpgradeRequired)
			return
		}
		taken = append(taken, fmt.Sprint(a["source"]))
	}))
	t.Cleanup(srv.Close)
	var logs strings.Builder
	var logMu sync.Mutex
	h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
		DB: streamer, AlertURL: srv.URL,
		MaxSilence: map[string]time.Duration{"a_src": time.Hour, "b_src": time.Hour, "c_src": time.Hour},
		Logger:     newLogger(&logs, &logMu),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Check(ctx); err != nil { // the sink refuses every request
		t.Fatal(err)
	}
	mu.Lock()
	fixed = true // the operator fixes the sink / URL
	mu.Unlock()
	if _, err := h.Check(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := slices.Clone(taken)
	mu.Unlock()
	slices.Sort(got)
	if want := []string{"a_src", "b_src", "c_src"}; !slices.Equal(got, want) {
		logMu.Lock()
		logged := logs.String()
		logMu.Unlock()
		t.Errorf("after a sink that answered 426 Upgrade Required to every request was fixed, the alerts taken are %v, want %v: "+
			"each was recorded as reported and dropped for good at the first check. log:\n%s", got, want, logged)
	}
}
