package schema_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
)

// TestUpgradeToOccurredAtAndPayload upgrades a log at 011 holding 12,000
// events (one partition over the 10,000 rows 012 indexes inline) while an
// ingress of the previous version keeps inserting: no insert fails, old rows
// read NULL, the large partition's payload index is left to BuildIndexes
// (CONCURRENTLY, still under ingest) which makes the parent index valid, and
// the backfill, interrupted once, resumes and fills every old row from its
// stored bytes.
func TestUpgradeToOccurredAtAndPayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := migratedTo(t, 11)
	const old = 12000
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_old_' || n, 'charge.succeeded',
		       convert_to(format('{"id":"evt_old_%s","created":%s,"data":{"object":{"n":%s}}}', n, 1700000000 + n, n), 'UTF8'), true
		FROM generate_series(1, $1) n`, old); err != nil {
		t.Fatal(err)
	}

	// The previous version's ingress, inserting all along.
	writer, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var written atomic.Int64
	var writeErr atomic.Pointer[error] // the writer's, read while it runs
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := writer.Exec(ctx, `INSERT INTO webhook_ingress.events
				(provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, secret_index, request_uri)
				VALUES ('stripe', 'stripe', $1, 'charge.succeeded', '{}', $2, true, 0, '/webhooks/stripe')`,
				fmt.Sprintf("evt_live_%d", i), []byte(fmt.Sprintf(`{"id":"evt_live_%d","created":1700000000}`, i))); err != nil {
				writeErr.Store(&err)
				return
			}
			written.Add(1)
		}
	}()
	waitFor := func(n int64) {
		t.Helper()
		testwait.Eventually(t, 10*time.Second, fmt.Sprintf("the old ingress writing on, to %d events", n), func() (bool, string) {
			got := written.Load()
			seen := fmt.Sprintf("%d written", got)
			if err := writeErr.Load(); err != nil {
				seen += fmt.Sprintf(", then: %v", *err)
			}
			return got >= n, seen
		})
	}
	waitFor(20)
	if _, err := schema.MigrateTo(ctx, conn, 12); err != nil {
		t.Fatalf("migrate to 012 under ingest: %v", err)
	}
	before := written.Load()
	waitFor(before + 20)

	pending, err := schema.PendingIndexes(ctx, conn)
	if err != nil || len(pending) != 1 || pending[0].Index != "idx_events_payload" {
		t.Fatalf("pending indexes %+v (%v), want idx_events_payload on the large partition", pending, err)
	}
	var nulls int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events WHERE occurred_at IS NULL AND payload IS NULL`).Scan(&nulls); err != nil || nulls < old {
		t.Fatalf("old rows NULL after the migration: %d (%v)", nulls, err)
	}
	var reported []schema.IndexBuild
	if _, err := schema.BuildIndexes(ctx, conn, func(b schema.IndexBuild) { reported = append(reported, b) }, nil); err != nil {
		t.Fatalf("build indexes under ingest: %v", err)
	}
	waitFor(written.Load() + 20)
	var valid bool
	if err := conn.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'webhook_ingress.idx_events_payload'::regclass`).Scan(&valid); err != nil || !valid || len(reported) != 1 {
		t.Fatalf("payload index valid %v after building %+v (%v)", valid, reported, err)
	}
	if p, err := schema.PendingIndexes(ctx, conn); err != nil || len(p) != 0 {
		t.Fatalf("still pending: %+v %v", p, err)
	}

	// The backfill, stopped after its first batch, then resumed.
	cctx, cancel := context.WithCancel(ctx)
	st, err := backfill.FillStored(cctx, conn, backfill.StoredConfig{BatchSize: 5000, Progress: func(backfill.StoredStats) { cancel() }})
	if !errors.Is(err, context.Canceled) || st.LastID == 0 {
		t.Fatalf("interrupted backfill: %+v %v", st, err)
	}
	// The cancelled connection is gone; a new one resumes.
	conn2, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close(ctx)
	resumed, err := backfill.FillStored(ctx, conn2, backfill.StoredConfig{BatchSize: 5000})
	if err != nil {
		t.Fatalf("resumed backfill: %v", err)
	}
	if resumed.Read >= int64(old) || resumed.UntilID != st.UntilID {
		t.Errorf("resumed run read %d of %d events up to %d (first run: up to %d): it did not resume", resumed.Read, old, resumed.UntilID, st.UntilID)
	}
	close(stop)
	wg.Wait()
	if err := writeErr.Load(); err != nil {
		t.Fatalf("the old ingress failed during the upgrade: %v", *err)
	}
	var unfilled, wrong int
	if err := conn2.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE occurred_at IS NULL OR payload IS NULL),
		count(*) FILTER (WHERE occurred_at <> to_timestamp((payload->>'created')::bigint) OR payload <> convert_from(raw_body, 'UTF8')::jsonb)
		FROM webhook_ingress.events WHERE id <= $1`, resumed.UntilID).Scan(&unfilled, &wrong); err != nil || unfilled != 0 || wrong != 0 {
		t.Fatalf("after the backfill: %d rows unfilled, %d wrong (%v)", unfilled, wrong, err)
	}
	var hits int
	if err := conn2.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events WHERE payload @@ '$.data.object.n == 77'`).Scan(&hits); err != nil || hits != 1 {
		t.Fatalf("--where over backfilled rows: %d (%v)", hits, err)
	}
	if _, err := schema.Migrate(ctx, conn2); err != nil {
		t.Fatalf("later migrations after 012: %v", err)
	}
	t.Logf("%d webhooks written by the old ingress during the upgrade", written.Load())
}
