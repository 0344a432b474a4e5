package backfill_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/backfill"
)

// stuckStripe answers every request with the same page and has_more true:
// an API that never advances (noticed by review helper-72). Backfill and
// reconcile followed its cursor forever, storing nothing new (reconcile's
// duplicates count growing).
func stuckStripe() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","has_more":true,"data":[` +
			`{"id":"evt_stuck_2","object":"event","type":"invoice.paid","created":` + nowUnix() + `},` +
			`{"id":"evt_stuck_1","object":"event","type":"invoice.paid","created":` + nowUnix() + `}]}`))
	})
}

func nowUnix() string { return strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10) }

func TestRepeatedCursorStopsBackfillAndReconcile(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(stuckStripe())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	b := setup(t)
	if _, err := backfill.Run(ctx, b.config("stripe", "stripe"), stripeLister(t, srv.URL)); !errors.Is(err, backfill.ErrCursorRepeated) {
		t.Fatalf("backfill against an API that never advances: %v, want ErrCursorRepeated", err)
	}

	r := setupReconcile(t)
	l, err := backfill.ReconcileSource{Source: "stripe", Type: "stripe", APIKey: "sk_test_reconcile", BaseURL: srv.URL}.
		Lister(time.Now().Add(-time.Hour), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backfill.Reconcile(ctx, backfill.ReconcileConfig{Source: "stripe", Scheme: "stripe", Store: r.store, DB: r.pool,
		Since: time.Now().Add(-time.Hour), Until: time.Now(), Metrics: r.metrics}, l); !errors.Is(err, backfill.ErrCursorRepeated) {
		t.Fatalf("reconcile against an API that never advances: %v, want ErrCursorRepeated", err)
	}
}
