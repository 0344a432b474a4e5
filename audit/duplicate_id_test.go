package audit

import (
	"context"
	"testing"
)

// forgeDuplicate inserts, as the owner and without touching any trigger, a
// forged event that reuses the sealed id of an existing event (the primary key
// is (id, received_at), so only received_at must differ): an event inserted
// out of order into a sealed range, with content of the owner's choosing.
func (b *bundle) forgeDuplicate(t *testing.T, id int64, shift string) {
	t.Helper()
	b.owns(t, `INSERT INTO webhook_ingress.events
		(id, provider, scheme, external_event_id, event_type, received_at, headers, raw_body, signature_verified, secret_index, request_uri)
		OVERRIDING SYSTEM VALUE
		SELECT id, provider, scheme, 'evt_forged_'||id, 'charge.refunded', received_at + interval '`+shift+`', headers,
		       convert_to('{"id":"evt_forged","amount":-1000000}', 'UTF8'), true, secret_index, request_uri
		FROM webhook_ingress.events WHERE id = `+itoa(id))
}

func itoa(i int64) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{digits[i%10]}, b...)
	}
	return string(b)
}

// A forged event reusing the newest sealed id is an event inserted out of
// order into the sealed range (the seal has one leaf per id and that leaf is
// the original's); verify must report it. It did not (a review proved it):
// the unsealed tail counted it as unsealed and checked only its body.
func TestVerifyReportsASecondRowWithTheLastSealedID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 10})
	for range 5 {
		b.insert(t, ctx)
	}
	if cps := b.seal(t); len(cps) != 1 || cps[0].LastEventID != 5 {
		t.Fatalf("sealed %+v, want one checkpoint through 5", cps)
	}
	if rep := b.verify(t, VerifyOptions{}); !rep.OK {
		t.Fatalf("before tampering: %+v", rep.Problem)
	}
	b.forgeDuplicate(t, 5, "1 microsecond")
	var n int
	if err := b.audit.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events WHERE id = 5`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows with id 5: %d, %v", n, err)
	}
	rep := b.verify(t, VerifyOptions{})
	if rep.OK {
		t.Fatalf("verify after the owner inserted a forged event with the sealed id 5 (sealed through %d): OK (events %d, unsealed %d), want out_of_order_event",
			rep.SealedThrough, rep.Events, rep.Unsealed)
	}
	if rep.Problem == nil || rep.Problem.Kind != OutOfOrderEvent {
		t.Fatalf("problem %+v, want out_of_order_event", rep.Problem)
	}
}

// The same forged duplicate, of an id in the middle of the sealed log that
// happens to be the last row of one of verify's 5000-row pages: the next
// page started after that id (WHERE id > after), so the duplicate was never
// read at all. Pages now follow the whole key (id, received_at).
func TestVerifyReportsASecondRowWithASealedIDAtAPageBoundary(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{MaxLeaves: 10000})
	b.owns(t, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, secret_index, request_uri)
		SELECT 'stripe', 'stripe', 'evt_bulk_'||g, 'invoice.paid', '{}', convert_to('{"id":"evt_bulk_'||g||'"}', 'UTF8'), true, 0, '/webhooks/stripe'
		FROM generate_series(1, 30000) g`)
	cps := b.seal(t)
	if len(cps) != 3 || cps[2].LastEventID != 30000 {
		t.Fatalf("sealed %d checkpoints, want 3 through 30000", len(cps))
	}
	if rep := b.verify(t, VerifyOptions{}); !rep.OK {
		t.Fatalf("before tampering: %+v", rep.Problem)
	}
	// Sorted after the original on the primary key (id, received_at); the
	// statistics a live database has (autovacuum) make verify's page query an
	// ordered scan of that key, as on any log of size.
	b.forgeDuplicate(t, verifyPage, "1 microsecond")
	b.owns(t, `ANALYZE webhook_ingress.events`)
	rep := b.verify(t, VerifyOptions{})
	if rep.OK {
		t.Fatalf("verify after the owner inserted a forged event with the sealed id %d in the middle of the log: OK (events %d, unsealed %d), want out_of_order_event",
			verifyPage, rep.Events, rep.Unsealed)
	}
	if rep.Problem == nil || rep.Problem.Kind != OutOfOrderEvent {
		t.Fatalf("problem %+v, want out_of_order_event", rep.Problem)
	}
}
