package ingress_test

import (
	"context"
	"slices"
	"testing"
	"time"
)

// A filter removed from a subscription (filtered → unfiltered routing) and
// committed between the two pipelined statements of one ingress transaction
// (the InsertEvent(s) whose events_fan_out trigger checked the version and
// skipped the then-filtered subscription, and the FanOutFiltered that
// follows it) leaves the event with no job of that handler, although the
// old rule (filter passed) and the new rule (no filter) both give it one,
// unless the second statement checks the version too: it reads the
// subscriptions with a later snapshot. (Found by a review of 040's first
// form, which checked only in the trigger.)
//
// The interleaving is made deterministic by an extra AFTER INSERT statement
// trigger on events (named to fire after events_fan_out) that waits for an
// advisory lock the test holds.
func TestFilterRemovedBetweenInsertAndFanOutKeepsTheJob(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"single", "group"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store, admin := filterStore(t, kind)
			exec := func(sql string) {
				t.Helper()
				if _, err := admin.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			exec(`CREATE FUNCTION webhook_ingress.test_pause() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS
				$$ BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NULL; END $$`)
			exec(`CREATE TRIGGER zz_test_pause AFTER INSERT ON webhook_ingress.events
				FOR EACH STATEMENT EXECUTE FUNCTION webhook_ingress.test_pause()`)
			exec(`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, filter)
				VALUES ('billing', 'stripe', 'charge.*', 'payload.data.object.amount > 10000')`)
			// Ingress reads its copy (with the filter) at the current version.
			if _, err := store.Insert(ctx, charge("evt_warm", 25000)); err != nil {
				t.Fatal(err)
			}

			lock, err := admin.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Release()
			if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
				t.Fatal(err)
			}
			type result struct {
				stored bool
				err    error
			}
			done := make(chan result, 1)
			go func() {
				s, err := store.Insert(ctx, charge("evt_race", 25000))
				done <- result{s, err}
			}()
			// Wait until the ingress transaction is past events_fan_out and
			// waits in the pause trigger, before its FanOutFiltered.
			deadline := time.Now().Add(10 * time.Second)
			for {
				var waiting bool
				if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
					WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted)`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the insert never reached the pause trigger")
				}
				time.Sleep(10 * time.Millisecond)
			}
			// The filter is removed and committed meanwhile.
			exec(`UPDATE webhook_ingress.subscriptions SET filter = NULL WHERE handler = 'billing'`)
			if _, err := lock.Exec(ctx, `SELECT pg_advisory_unlock(4242)`); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || !r.stored {
				t.Fatalf("Insert(evt_race) = %v, %v; want stored", r.stored, r.err)
			}
			got := jobsOf(t, admin, "billing")
			if want := []string{"evt_race", "evt_warm"}; !slices.Equal(got, want) {
				t.Errorf("billing's jobs are for %v, want %v: evt_race passed the old filter and the new rule has none, "+
					"answered stored with no job of billing", got, want)
			}
		})
	}
}
