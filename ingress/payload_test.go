package ingress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stripe/stripe-go/v82"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// A Stripe event built by stripe-go is stored with its created time as
// occurred_at and its parsed body as payload; the lag histogram observes
// it. A GitHub delivery (no event time) gets occurred_at NULL.
func TestOccurredAtAndPayloadStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := time.Now().Add(-90 * time.Second).Truncate(time.Second)
	body, err := json.Marshal(stripe.Event{ID: "evt_occ", Type: "charge.succeeded", Created: created.Unix(),
		Data: &stripe.EventData{Raw: json.RawMessage(`{"customer":"cus_123","amount":2000}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if code, answer, _ := do(t, stripeRequest(t, b.url, body, time.Now())); code != http.StatusOK {
		t.Fatalf("answer %d %s", code, answer)
	}
	var occurred *time.Time
	var customer *string
	if err := b.admin.QueryRow(context.Background(), `SELECT occurred_at, payload #>> '{data,object,customer}'
		FROM webhook_ingress.events WHERE external_event_id = 'evt_occ'`).Scan(&occurred, &customer); err != nil {
		t.Fatal(err)
	}
	if occurred == nil || !occurred.Equal(created) {
		t.Errorf("occurred_at %v, want %v", occurred, created)
	}
	if customer == nil || *customer != "cus_123" {
		t.Errorf("payload customer %v", customer)
	}
	if n := testutil.CollectAndCount(b.reg, "inlet_ingress_delivery_lag_seconds"); n == 0 {
		t.Error("no delivery lag histogram")
	}
	if got := histogramSum(t, b, "stripe"); got < 85 || got > 150 {
		t.Errorf("delivery lag sum %.1fs, want about 90s", got)
	}

	req := githubRequest(t, b.url, "delivery-occ", []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`))
	if code, answer, _ := do(t, req); code != http.StatusOK {
		t.Fatalf("github answer %d %s", code, answer)
	}
	if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = 'delivery-occ'
		AND occurred_at IS NULL AND payload->>'zen' LIKE 'Keep%'`); n != 1 {
		t.Errorf("github event: occurred_at NULL with payload: %d rows", n)
	}
}

func histogramSum(t *testing.T, b *testBundle, source string) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "inlet_ingress_delivery_lag_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == source {
				return m.GetHistogram().GetSampleSum()
			}
		}
	}
	return -1
}

// A body that is not JSON, not JSON jsonb takes, or over the size limit is
// stored (and answered 200) with payload NULL; store_json: false keeps none.
func TestPayloadNullWhenNotStorableJSON(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	off := false
	b := setupWith(t, url, func(c *ingress.Config) {
		c.Section.MaxBodyBytes = 1 << 20
		c.Sources[1].StoreJSONMaxBytes = 64 // github
		c.Sources = append(c.Sources, sources.Source{Name: "quiet", Config: c.Sources[1].Config, StoreJSON: &off})
	})
	cases := map[string]struct {
		source string
		body   []byte
		want   bool // payload stored
	}{
		"object":                 {"github", []byte(`{"a":1}`), true},
		"not json":               {"github", []byte(`{"a":1`), false},
		"form":                   {"github", []byte(`payload=%7B%7D`), false},
		"NUL escape":             {"github", []byte(`{"a":"x\u0000y"}`), false},
		"lone surrogate":         {"github", []byte(`{"a":"\ud800"}`), false},
		"paired surrogates":      {"github", []byte(`{"a":"\ud83d\ude00"}`), true},
		"reversed surrogates":    {"github", []byte(`{"a":"\ude00\ud83d"}`), false},
		"huge exponent":          {"github", []byte(`{"a":1e999999}`), false},
		"deep":                   {"github", []byte(strings.Repeat("[", 300) + strings.Repeat("]", 300)), false},
		"invalid utf-8":          {"github", []byte("{\"a\":\"\xff\"}"), false},
		"over store_json_max":    {"github", []byte(`{"a":"` + strings.Repeat("x", 100) + `"}`), false},
		"store_json off":         {"quiet", []byte(`{"a":1}`), false},
		"escaped slash and more": {"github", []byte(`{"a":"\/\b\f\n\r\t\"\\\u00e9"}`), true},
	}
	i := 0
	for name, tc := range cases {
		i++
		id := fmt.Sprintf("d-%d", i)
		req := githubRequestTo(t, b.url, tc.source, id, tc.body)
		if code, answer, _ := do(t, req); code != http.StatusOK {
			t.Errorf("%s: answer %d %s", name, code, answer)
			continue
		}
		var raw []byte
		var payload *string
		if err := b.admin.QueryRow(context.Background(), `SELECT raw_body, payload::text FROM webhook_ingress.events
			WHERE provider = $1 AND external_event_id = $2`, tc.source, id).Scan(&raw, &payload); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(raw, tc.body) {
			t.Errorf("%s: raw_body changed", name)
		}
		if (payload != nil) != tc.want {
			t.Errorf("%s: payload %v, want stored %v", name, payload, tc.want)
		}
	}
}

// JSONCopyable never lets through a body PostgreSQL's jsonb refuses: each
// body it accepts is cast by PostgreSQL, and the cast succeeds.
func FuzzJSONCopyableAgreesWithJSONB(f *testing.F) {
	url := pgtest.NewDatabase(f)
	pool := adminPool(f, url)
	for _, s := range []string{`{"a":1}`, `{"a":"\u0000"}`, `[1e400]`, `{"a":"\ud800\udc00"}`, `"x"`, `[-0.0e-5]`, `{"a":[{"b":null}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !ingress.JSONCopyable(body, 1<<20) {
			return
		}
		var ok bool
		if err := pool.QueryRow(context.Background(), `SELECT convert_from($1, 'UTF8')::jsonb IS NOT NULL`, body).Scan(&ok); err != nil {
			t.Fatalf("JSONCopyable accepted %q, jsonb refused: %v", body, err)
		}
	})
}

func githubRequest(t *testing.T, url, id string, body []byte) *http.Request {
	t.Helper()
	return githubRequestTo(t, url, "github", id, body)
}

// githubRequestTo signs body as GitHub would for a source with the github
// test secret.
func githubRequestTo(t *testing.T, url, source, id string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/webhooks/"+source, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range verify.SignGitHub(githubSecret, id, "push", body) {
		req.Header[k] = v
	}
	return req
}

func adminPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
