package tests

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
)

// Exactly-once effects: a consumer whose transactional handler has written
// its effects (uncommitted) for every job is SIGKILLed before the commit.
// Nothing of it is visible; after its leases expire a second consumer runs
// the jobs again and the effect table ends with exactly one row per event,
// each the second attempt's.
func TestTxHandlerKilledBeforeCommitWritesOnce(t *testing.T) {
	t.Parallel()
	const events = 3
	nats := natstest.Start(t)
	dbURL := pgtest.NewDatabase(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `
CREATE TABLE public.ledger (event_id bigint NOT NULL, job_id bigint NOT NULL, attempt int NOT NULL);
GRANT SELECT, INSERT ON public.ledger TO webhook_worker`); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", fmt.Sprintf(`
database_url: ${DATABASE_URL}
bus: {kind: nats, url: %q}
streamer: {health_listen: "127.0.0.1:0", poll_interval: 200ms, lease_duration: 3s, reap_interval: 200ms}
`, nats.URL()))
	env := cleanEnv("DATABASE_URL=" + dbURL)

	// Every held transaction keeps a connection, and the SDK keeps two of
	// the pool for its own statements: a pool of events+2 at least, sized
	// as a user sizes it, in the URL.
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(events+2))
	u.RawQuery = q.Encode()
	txURL := u.String()
	first := startBin(t, txconsumerBin, cleanEnv(), "--database-url", txURL, "--nats-url", nats.URL(), "--hold")
	first.waitOutput("txconsumer ready", 30*time.Second)
	st := start(t, env, "streamer", "--config", cfg)
	st.waitLog("streamer started", 30*time.Second)
	for i := range events {
		if _, err := admin.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", fmt.Sprintf("evt_once_%d", i), "invoice.paid",
			[]byte(`{}`), []byte(`{"id":"evt"}`), true, int16(0), "/webhooks/stripe", "", false, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, 30*time.Second, "the held handler to write every job", func() (bool, string) {
		n := strings.Count(first.out(), "wrote job ")
		return n == events, fmt.Sprintf("%d written", n)
	})
	var visible int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM public.ledger`).Scan(&visible); err != nil || visible != 0 {
		t.Fatalf("%d ledger rows visible before the commit (%v), want 0", visible, err)
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done

	startBin(t, txconsumerBin, cleanEnv(), "--database-url", txURL, "--nats-url", nats.URL()).waitOutput("txconsumer ready", 30*time.Second)
	testwait.Eventually(t, 60*time.Second, "every job completed after the kill", func() (bool, string) {
		var done int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'ledger' AND status = 'completed'`).Scan(&done); err != nil {
			t.Fatal(err)
		}
		return done == events, fmt.Sprintf("%d completed", done)
	})
	rows, _ := admin.Query(ctx, `
SELECT j.id, count(l.*), coalesce(min(l.attempt), 0), j.attempt_count
FROM webhook_ingress.jobs j LEFT JOIN public.ledger l ON l.job_id = j.id
WHERE j.handler = 'ledger' GROUP BY j.id, j.attempt_count ORDER BY j.id`)
	type job struct{ id, rows, attempt, attempts int64 }
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (job, error) {
		var j job
		return j, r.Scan(&j.id, &j.rows, &j.attempt, &j.attempts)
	})
	if err != nil || len(got) != events {
		t.Fatalf("jobs %+v (%v)", got, err)
	}
	for _, j := range got {
		// The killed attempt counts (its consumer was alive), so the
		// committed run is attempt 2.
		if j.rows != 1 || j.attempt != j.attempts || j.attempt < 2 {
			t.Errorf("job %d: %d ledger rows (attempt %d) after %d attempts, want exactly 1, written by the last attempt after the killed one", j.id, j.rows, j.attempt, j.attempts)
		}
	}
}
