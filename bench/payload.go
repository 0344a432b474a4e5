package main

// The payload section (issue 19): what keeping the parsed JSON copy
// (sources.<name>.store_json) costs at ingest, and how fast an auditor's
// --where query is over a million events with the GIN index.
//
// Ingest: the HTTP ingress with group commit at 32 connections, a realistic
// ~1.6 KB Stripe invoice event, store_json off and on, alternated and each
// run twice (the box is shared: the spread is printed).
//
// Query: 1,000,000 events with payloads (10 per customer), ANALYZE, then
// admin.ListEvents with Where `$.data.object.customer == "cus_N"` as
// webhook_operator (what inlet events list --where runs), 20 customers, each
// query timed; the plan is checked to use idx_events_payload.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// PayloadResult is what the payload section saves.
type PayloadResult struct {
	Ingest []Result `json:"ingest"`
	// OffPerSecond and OnPerSecond are the means of the runs; Slowdown is
	// 1 - on/off.
	OffPerSecond float64 `json:"off_per_second"`
	OnPerSecond  float64 `json:"on_per_second"`
	Slowdown     float64 `json:"slowdown"`
	Events       int     `json:"where_events"`
	LoadSeconds  float64 `json:"where_load_seconds"`
	WhereP50ms   float64 `json:"where_p50_ms"`
	WhereMaxms   float64 `json:"where_max_ms"`
	WhereMinms   float64 `json:"where_min_ms"`
	Plan         string  `json:"where_plan"`
}

const payloadEvents = 1_000_000

func stripeInvoiceBody(id string, n int64) []byte {
	return []byte(`{"id":"` + id + `","object":"event","api_version":"2024-06-20","created":` + strconv.FormatInt(1700000000+n, 10) +
		`,"type":"invoice.paid","livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},` +
		`"data":{"object":{"id":"in_1PXhQ2","object":"invoice","account_country":"US","account_name":"Bench Inc.","amount_due":2000,` +
		`"amount_paid":2000,"amount_remaining":0,"attempt_count":1,"attempted":true,"billing_reason":"subscription_cycle",` +
		`"collection_method":"charge_automatically","currency":"usd","customer":"cus_` + strconv.FormatInt(n%100000, 10) + `",` +
		`"customer_email":"jenny@example.com","customer_name":"Jenny Rosen","description":null,"hosted_invoice_url":"https://invoice.stripe.com/i/acct_1/test",` +
		`"lines":{"object":"list","data":[{"id":"il_1","object":"line_item","amount":2000,"currency":"usd","description":"1 × Pro (at $20.00 / month)",` +
		`"period":{"end":1702592000,"start":1700000000},"plan":{"id":"price_1","object":"plan","active":true,"amount":2000,"interval":"month"},` +
		`"quantity":1,"subscription":"sub_1","type":"subscription"}],"has_more":false,"total_count":1,"url":"/v1/invoices/in_1/lines"},` +
		`"metadata":{"order":"` + strconv.FormatInt(n, 10) + `"},"number":"BENCH-0001","paid":true,"period_end":1700000000,"period_start":1697408000,` +
		`"status":"paid","subscription":"sub_1","subtotal":2000,"tax":null,"total":2000}}}`)
}

func runPayload(ctx context.Context, b *bench) (any, error) {
	var res PayloadResult
	var off, on []float64
	for _, storeJSON := range []bool{false, true, false, true} {
		r, err := ingestPayload(ctx, b.url, 32, b.duration, storeJSON)
		if err != nil {
			return nil, err
		}
		res.Ingest = append(res.Ingest, r)
		if storeJSON {
			on = append(on, r.PerSecond)
		} else {
			off = append(off, r.PerSecond)
		}
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	res.OffPerSecond, res.OnPerSecond = mean(off), mean(on)
	res.Slowdown = 1 - res.OnPerSecond/res.OffPerSecond
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASUREMENT\tCONNS\tPER SECOND\tP50 MS\tP99 MS\tERRORS")
	for _, r := range res.Ingest {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%d\n", r.Name, r.Connections, r.PerSecond, ms(r.P50ms), ms(r.P99ms), r.Errors)
	}
	tw.Flush()
	fmt.Printf("store_json off %.0f/s (runs %.0f, %.0f), on %.0f/s (runs %.0f, %.0f): %.1f%% slower\n\n",
		res.OffPerSecond, off[0], off[1], res.OnPerSecond, on[0], on[1], 100*res.Slowdown)

	if err := wherQuery(ctx, b, &res); err != nil {
		return res, err
	}
	return res, nil
}

func ingestPayload(ctx context.Context, url string, conns int, d time.Duration, storeJSON bool) (Result, error) {
	pool, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole, MaxConns: 16, AppName: "inlet-bench-payload"})
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	store := ingress.NewGroupStore(pool, nil, ingress.GroupConfig{})
	defer store.Close()
	srv, err := ingress.New(ingress.Config{
		Section: ingress.Section{Listen: "127.0.0.1:0", StoreTimeout: 5 * time.Second, WriteTimeout: 10 * time.Second},
		Sources: []sources.Source{{Name: "stripe", Config: verify.Config{Type: "stripe", Secrets: []string{stripeSecret}}, StoreJSON: &storeJSON}},
		Store:   store,
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return Result{}, err
	}
	if err := srv.Start(ctx); err != nil {
		return Result{}, err
	}
	defer func() {
		if err := srv.Stop(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "bench: stop ingress:", err)
		}
	}()
	base := "http://" + srv.Addr().(*net.TCPAddr).String() + "/webhooks/stripe"
	transport := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	defer transport.CloseIdleConnections()
	var seq, errs atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	prefix := fmt.Sprintf("evt_payload_%t_%d_", storeJSON, time.Now().UnixNano())
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			mine := make([]time.Duration, 0, 1024)
			for time.Now().Before(stop) {
				n := seq.Add(1)
				body := stripeInvoiceBody(prefix+strconv.FormatInt(n, 10), n)
				t0 := time.Now()
				if !post(client, base, body) {
					errs.Add(1)
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	name := "ingest, store_json off"
	if storeJSON {
		name = "ingest, store_json on"
	}
	return Result{Name: name, Connections: conns, PerSecond: float64(len(lat)) / elapsed.Seconds(),
		P50ms: percentileMs(lat, 0.50), P99ms: percentileMs(lat, 0.99), Errors: errs.Load()}, nil
}

func wherQuery(ctx context.Context, b *bench, res *PayloadResult) error {
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// A million events, loaded as the owner in one statement per 100,000
	// (the body is the ingest section's invoice; payload its parse).
	body := string(stripeInvoiceBody("evt_where_XXX", 0))
	start := time.Now()
	for lo := 0; lo < payloadEvents; lo += 100_000 {
		if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, raw_body, signature_verified, occurred_at, payload)
			SELECT 'stripe-where', 'stripe', 'evt_where_' || n, 'invoice.paid', b, true, now(), convert_from(b, 'UTF8')::jsonb
			FROM generate_series($1::bigint, $2::bigint) n,
			     LATERAL (SELECT convert_to(replace(replace($3, 'evt_where_XXX', 'evt_where_' || n), '"cus_0"', '"cus_' || (n % 100000) || '"'), 'UTF8') AS b) x`,
			lo, lo+99_999, body); err != nil {
			return fmt.Errorf("load events %d..: %w", lo, err)
		}
	}
	if _, err := conn.Exec(ctx, `ANALYZE webhook_ingress.events`); err != nil {
		return err
	}
	res.Events, res.LoadSeconds = payloadEvents, time.Since(start).Seconds()
	fmt.Printf("loaded %d events with payloads in %.0fs\n", payloadEvents, res.LoadSeconds)

	op, err := database.Open(ctx, b.url, database.Options{Role: schema.OperatorRole, MaxConns: 2, AppName: "inlet-bench-where"})
	if err != nil {
		return err
	}
	defer op.Close()
	var times []time.Duration
	for i := range 20 {
		cust := 1000 + i*4099
		f := admin.EventFilter{Where: fmt.Sprintf(`$.data.object.customer == "cus_%d"`, cust), Limit: 50}
		t0 := time.Now()
		page, err := admin.ListEvents(ctx, op, f)
		if err != nil {
			return err
		}
		times = append(times, time.Since(t0))
		if len(page.Events) < 10 {
			return fmt.Errorf("--where for cus_%d found %d events, want at least 10", cust, len(page.Events))
		}
	}
	slices.Sort(times)
	res.WhereMinms, res.WhereP50ms, res.WhereMaxms = msOf(times[0]), msOf(times[len(times)/2]), msOf(times[len(times)-1])
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	// The arguments in the order of queries.AdminListEventsWhereParams'
	// fields, which sqlc numbers as the query's parameters: read from the
	// struct, so a parameter the query gains later (070's snapshot ones
	// broke a list written out here) keeps its zero value, a first page's.
	p := reflect.ValueOf(queries.AdminListEventsWhereParams{WherePath: `$.data.object.customer == "cus_1000"`, PageSize: 50})
	args := make([]any, p.NumField())
	for i := range args {
		args[i] = p.Field(i).Interface()
	}
	rows, err := tx.Query(ctx, "EXPLAIN "+queries.AdminListEventsWhere, args...)
	if err != nil {
		return err
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return err
		}
		plan = append(plan, line)
	}
	res.Plan = strings.Join(plan, "\n")
	fmt.Printf("--where over %d events (20 customers, 10 events each, limit 50): min %.1f ms, median %.1f ms, max %.1f ms\n",
		payloadEvents, res.WhereMinms, res.WhereP50ms, res.WhereMaxms)
	fmt.Printf("plan:\n%s\n", res.Plan)
	if !strings.Contains(res.Plan, "payload_idx") {
		return fmt.Errorf("the --where plan does not use the payload index:\n%s", res.Plan)
	}
	return nil
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
