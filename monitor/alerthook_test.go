package monitor_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// alertHook is an alert sink (silence.alert_url) that keeps every alert's
// JSON body, for the event-type tests.
type alertHook struct {
	URL string
	mu  sync.Mutex
	got []map[string]any
}

func newAlertHook(t *testing.T) *alertHook {
	t.Helper()
	h := &alertHook{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a map[string]any
		_ = json.NewDecoder(r.Body).Decode(&a)
		h.mu.Lock()
		h.got = append(h.got, a)
		h.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	h.URL = srv.URL
	return h
}

// take returns the alerts received since the last take.
func (h *alertHook) take() []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	got := h.got
	h.got = nil
	return got
}
