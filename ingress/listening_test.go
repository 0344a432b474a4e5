package ingress_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testlog"
	"github.com/inlet-dev/inlet/schema"
)

// Helpers for the tests that talk to ingress over a real listener.

// listeningServer runs ingress as `inlet ingress` does: Server.Start on a real
// listener with the section's timeouts, not httptest around Handler.
type listeningServer struct {
	srv   *ingress.Server
	admin *pgxpool.Pool
	host  string
	logs  *testlog.Buffer
}

func startListening(t *testing.T, edit func(c *ingress.Config, dbURL string)) *listeningServer {
	t.Helper()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	pool, err := database.Open(ctx, dbURL, database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logs := &testlog.Buffer{}
	cfg := ingress.Config{
		Metrics: prometheus.NewRegistry(),
		Section: ingress.Section{Listen: "127.0.0.1:0", StoreTimeout: 5 * time.Second},
		Sources: []sources.Source{
			{Name: "stripe", Config: verify.Config{Type: "stripe", Secrets: []string{stripeSecret}}},
			{Name: "meta", Config: metaSource},
		},
		Store:  ingress.NewPGStore(pool, nil),
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	}
	if edit != nil {
		edit(&cfg, dbURL)
	}
	srv, err := ingress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return &listeningServer{srv: srv, admin: admin, host: srv.Addr().String(), logs: logs}
}

func stripeSig(body []byte) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeSecret, Timestamp: time.Now()}).Header
}

func (rs *listeningServer) storedBody(t *testing.T, id string) ([]byte, int) {
	t.Helper()
	var raw []byte
	var n int
	if err := rs.admin.QueryRow(context.Background(), `SELECT count(*), (array_agg(raw_body))[1] FROM webhook_ingress.events WHERE external_event_id = $1`, id).Scan(&n, &raw); err != nil {
		t.Fatal(err)
	}
	return raw, n
}
