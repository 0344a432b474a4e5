package ingress_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
)

// lockKeys holds an exclusive lock on event_keys, which every insert of an
// event takes through the dedupe trigger: Postgres answers none of them
// until release, like a frozen server. It returns once the lock is held.
func lockKeys(t *testing.T, admin *pgxpool.Pool) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE webhook_ingress.event_keys IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			_ = tx.Rollback(ctx)
		}
	}
	t.Cleanup(release)
	return release
}

// waitLockWaiters waits until n backends wait on a lock (the inserts that
// reached the database).
func waitLockWaiters(t *testing.T, admin *pgxpool.Pool, n int) {
	t.Helper()
	testwait.Eventually(t, 10*time.Second, fmt.Sprintf("%d backends waiting on a lock", n), func() (bool, string) {
		got := count(t, admin, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)
		return got == n, fmt.Sprintf("%d waiting", got)
	})
}

// groupStoreOn is a GroupStore over its own pool as the ingress role.
func groupStoreOn(t *testing.T, url string, cfg ingress.GroupConfig) *ingress.GroupStore {
	t.Helper()
	pool, err := database.Open(context.Background(), url, database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	g := ingress.NewGroupStore(pool, nil, cfg)
	t.Cleanup(g.Close)
	return g
}

func sendAsync(t *testing.T, req *http.Request) chan [2]string {
	ch := make(chan [2]string, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- [2]string{"transport", err.Error()}
			return
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = fmt.Fprint(&b, resp.StatusCode, " ")
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		ch <- [2]string{fmt.Sprint(resp.StatusCode), b.String() + " Retry-After=" + resp.Header.Get("Retry-After")}
	}()
	return ch
}

// The store timeout fires while Postgres does not answer (here: a lock every
// insert waits on, as when the server is frozen). The write was sent, so it
// may still commit: the answer is 503 outcome_unknown, the log says so (not
// "not stored"), and once Postgres moves on the event is indeed in the table;
// the provider's retry is answered duplicate, one row in all. With the group
// store, a second request queued behind that batch, never written, is known
// not stored (503 database_unavailable) and is not in the table afterwards.
func TestStoreTimeoutIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	for _, storeKind := range []string{"PGStore", "GroupStore"} {
		t.Run(storeKind, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDatabase(t)
			b := setupWith(t, url, func(c *ingress.Config) {
				// Long enough for the wait below to see the insert blocked
				// on a loaded machine (the first request also reads the
				// filtered subscriptions inside this budget).
				c.Section.StoreTimeout = 3 * time.Second
				if storeKind == "GroupStore" {
					// One committer: a second event waits behind the stuck batch.
					c.Store = groupStoreOn(t, url, ingress.GroupConfig{Committers: 1, Timeout: 30 * time.Second})
				}
			})
			release := lockKeys(t, b.admin)
			bodyA := []byte(`{"id":"evt_unknown","type":"t"}`)
			a := sendAsync(t, stripeRequest(t, b.url, bodyA, time.Now()))
			waitLockWaiters(t, b.admin, 1)
			var queued chan [2]string
			if storeKind == "GroupStore" {
				queued = sendAsync(t, stripeRequest(t, b.url, []byte(`{"id":"evt_queued","type":"t"}`), time.Now()))
			}
			if r := <-a; r[0] != "503" || !strings.Contains(r[1], `"outcome_unknown"`) || !strings.Contains(r[1], "Retry-After=5") {
				t.Fatalf("store timeout while the insert waits: %s, want 503 outcome_unknown with Retry-After", r[1])
			}
			if queued != nil {
				if r := <-queued; r[0] != "503" || !strings.Contains(r[1], `"database_unavailable"`) {
					t.Fatalf("an event queued behind the stuck batch: %s, want 503 database_unavailable", r[1])
				}
			}
			logs := b.logs.String()
			if !strings.Contains(logs, `"msg":"webhook outcome unknown; the provider's retry will be deduplicated"`) {
				t.Fatalf("no outcome-unknown line:\n%s", logs)
			}
			if n := strings.Count(logs, `"msg":"webhook not stored"`); n != map[bool]int{true: 1, false: 0}[queued != nil] {
				t.Fatalf("%d not-stored lines:\n%s", n, logs)
			}

			release()
			var want string
			if storeKind == "GroupStore" {
				// The batch outlives the request's timeout: once Postgres
				// moves on, the event answered 503 commits.
				want = "duplicate"
				testwait.Eventually(t, 10*time.Second, "the batch answered outcome_unknown committed once the lock was released", func() (bool, string) {
					n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = 'evt_unknown'`)
					return n == 1, fmt.Sprintf("%d events evt_unknown", n)
				})
			} else {
				// pgx gives up on the connection with a cancel request, which
				// a live server usually honours before the lock is released (a
				// frozen one cannot): the write may have rolled back or
				// committed, and the answer claimed neither.
				want = ""
			}
			code, answer, _ := do(t, stripeRequest(t, b.url, bodyA, time.Now()))
			if code != 200 || !strings.Contains(answer, want) {
				t.Fatalf("the provider's retry: %d %s, want 200 %s", code, answer, want)
			}
			t.Logf("the provider's retry: %s", strings.TrimSpace(answer))
			if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events`); n != 1 {
				t.Fatalf("%d events, want only evt_unknown (the queued one was never written)", n)
			}
		})
	}
}

// A write the server refused is known rolled back: with lock_timeout set,
// the insert fails (55P03) instead of hanging, and the answer is 503
// database_unavailable with "webhook not stored"; nothing is in the table,
// and the retry stores it. A refusal caused by the event's own data (a
// trigger raising SQLSTATE 22023, as PostgreSQL does for data it cannot
// take) is permanent: 400 event_unstorable, for both stores.
func TestRefusedWritesAreNotStored(t *testing.T) {
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
				`ALTER DATABASE ` + pgx.Identifier{conn.Config().Database}.Sanitize() + ` SET lock_timeout = '300ms'`,
				`CREATE FUNCTION webhook_ingress.test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					IF NEW.event_type = 'poison' THEN
						RAISE EXCEPTION 'test: the event''s data is refused' USING ERRCODE = '22023';
					END IF;
					RETURN NEW;
				END $$`,
				`CREATE TRIGGER test_poison BEFORE INSERT ON webhook_ingress.events FOR EACH ROW EXECUTE FUNCTION webhook_ingress.test_poison()`,
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

			release := lockKeys(t, b.admin)
			body := []byte(`{"id":"evt_refused","type":"t"}`)
			code, answer, hdr := do(t, stripeRequest(t, b.url, body, time.Now()))
			if code != 503 || !strings.Contains(answer, `"database_unavailable"`) || hdr.Get("Retry-After") == "" {
				t.Fatalf("insert refused by lock_timeout: %d %s, want 503 database_unavailable with Retry-After", code, answer)
			}
			if logs := b.logs.String(); !strings.Contains(logs, `"msg":"webhook not stored"`) || strings.Contains(logs, "outcome unknown") {
				t.Fatalf("want one not-stored line and no outcome-unknown line:\n%s", logs)
			}
			release()
			if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events`); n != 0 {
				t.Fatalf("%d events after a refused write", n)
			}
			if code, answer, _ := do(t, stripeRequest(t, b.url, body, time.Now())); code != 200 || !strings.Contains(answer, "stored") {
				t.Fatalf("retry: %d %s", code, answer)
			}

			code, answer, _ = do(t, stripeRequest(t, b.url, []byte(`{"id":"evt_poison","type":"poison"}`), time.Now()))
			if code != 400 || !strings.Contains(answer, `"event_unstorable"`) {
				t.Fatalf("event whose data the database refuses: %d %s, want 400 event_unstorable", code, answer)
			}
			if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events`); n != 1 {
				t.Fatalf("%d events, want 1", n)
			}
		})
	}
}
