package log_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/log"
)

func TestLogsMetadataOnly(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	h := log.New(slog.New(slog.NewJSONHandler(&buf, nil)))
	e := &consumers.Event{
		JobID: 42, EventID: 7, Handler: "audit", Provider: "stripe", Scheme: "stripe",
		ExternalID: "evt_SECRET_EXTERNAL", EventType: "invoice.paid", ReceivedAt: time.Now(),
		Headers: http.Header{"Stripe-Signature": {"t=1,v1=SECRET_SIGNATURE"}, "Authorization": {"Bearer SECRET_TOKEN"}},
		Body:    []byte(`{"customer":"SECRET_CUSTOMER"}`),
		Attempt: 3, MaxAttempts: 25,
	}
	if err := h(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	line := buf.String()
	for _, secret := range []string{"SECRET", "Stripe-Signature", "Authorization", "evt_"} {
		if strings.Contains(line, secret) {
			t.Errorf("log line contains %q: %s", secret, line)
		}
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("not one JSON line: %v: %s", err, line)
	}
	want := map[string]any{
		"job_id": 42.0, "event_id": 7.0, "provider": "stripe",
		"event_type": "invoice.paid", "attempt": 3.0, "body_bytes": float64(len(e.Body)), "level": "INFO",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
