package audit

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// BenchmarkSeal50kEvents seals 50,000 events stored with their JSON copy
// (payload set, as a store_json source keeps them) in checkpoints of the
// default 10,000 leaves, as webhook_sealer: what one pass of a busy log
// costs. Each iteration has a fresh database; only Seal is timed. Run with
// -benchtime=5x (review helper-305: sealing whether payload is stored, not
// reading it, kept the pass as fast as before).
func BenchmarkSeal50kEvents(b *testing.B) {
	const n = 50000
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		url := pgtest.NewDatabase(b)
		owner, err := database.Open(ctx, url, database.Options{MaxConns: 2})
		if err != nil {
			b.Fatal(err)
		}
		sealDB, err := database.Open(ctx, url, database.Options{Role: "webhook_sealer", MaxConns: 2})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := owner.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, secret_index, request_uri, payload)
			SELECT 'stripe', 'stripe', 'evt_bench_'||g, 'invoice.paid', '{"Stripe-Signature":["t=1,v1=00"]}',
			       convert_to(j::text, 'UTF8'), true, 0, '/webhooks/stripe', j
			FROM generate_series(1, $1::int) g,
			     LATERAL (SELECT jsonb_build_object('id', 'evt_bench_'||g, 'data', jsonb_build_object('object', jsonb_build_object('customer', 'cus_'||(g % 97))))) AS p(j)`, n); err != nil {
			b.Fatal(err)
		}
		if _, err := owner.Exec(ctx, `VACUUM ANALYZE webhook_ingress.events`); err != nil {
			b.Fatal(err)
		}
		s, err := NewSealer(Config{DB: sealDB, Grace: time.Nanosecond})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		cps, err := s.Seal(ctx)
		b.StopTimer()
		if err != nil || len(cps) != n/10000 {
			b.Fatalf("sealed %d checkpoints, %v; want %d", len(cps), err, n/10000)
		}
		sealDB.Close()
		owner.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/event")
}
