package ingress_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// A write whose store timeout passes while its COMMIT waits for a
// synchronous standby is answered 503 outcome_unknown, never 200. The pools
// send PostgreSQL a cancel request when a statement's context ends (review
// helper-295), and PostgreSQL answers a cancelled wait for the standby by
// reporting the commit done (a WARNING: committed locally, maybe not
// replicated): a failover to the standby then loses an event ingress would
// have acknowledged. Here the standby never comes (synchronous_standby_names
// names none that exists), so every commit waits until it is cancelled; the
// event is then on the primary alone, and the provider's retry is answered
// from it, duplicate.
func TestCommitPastTheStoreTimeoutIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A cluster of its own: the standby setting is the whole cluster's.
	cluster, err := pgcluster.New(ctx, pgcluster.Config{Dir: filepath.Join(pgtest.TempDir(t), "pg"), Install: true,
		Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	url := cluster.URL("postgres")
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = 'inlet_standby_that_never_comes'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}

	for _, storeKind := range []string{"PGStore", "GroupStore"} {
		t.Run(storeKind, func(t *testing.T) {
			b := setupWith(t, url, func(c *ingress.Config) {
				c.Section.StoreTimeout = 2 * time.Second
				if storeKind == "GroupStore" {
					// The batch's own deadline passes first.
					c.Store = groupStoreOn(t, url, ingress.GroupConfig{Committers: 1, Timeout: time.Second})
				}
			})
			id := "evt_syncrep_" + strings.ToLower(storeKind)
			body := []byte(`{"id":"` + id + `","type":"t"}`)
			code, answer, h := do(t, stripeRequest(t, b.url, body, time.Now()))
			if code != 503 || !strings.Contains(answer, `"outcome_unknown"`) || h.Get("Retry-After") == "" {
				t.Fatalf("a commit still waiting for the synchronous standby at the store timeout: %d %s, "+
					"want 503 outcome_unknown with Retry-After (the event is committed on the primary alone)", code, answer)
			}
			if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = $1`, id); n != 1 {
				t.Fatalf("%d events %s on the primary, want the 1 its cancelled wait committed locally", n, id)
			}
		})
	}
}
