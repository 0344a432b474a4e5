package consumers

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// One read statement may be handed two references to one job: a stale one
// (an earlier attempt, or an earlier lease of a replayed job) beside the
// current one. Only the current one is found, with its own Event; read by
// job id, all three were found and shared one Event, so a stale reference
// ran the handler, and both runs saw the last reference's attempt number.
func TestReadRefsFindsOnlyTheCurrentReferenceOfAJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := database.Open(ctx, url, database.Options{MaxConns: 2, AppName: "read-refs-admin"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	worker, err := database.Open(ctx, url, database.Options{Role: "webhook_worker", MaxConns: 2, AppName: "read-refs-worker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Close)

	if _, err := admin.Exec(ctx, schema.Query("UpsertSubscription"), "h", "stripe", "*", 5, nil, nil, "block"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"evt_read_1", "evt_read_2"} {
		if _, err := admin.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", id, "invoice.paid", []byte(`{}`),
			[]byte(`{"id":"`+id+`"}`), true, int16(0), "/webhooks/stripe", "", false, nil, 0); err != nil {
			t.Fatalf("insert %s: %v", id, err)
		}
	}
	var refs []bus.Ref
	err = pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE webhook_streamer"); err != nil {
			return err
		}
		rows, err := queries.New(tx).ClaimJobs(ctx, queries.ClaimJobsParams{FullHandlers: []string{}, BatchSize: 10, LeaseHolder: "test", LeaseFor: time.Minute})
		for _, j := range rows {
			refs = append(refs, bus.Ref{JobID: j.ID, EventID: j.EventID, Handler: j.Handler, Provider: j.Provider, EventType: j.EventType,
				Attempt: int(j.AttemptCount), LeaseExpiresAt: j.LeaseExpiresAt, EventReceivedAt: j.EventReceivedAt, LeasedAt: j.AttemptedAt})
		}
		return err
	})
	if err != nil || len(refs) != 2 {
		t.Fatalf("claimed %d jobs (%v), want 2", len(refs), err)
	}

	current, other := refs[0], refs[1]
	staleAttempt := current
	staleAttempt.Attempt += 6
	staleLease := current // the same attempt number, an earlier lease: a replay's
	staleLease.LeasedAt = current.LeasedAt.Add(-time.Minute)
	s := &Service{cfg: Config{Pool: worker}, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	read := []bus.Ref{staleAttempt, current, other, staleLease, current}
	got, errs := s.readRefs(ctx, read)
	for i, want := range []bool{false, true, true, false, true} {
		if errs[i] != nil {
			t.Fatalf("reference %d: %v", i, errs[i])
		}
		if got[i].found != want {
			t.Errorf("reference %d (job %d, attempt %d, leased %s): found %v, want %v", i, read[i].JobID, read[i].Attempt,
				read[i].LeasedAt.Format(time.RFC3339Nano), got[i].found, want)
		}
		if want && (got[i].ev == nil || got[i].ev.JobID != read[i].JobID || got[i].ev.Attempt != read[i].Attempt) {
			t.Errorf("reference %d: event %+v, want job %d attempt %d", i, got[i].ev, read[i].JobID, read[i].Attempt)
		}
	}
	if got[1].ev == got[4].ev {
		t.Error("two references read one shared Event")
	}
	if n := s.readStatements.Load(); n != 4 {
		t.Errorf("%d read statements, want 4 (four references to job %d)", n, current.JobID)
	}
}
