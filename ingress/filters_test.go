package ingress_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
)

func charge(id string, amount int) *ingress.Event {
	e := event(id)
	e.EventType = "charge.succeeded"
	e.RawBody = fmt.Appendf(nil, `{"id":%q,"data":{"object":{"amount":%d}}}`, id, amount)
	return e
}

// filterStores starts a database with subs (SQL VALUES for
// subscriptions (handler, provider_pattern, event_type_pattern, filter)) and
// returns the admin pool and an ingress PGStore and GroupStore on it.
func filterStores(t *testing.T, subs string) (*pgxpool.Pool, *ingress.PGStore, *ingress.GroupStore) {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, filter) VALUES `+subs); err != nil {
		t.Fatal(err)
	}
	pool, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	group := ingress.NewGroupStore(pool, nil, ingress.GroupConfig{MaxWait: 2 * time.Millisecond})
	t.Cleanup(group.Close)
	return admin, ingress.NewPGStore(pool, nil), group
}

// A subscription's CEL filter routes as written, in the group commit path
// and the single-insert path alike: the events it rejects get no job row of
// its handler (an unfiltered handler still gets every event); an event the
// expression cannot be evaluated on (not JSON) is a miss counted as an
// error; a duplicate makes no second job; the counts are in the metric.
func TestSubscriptionFilterRoutesBeforeJobsAreWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, single, group := filterStores(t, `
		('big', 'stripe', 'charge.*', 'payload.data.object.amount > 10000 && event.type == "charge.succeeded"'),
		('headers', '*', '*', 'event.headers["stripe-signature"].startsWith("t=1")'),
		('recent', '*', '*', 'event.occurred_at != null && event.occurred_at > timestamp("2026-01-01T00:00:00Z")'),
		('all', '*', '*', NULL)`)

	notJSON := charge("evt_form", 0)
	notJSON.RawBody = []byte("amount=25000")
	other := event("evt_invoice") // invoice.paid: big's pattern does not match it
	other.OccurredAt = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for _, c := range []struct {
		store ingress.Store
		e     *ingress.Event
	}{
		{group, charge("evt_big_g", 25000)}, {group, charge("evt_small_g", 500)}, {group, notJSON},
		{single, charge("evt_big_s", 12000)}, {single, charge("evt_small_s", 10000)}, {group, other},
		{group, charge("evt_big_g", 25000)}, // a duplicate: nothing more
	} {
		wg.Go(func() {
			if _, err := c.store.Insert(ctx, c.e); err != nil {
				t.Errorf("insert %s: %v", c.e.ExternalID, err)
			}
		})
	}
	wg.Wait()

	jobs := func(handler string) string {
		t.Helper()
		var ids string
		if err := admin.QueryRow(ctx, `SELECT coalesce(string_agg(e.external_event_id, ',' ORDER BY e.external_event_id), '')
			FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id WHERE j.handler = $1`, handler).Scan(&ids); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if got, want := jobs("big"), "evt_big_g,evt_big_s"; got != want {
		t.Errorf("jobs of the filtered handler big: %s, want %s", got, want)
	}
	if got, want := jobs("all"), "evt_big_g,evt_big_s,evt_form,evt_invoice,evt_small_g,evt_small_s"; got != want {
		t.Errorf("jobs of the unfiltered handler all: %s, want %s", got, want)
	}
	if got, want := jobs("recent"), "evt_invoice"; got != want {
		t.Errorf("jobs of the occurred_at-filtered handler: %s, want %s", got, want)
	}
	if got, want := jobs("headers"), "evt_big_g,evt_big_s,evt_form,evt_invoice,evt_small_g,evt_small_s"; got != want {
		t.Errorf("jobs of the header-filtered handler: %s, want %s", got, want)
	}

	want := func(c prometheus.Collector, handler, result string, n float64) {
		t.Helper()
		if got := testutil.ToFloat64(mustCounter(t, c, handler, result)); got != n {
			t.Errorf("filter_evaluations_total{handler=%q,result=%q} = %v, want %v", handler, result, got, n)
		}
	}
	// The group path saw evt_big_g twice (the duplicate is evaluated before
	// the database says it is one), evt_small_g and evt_form.
	want(group.FilterMetrics(), "big", "match", 2)
	want(group.FilterMetrics(), "big", "miss", 1)
	want(group.FilterMetrics(), "big", "error", 1)
	want(single.FilterMetrics(), "big", "match", 1)
	want(single.FilterMetrics(), "big", "miss", 1)
}

func mustCounter(t *testing.T, c prometheus.Collector, handler, result string) prometheus.Collector {
	t.Helper()
	vec, ok := c.(*prometheus.CounterVec)
	if !ok {
		t.Fatalf("filter metrics are a %T, want a CounterVec", c)
	}
	return vec.WithLabelValues(handler, result)
}

// A filtered subscription registered after ingress started applies from
// the next refresh (at most a second).
func TestSubscriptionFilterRegisteredLaterApplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, admin, _ := groupStore(t, ingress.GroupConfig{})
	if _, err := g.Insert(ctx, charge("evt_before", 25000)); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, filter) VALUES ('late', 'payload.data.object.amount > 1')`); err != nil {
		t.Fatal(err)
	}
	i := 0
	testwait.Eventually(t, 10*time.Second, "jobs for the filtered subscription registered later", func() (bool, string) {
		i++
		if _, err := g.Insert(ctx, charge(fmt.Sprintf("evt_after_%d", i), 25000)); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'late'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0, fmt.Sprintf("no job after %d events", i)
	})
	var before int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.handler = 'late' AND e.external_event_id = 'evt_before'`).Scan(&before); err != nil || before != 0 {
		t.Fatalf("event stored before the subscription got %d jobs (%v): catch-up is inlet replay's", before, err)
	}
}

// The first read of the filtered subscriptions does not depend on the
// request that triggers it: a first webhook whose sender went away (its
// context cancelled) must not leave ingress routing the next ones with no
// filters, in either store.
func TestSubscriptionFilterFirstReadSurvivesACancelledRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, filter)
		VALUES ('big', 'stripe', 'charge.*', 'payload.data.object.amount > 10000')`); err != nil {
		t.Fatal(err)
	}
	pool, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	group := ingress.NewGroupStore(pool, nil, ingress.GroupConfig{})
	t.Cleanup(group.Close)
	for name, store := range map[string]ingress.Store{"group": group, "single": ingress.NewPGStore(pool, nil)} {
		gone, cancel := context.WithCancel(ctx)
		cancel()
		if stored, err := store.Insert(gone, charge("evt_gone_"+name, 25000)); err == nil || stored {
			t.Fatalf("%s: insert with a cancelled context: stored=%v err=%v, want an error", name, stored, err)
		}
		id := "evt_next_" + name
		if stored, err := store.Insert(ctx, charge(id, 25000)); err != nil || !stored {
			t.Fatalf("%s: insert after it: stored=%v err=%v", name, stored, err)
		}
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
			WHERE j.handler = 'big' AND e.external_event_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("%s: %s got %d jobs of the filtered subscription big, want 1", name, id, n)
		}
	}
}

// Until ingress has read the filtered subscriptions once, it cannot route
// an event to them: a webhook that arrives while they cannot be read is
// answered 503 not stored and nothing is written, rather than stored
// without their jobs. Once read, a failed reload keeps the last copy.
func TestSubscriptionFilterUnreadableBeforeFirstReadIsNotStored(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"single", "group"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dbURL := pgtest.NewDatabase(t)
			edit := func(*ingress.Config) {}
			if kind == "group" {
				edit = useGroupStore(t, dbURL)
			}
			b := setupWith(t, dbURL, edit)
			exec := func(sql string) {
				t.Helper()
				if _, err := b.admin.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			exec(`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, filter)
				VALUES ('big', 'stripe', 'charge.*', 'payload.data.object.amount > 10000')`)
			const revoke = `REVOKE SELECT ON webhook_ingress.subscriptions FROM webhook_ingress_writer`
			exec(revoke)
			send := func(id string) (int, string) {
				code, answer, _ := do(t, stripeRequest(t, b.url,
					fmt.Appendf(nil, `{"id":%q,"type":"charge.succeeded","data":{"object":{"amount":25000}}}`, id), time.Now()))
				return code, answer
			}
			bigJobs := func(id string) int {
				return count(t, b.admin, `SELECT count(*) FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
					WHERE j.handler = 'big' AND e.external_event_id = $1`, id)
			}

			if code, answer := send("evt_early"); code != http.StatusServiceUnavailable || !strings.Contains(answer, "database_unavailable") {
				t.Fatalf("filters unreadable before the first read: %d %s, want 503 database_unavailable", code, answer)
			}
			if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events`); n != 0 {
				t.Fatalf("%d events stored while the filters could not be read, want 0", n)
			}

			exec(`GRANT SELECT (id, handler, provider_pattern, event_type_pattern, filter, enabled)
				ON webhook_ingress.subscriptions TO webhook_ingress_writer`)
			if code, answer := send("evt_early"); code != http.StatusOK || !strings.Contains(answer, `"stored"`) {
				t.Fatalf("the provider's retry once readable: %d %s, want 200 stored", code, answer)
			}
			if n := bigJobs("evt_early"); n != 1 {
				t.Fatalf("evt_early: %d jobs of big, want 1", n)
			}

			// Read once: a reload that fails (one is due every second) routes
			// by the last copy.
			exec(revoke)
			i := 0
			testwait.Consistently(t, 2500*time.Millisecond, "events stored with big's job by the last copy", func() (bool, string) {
				i++
				id := fmt.Sprintf("evt_later_%d", i)
				if code, answer := send(id); code != http.StatusOK {
					return false, fmt.Sprintf("%s: %d %s", id, code, answer)
				}
				n := bigJobs(id)
				return n == 1, fmt.Sprintf("%s: %d jobs of big", id, n)
			})
			// Said in the server's own log, not the process default's.
			if !strings.Contains(b.logs.String(), "read filtered subscriptions failed; using the last copy") {
				t.Fatalf("the failed reload is not in the server's log:\n%s", b.logs.String())
			}
		})
	}
}
