package ingress_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestSurvivor324_ProgramLimitOfTheCopyDropsOnlyTheCopy keeps the guarantee
// that a JSON copy PostgreSQL refuses with a class 54 error (program limit
// exceeded: a jsonb too large or too deep for the server) costs only the
// copy: the webhook is stored with payload NULL and answered 200, and a
// class 54 refusal of the row itself is permanent (400 event_unstorable),
// as refusedData and permanentSQLState say (classes 22 and 54).
// Mutant (mutation run 324): ingress/fault.go:112 permanentSQLState with
// `|| code[:2] == "54"` removed. Every existing test passed: the only data
// refusal a test provokes is TestRefusedWritesAreNotStored's trigger raising
// 22023, and JSONCopyable's bounds keep real bodies far from jsonb's class
// 54 limits, so class 54 was never met.
// Setup: a trigger raises SQLSTATE 54000 for an event of type
// "limit_copy" whose payload is set (the copy is what the server cannot
// take), and for any event of type "limit_row"; both stores.
func TestSurvivor324_ProgramLimitOfTheCopyDropsOnlyTheCopy(t *testing.T) {
	t.Parallel()
	for _, storeKind := range []string{"PGStore", "GroupStore"} {
		t.Run(storeKind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := pgtest.NewDatabase(t)
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{
				`CREATE FUNCTION webhook_ingress.test_limit() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					IF (NEW.event_type = 'limit_copy' AND NEW.payload IS NOT NULL) OR NEW.event_type = 'limit_row' THEN
						RAISE EXCEPTION 'test: program limit exceeded' USING ERRCODE = '54000';
					END IF;
					RETURN NEW;
				END $$`,
				`CREATE TRIGGER test_limit BEFORE INSERT ON webhook_ingress.events FOR EACH ROW EXECUTE FUNCTION webhook_ingress.test_limit()`,
			} {
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			conn.Close(ctx)
			b := setupWith(t, url, func(c *ingress.Config) {
				if storeKind == "GroupStore" {
					c.Store = groupStoreOn(t, url, ingress.GroupConfig{})
				}
			})

			body := []byte(`{"id":"evt_limit_copy","type":"limit_copy","data":{"n":1}}`)
			code, answer, _ := do(t, stripeRequest(t, b.url, body, time.Now()))
			if code != 200 || !strings.Contains(answer, "stored") {
				t.Fatalf("a webhook whose JSON copy the server refuses with 54000: %d %s, want 200 stored (without the copy)", code, strings.TrimSpace(answer))
			}
			var payload *string
			var raw []byte
			if err := b.admin.QueryRow(ctx, `SELECT payload::text, raw_body FROM webhook_ingress.events WHERE external_event_id = 'evt_limit_copy'`).Scan(&payload, &raw); err != nil {
				t.Fatal(err)
			}
			if payload != nil || string(raw) != string(body) {
				t.Fatalf("stored payload %v, raw_body %q; want payload NULL and the bytes sent", payload, raw)
			}

			code, answer, _ = do(t, stripeRequest(t, b.url, []byte(`{"id":"evt_limit_row","type":"limit_row"}`), time.Now()))
			if code != 400 || !strings.Contains(answer, `"event_unstorable"`) {
				t.Fatalf("an event the server refuses with 54000 with or without its copy: %d %s, want 400 event_unstorable", code, strings.TrimSpace(answer))
			}
			if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events`); n != 1 {
				t.Fatalf("%d events, want 1", n)
			}
		})
	}
}
