package ingress_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// gatedStore is the real PGStore behind a gate: Insert waits until the test
// opens it, past the request's store timeout if need be, so the test can hold
// a request's body in ingress for as long as it likes.
type gatedStore struct {
	ingress.Store
	entered chan string // the event id of each Insert that reached the gate
	gate    chan struct{}
}

func (g *gatedStore) Insert(ctx context.Context, e *ingress.Event) (bool, error) {
	g.entered <- e.ExternalID
	<-g.gate
	return g.Store.Insert(context.WithoutCancel(ctx), e)
}

// ingress.max_inflight_bytes: a request whose body does not fit reads its
// head (16 KiB) and waits with the rest unread until room frees up (and then
// is stored), or past store_timeout is answered 503 overloaded with
// Retry-After and nothing stored.
func TestInflightBudgetHoldsBodiesBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const body, budget = 40 << 10, 64 << 10 // room for one body, not two
	var store *gatedStore
	tb := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Ingress.MaxBodyBytes, c.Ingress.MaxInflightBytes = budget, budget
		store = &gatedStore{Store: c.Store, entered: make(chan string, 8), gate: make(chan struct{})}
		c.Store = store
	})
	admin, reg := tb.admin, tb.reg

	event := func(id string) []byte {
		b := fmt.Appendf(nil, `{"id":%q,"type":"t","pad":"`, id)
		b = append(b, bytes.Repeat([]byte("p"), body-len(b)-2)...)
		return append(b, `"}`...)
	}
	type answer struct {
		code  int
		text  string
		retry string
	}
	send := func(id string) chan answer {
		ch := make(chan answer, 1)
		req := stripeRequest(t, tb.url, event(id), time.Now())
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				ch <- answer{text: err.Error()}
				return
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(resp.Body)
			ch <- answer{resp.StatusCode, buf.String(), resp.Header.Get("Retry-After")}
		}()
		return ch
	}
	inflight := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "inlet_ingress_inflight_bytes" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no inlet_ingress_inflight_bytes")
		return 0
	}

	// A holds its 40 KiB in the store; B's head is read, its rest does not
	// fit and waits, unread.
	a := send("evt_a")
	if id := <-store.entered; id != "evt_a" {
		t.Fatalf("first in the store: %s", id)
	}
	b := send("evt_b")
	select {
	case id := <-store.entered:
		t.Fatalf("%s reached the store while the budget was spent", id)
	case r := <-b:
		t.Fatalf("B answered while it should wait: %+v", r)
	case <-time.After(500 * time.Millisecond):
	}
	const head = 16 << 10
	if got := inflight(); got != body+head {
		t.Fatalf("inflight_bytes = %v while A is held and B's head read, want %d", got, body+head)
	}
	// A stored, its room goes to B, which is then stored too.
	store.gate <- struct{}{}
	if r := <-a; r.code != http.StatusOK || !strings.Contains(r.text, "stored") {
		t.Fatalf("A: %+v", r)
	}
	if id := <-store.entered; id != "evt_b" {
		t.Fatalf("second in the store: %s", id)
	}
	store.gate <- struct{}{}
	if r := <-b; r.code != http.StatusOK || !strings.Contains(r.text, "stored") {
		t.Fatalf("B after waiting: %+v", r)
	}

	// C holds the budget past D's store_timeout: D is refused unread.
	c := send("evt_c")
	<-store.entered
	start := time.Now()
	d := send("evt_d")
	r := <-d
	if r.code != http.StatusServiceUnavailable || r.retry == "" || !strings.Contains(r.text, `"overloaded"`) {
		t.Fatalf("D while the budget stayed spent: %+v, want 503 overloaded with Retry-After", r)
	}
	if waited := time.Since(start); waited < 2*time.Second {
		t.Fatalf("D refused after %s, before store_timeout (2s)", waited)
	}
	store.gate <- struct{}{}
	if r := <-c; r.code != http.StatusOK {
		t.Fatalf("C: %+v", r)
	}
	select {
	case id := <-store.entered:
		t.Fatalf("%s reached the store after being refused", id)
	default:
	}

	var ids []string
	rows, err := admin.Query(ctx, `SELECT external_event_id FROM webhook_ingress.events ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if got := strings.Join(ids, ","); got != "evt_a,evt_b,evt_c" {
		t.Fatalf("stored %s, want evt_a,evt_b,evt_c", got)
	}
	if got := inflight(); got != 0 {
		t.Fatalf("inflight_bytes = %v after every answer, want 0", got)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP inlet_ingress_overloaded_total Webhooks answered 503 unread because ingress.max_inflight_bytes stayed in use for ingress.store_timeout (the database is not keeping up with the bodies arriving).
# TYPE inlet_ingress_overloaded_total counter
inlet_ingress_overloaded_total{source="github"} 0
inlet_ingress_overloaded_total{source="gitlab"} 0
inlet_ingress_overloaded_total{source="slack"} 0
inlet_ingress_overloaded_total{source="stripe"} 1
`), "inlet_ingress_overloaded_total"); err != nil {
		t.Fatal(err)
	}
}
