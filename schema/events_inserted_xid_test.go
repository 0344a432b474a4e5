package schema_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
)

// Migration 070 (events.inserted_xid, review helper-216) on a log that
// already holds rows: rows stored before it keep NULL (nothing rewritten);
// every row inserted since through events, into a partition that existed
// before the migration, one created after it and the default partition,
// by the owner or the ingress role, records its inserting (top-level)
// transaction; the migration runs twice safely; the ingress role cannot
// choose the value; and the one UPDATE events allows (inlet backfill
// stored) keeps it, while changing it is refused.
func TestEventsInsertedXid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := migratedTo(t, 69)
	execAll(t, conn,
		`SELECT count(*) FROM webhook_ingress.create_partitions('week', 0)`, // this week's: exists before 070
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 VALUES ('stripe', 'stripe', 'evt_before', '{"id":"evt_before","created":1700000000}', true)`,
	)

	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m schema.Migration) bool { return m.Version == 70 })
	if i < 0 {
		t.Fatal("no migration 070")
	}
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatalf("migrate from 069: %v", err)
	}
	// A rewound schema_migrations (or a re-run by hand) runs it again.
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, ms[i].SQL)
		return err
	}); err != nil {
		t.Fatalf("%03d_%s run a second time: %v", ms[i].Version, ms[i].Name, err)
	}
	// A period past every partition there is: created after 070.
	var ahead *time.Time
	if err := conn.QueryRow(ctx, `SELECT max(period_start) FROM webhook_ingress.create_partitions('week', 30)`).Scan(&ahead); err != nil || ahead == nil {
		t.Fatalf("create a partition after 070: %v, %v", ahead, err)
	}

	// One transaction inserts into this week's partition, the one ahead
	// (created after 070) and the default partition (a day none covers),
	// under a SAVEPOINT too: each row records the top-level transaction.
	var xid uint64
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::numeric::bigint`).Scan(&xid); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
			VALUES ('stripe', 'stripe', 'evt_today', '{}', true, now()),
			       ('stripe', 'stripe', 'evt_ahead', '{}', true, $1),
			       ('stripe', 'stripe', 'evt_default', '{}', true, '2001-01-01')`, *ahead); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SAVEPOINT s`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
			VALUES ('stripe', 'stripe', 'evt_savepoint', '{}', true)`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// As ingress stores: the role inserts its columns, the default fills
	// inserted_xid; naming the column is refused.
	var ingressXid uint64
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE webhook_ingress_writer`); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::numeric::bigint`).Scan(&ingressXid); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
			VALUES ('stripe', 'stripe', 'evt_ingress', '{}', true)`)
		return err
	})
	if err != nil {
		t.Fatalf("insert as webhook_ingress_writer: %v", err)
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE webhook_ingress_writer`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, inserted_xid)
			VALUES ('stripe', 'stripe', 'evt_forged', '{}', true, '1')`)
		return err
	})
	if !isPermissionDenied(err) {
		t.Errorf("webhook_ingress_writer choosing inserted_xid: want permission denied, got %v", err)
	}

	want := map[string]struct {
		xid  *uint64
		part string
	}{
		"evt_before":    {nil, ""},
		"evt_today":     {&xid, ""},
		"evt_ahead":     {&xid, ""},
		"evt_default":   {&xid, "events_default"},
		"evt_savepoint": {&xid, ""},
		"evt_ingress":   {&ingressXid, ""},
	}
	check := func(when string) {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT external_event_id, inserted_xid::text::numeric::bigint, tableoid::regclass::text
			FROM webhook_ingress.events`)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		parts := map[string]string{}
		for rows.Next() {
			var id, part string
			var x *uint64
			if err := rows.Scan(&id, &x, &part); err != nil {
				t.Fatal(err)
			}
			got[id] = true
			parts[id] = part
			w, ok := want[id]
			switch {
			case !ok:
				t.Errorf("%s: unexpected row %s", when, id)
			case (w.xid == nil) != (x == nil) || w.xid != nil && *w.xid != *x:
				t.Errorf("%s: %s inserted_xid %v, want %v (its inserting transaction; NULL before 070)", when, id, deref(x), deref(w.xid))
			case w.part != "" && part != "webhook_ingress."+w.part:
				t.Errorf("%s: %s is in %s, want %s", when, id, part, w.part)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("%s: rows %v, want %d", when, got, len(want))
		}
		if distinct := slices.Compact(slices.Sorted(maps.Values(parts))); len(distinct) < 3 {
			t.Errorf("%s: the rows are in %v: want three partitions (one before 070, one after, the default)", when, parts)
		}
	}
	check("inserted")

	// inlet backfill stored's UPDATE (the one events_guard allows) keeps
	// inserted_xid; changing it is refused, to the owner's backfill too.
	backfill := func(sql string) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL webhook_ingress.backfill = 'derived'`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sql)
			return err
		})
	}
	if err := backfill(`UPDATE webhook_ingress.events SET occurred_at = to_timestamp(1700000000),
		payload = convert_from(raw_body, 'UTF8')::jsonb`); err != nil {
		t.Fatalf("the backfill's update: %v", err)
	}
	check("after the backfill")
	if err := backfill(`UPDATE webhook_ingress.events SET inserted_xid = '1' WHERE external_event_id = 'evt_today'`); !isPermissionDenied(err) {
		t.Errorf("the backfill changing inserted_xid: want permission denied, got %v", err)
	}
	if err := backfill(`UPDATE webhook_ingress.events SET inserted_xid = pg_current_xact_id() WHERE external_event_id = 'evt_before'`); !isPermissionDenied(err) {
		t.Errorf("the backfill filling a NULL inserted_xid: want permission denied, got %v", err)
	}
}

func deref(p *uint64) any {
	if p == nil {
		return "NULL"
	}
	return *p
}
