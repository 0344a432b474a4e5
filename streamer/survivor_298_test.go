package streamer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/inlet-dev/inlet/schema/queries"
)

// TestSurvivor298_LimitedWakeSkipsJobsNoLiveConsumerCanReceive (mutation
// run, helper-298).
// Guarantee: LimitedWakeIn (schema/queries/limits.sql, 076) arms a limited
// handler's wake-up only for due jobs a live consumer could receive
// (job_receivable), or any due job when no consumer of the handler is known
// at all: claim_limited_jobs leases no other, so a wake-up for them is a
// locking claim round for nothing, every limitedWake (50 ms) while the
// handler's in-flight limit is full, for as long as a scoped role of a
// shared handler is down.
// Mutant: schema/queries/limits.sql:97 (at 2be9df6) (and limits.sql.go) replaces
// job_receivable(j.handler, j.provider, j.event_type, '-infinity', now())
// by true: any due job arms the wake-up, as before 076.
// Why missed: the end-to-end tests of 076 (tests/shared_limited_roles_test.go)
// look at which jobs are leased and run, which the wake-up's timing does
// not change; nothing read LimitedWakeIn with only an absent role's jobs
// due. Here it is read directly, as the streamer reads it, with the
// handler's single in-flight slot taken (which answers 0, look again soon,
// when a due job could be leased).
func TestSurvivor298_LimitedWakeSkipsJobsNoLiveConsumerCanReceive(t *testing.T) {
	t.Parallel()
	b := setupRetire(t)
	ctx := context.Background()
	newRole := func(scope string, handlers ...string) string {
		role := fmt.Sprintf("webhook_consumer_s298_%08x", rand.N(1<<32))
		if _, err := queries.New(b.admin).CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role,
			Handlers: handlers, ScopeProviders: []string{scope}, ScopeTypes: []string{"*"}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = b.admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
		return role
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := b.admin.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('shared'), ('unknown')`)
	stripeRole, githubRole := newRole("stripe", "shared"), newRole("github", "shared")
	// The stripe role's only consumer stopped; the github role's is alive.
	exec(`INSERT INTO webhook_ingress.consumers (handler, worker_id, seen_at, alive_until, db_role)
		VALUES ('shared', 'stripe-1', now(), now() - interval '1 minute', $1),
		       ('shared', 'github-1', now(), now() + interval '1 minute', $2)`, stripeRole, githubRole)
	exec(`INSERT INTO webhook_ingress.handler_limits (handler, max_in_flight) VALUES ('shared', 1), ('unknown', 1)`)
	exec(`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('github', 'github', 'evt_s298_gh', 'push', 'x', true), ('stripe', 'stripe', 'evt_s298_st', 'invoice.paid', 'x', true)`)
	// The in-flight slot of each handler is taken by its github job.
	exec(`UPDATE webhook_ingress.jobs SET status = 'leased', attempt_count = 1, attempted_at = now(), lease_holder_id = 's298',
		lease_expires_at = now() + interval '1 hour', updated_at = now() WHERE provider = 'github'`)

	wakeIn := func(h string) *float64 {
		t.Helper()
		var w *float64
		if err := b.pool.QueryRow(ctx, queries.LimitedWakeIn, h).Scan(&w); err != nil { // as webhook_streamer
			t.Fatal(err)
		}
		return w
	}
	show := func(w *float64) string {
		if w == nil {
			return "NULL"
		}
		return fmt.Sprint(*w)
	}
	// Only the stopped stripe role's job is due: nothing to wake for.
	if w := wakeIn("shared"); w != nil {
		t.Errorf("LimitedWakeIn(shared) = %s with the in-flight slot taken and only a job of a role with no live consumer due; "+
			"want NULL: claim_limited_jobs leases no such job, so a wake-up is a claim round for nothing", show(w))
	}
	// No consumer of the handler known at all: its due job is leased as
	// before 076, so the full slot is looked at again soon.
	if w := wakeIn("unknown"); w == nil || *w != 0 {
		t.Errorf("LimitedWakeIn(unknown) = %s for a handler no consumer of which is known, in-flight slot taken, a job due; want 0", show(w))
	}
	// The stripe role back: its job could be leased once the slot frees.
	exec(`UPDATE webhook_ingress.consumers SET alive_until = now() + interval '1 minute' WHERE worker_id = 'stripe-1'`)
	if w := wakeIn("shared"); w == nil || *w != 0 {
		t.Errorf("LimitedWakeIn(shared) = %s with the stripe role's consumer alive again and the slot taken; want 0", show(w))
	}
}

// TestSurvivor298_RetiredSlotDropSparesAnotherDatabasesSlot (mutation run,
// helper-298).
// Guarantee: the statement that drops the slot a former wake: replication
// left (dropRetiredSlotSQL) drops only a pgoutput slot of this database
// that nothing reads: a slot of the same name that another database's
// streamer (or anything else) made there since retireSlotStep looked it up
// is left alone (slots are cluster-wide, names are chosen per streamer).
// Mutant: streamer/replication.go:549 (at 2be9df6), dropRetiredSlotSQL without
// "AND s.database = pg_catalog.current_database()".
// Why missed: retireSlotStep checks the database of the slot it looked up
// first (here), so TestRetireSlotLeavesSlotsThatAreNotInlets never reaches
// the drop for another database's slot; the statement's own guard, which
// holds when the slot changes between the look-up and the drop, was never
// run against such a slot. Here dropRetiredSlot runs on its own.
func TestSurvivor298_RetiredSlotDropSparesAnotherDatabasesSlot(t *testing.T) {
	t.Parallel()
	b := setupRetire(t)
	other := setupRetire(t)
	slot := slotName("s298_other_db")
	createSlot(t, other.admin, slot, "pgoutput")
	dropped, err := dropRetiredSlot(context.Background(), b.pool, slot)
	if dropped || !b.slotPresent(t, slot) {
		t.Fatalf("dropRetiredSlot on this database dropped %v (err %v) another database's pgoutput slot %s; want it left alone", dropped, err, slot)
	}
	if err != nil {
		t.Errorf("dropRetiredSlot of another database's slot: %v; want nothing dropped and no error", err)
	}
}
