package schema_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
)

// 081_event_types_reported_at (review helper-334) runs a second time (a
// rewound schema_migrations, a re-run by hand after a crash between
// applying and recording), and leaves the rows it finds unreported since
// (reported_at NULL: the streamer names their next unrouted alert by
// alerted_at).
func TestMigration081RunsTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := migratedTo(t, 81)
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var m *schema.Migration
	for i := range ms {
		if ms[i].Version == 81 {
			m = &ms[i]
		}
	}
	if m == nil || m.Name != "event_types_reported_at" {
		t.Fatalf("migration 81: %+v, want 081_event_types_reported_at", m)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.event_types (provider, event_type, first_seen, last_seen, alerted_at, alerted_routed)
		VALUES ('stripe', 'charge.succeeded', now(), now(), now(), true)`); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, m.SQL)
		return err
	}); err != nil {
		t.Fatalf("%03d_%s run a second time: %v", m.Version, m.Name, err)
	}
	var unset bool
	if err := conn.QueryRow(ctx, `SELECT reported_at IS NULL FROM webhook_ingress.event_types
		WHERE provider = 'stripe' AND event_type = 'charge.succeeded'`).Scan(&unset); err != nil {
		t.Fatal(err)
	}
	if !unset {
		t.Errorf("081 run again set reported_at of a row it found; want it left NULL")
	}
}
