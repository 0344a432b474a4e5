package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/streamer"
)

// e2eConns is how many connections the end-to-end measurement posts from
// (paced, or back to back at saturation).
const e2eConns = 128

// Latency is one end-to-end measurement: from the 200 to the handler's
// call, at a steady offered rate.
type Latency struct {
	// System is "inlet" or "river" (the River receiver, see river.go).
	System string `json:"system"`
	// Wake is Inlet's wake source (notify, replication, poll); "river" for
	// the River receiver (River's own LISTEN/NOTIFY and fetch poll).
	Wake string `json:"wake"`
	// Rate is the offered rate; 0 at saturation (e2eConns connections
	// posting back to back).
	Rate      int `json:"offered_per_second"`
	Delivered int `json:"delivered"`
	// PerSecond is delivered / (first post to last handler call).
	PerSecond float64 `json:"delivered_per_second"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
	Errors    int64   `json:"errors"`
	// VsRiver is, for Inlet, P99ms / the River receiver's p99 at the same
	// offered rate in the same run.
	VsRiver float64 `json:"vs_river,omitempty"`
	// Stages splits Inlet's latency where the database can tell (nil for
	// River).
	Stages *Stages `json:"stages,omitempty"`
	*Cost
	// warm is when the counted latencies begin (after a steady rate's
	// warm-up), for stages to leave out the same events.
	warm time.Time
}

// Stages are the two legs of an Inlet delivery, from the database's clock
// (this machine's, like the handler's): ToClaim from the event's
// received_at (its ingest transaction's start) to its job's claim (the
// claim's start, attempted_at), which is ingest's commit and the wait for a
// wake-up; ToHandler from the claim to the handler's call, which is the
// claim's execution and commit, the bus and the consumer's read.
type Stages struct {
	ToClaimP50ms   float64 `json:"to_claim_p50_ms"`
	ToClaimP99ms   float64 `json:"to_claim_p99_ms"`
	ToHandlerP50ms float64 `json:"to_handler_p50_ms"`
	ToHandlerP99ms float64 `json:"to_handler_p99_ms"`
}

// calls records when the handler first ran for each event id.
type calls struct {
	mu sync.Mutex
	at map[string]time.Time
}

func newCalls() *calls { return &calls{at: map[string]time.Time{}} }

// record is the measured handler: it notes the time of the first call for
// the event (a redelivery does not move it) and does nothing else.
func (c *calls) record(_ context.Context, externalID string, _ []byte) {
	now := time.Now()
	c.mu.Lock()
	if _, ok := c.at[externalID]; !ok {
		c.at[externalID] = now
	}
	c.mu.Unlock()
}

func (c *calls) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.at)
}

// noop is the sustained measurement's handler: it does nothing, for Inlet's
// consumers and the River receiver's worker alike.
func noop(context.Context, string, []byte) {}

// inletOptions is what an in-process Inlet pipeline runs.
type inletOptions struct {
	// wake is the streamer's wake source: notify, replication or poll.
	wake string
	// handlers are the subscribed handlers (provider stripe, every event
	// type); each runs handle.
	handlers    []string
	concurrency int
	handle      func(ctx context.Context, externalID string, body []byte)
	// conns is each service's pool (ingress, streamer, consumers).
	conns int
	// ingressOnly registers the handlers' subscriptions (so events fan out
	// to jobs) but runs neither consumers nor a streamer.
	ingressOnly bool
}

// inletPipeline is ingress (group commit), a streamer and the consumers in
// this process over the in-process bus, as bench/e2e has always run them.
type inletPipeline struct {
	url     string // where webhooks are posted
	closers []func()
	once    sync.Once
}

// stop stops the services and closes their pools, last started first.
func (p *inletPipeline) stop() {
	p.once.Do(func() {
		for _, c := range slices.Backward(p.closers) {
			c()
		}
	})
}

// startInlet starts the pipeline on the database at url. Only o's handlers
// get jobs when the database's other subscriptions are disabled (the
// caller's choice: a fresh database has none).
func startInlet(ctx context.Context, url string, o inletOptions) (p *inletPipeline, err error) {
	p = &inletPipeline{}
	defer func() {
		if err != nil {
			p.stop()
		}
	}()
	log := slog.New(slog.DiscardHandler)
	open := func(role, name string) (*pgxpool.Pool, error) {
		pool, err := database.Open(ctx, url, database.Options{Role: role, MaxConns: int32(o.conns), AppName: "inlet-bench-" + name})
		if err == nil {
			p.closers = append(p.closers, pool.Close)
		}
		return pool, err
	}
	ipool, err := open(schema.IngressRole, "ingress")
	if err != nil {
		return nil, err
	}
	spool, err := open(schema.StreamerRole, "streamer")
	if err != nil {
		return nil, err
	}
	wpool, err := open(schema.WorkerRole, "worker")
	if err != nil {
		return nil, err
	}
	ps := bus.NewGoChannel(log)
	p.closers = append(p.closers, func() { ps.Close() })

	var handlers []consumers.Handler
	for _, name := range o.handlers {
		handlers = append(handlers, consumers.Handler{Name: name, Provider: "stripe", Concurrency: o.concurrency,
			Func: func(ctx context.Context, e *consumers.Event) error {
				o.handle(ctx, e.ExternalID, e.Body)
				return nil
			}})
	}
	cons, err := consumers.New(consumers.Config{Pool: wpool, Subscriber: ps, Handlers: handlers, Logger: log})
	if err != nil {
		return nil, err
	}
	if o.ingressOnly {
		if err := cons.Register(ctx); err != nil {
			return nil, err
		}
		return p, startIngress(ctx, p, ipool, nil)
	}
	if err := cons.Start(ctx); err != nil {
		return nil, err
	}
	p.closers = append(p.closers, func() { _ = cons.Stop(context.Background()) })

	sc := streamer.Config{Pool: spool, Publisher: ps, PollInterval: time.Second, Logger: log}
	var hinter ingress.Hinter
	switch o.wake {
	case "notify":
		sc.ListenConnect = func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) }
		h := notify.NewHinter(ipool, 0, log)
		p.closers = append(p.closers, h.Stop)
		hinter = h
	case "replication":
		sc.SlotName = "inlet_bench"
		sc.ReplicationConnect = func(ctx context.Context) (*pgconn.PgConn, error) { return streamer.ConnectReplication(ctx, url) }
	}
	str, err := streamer.New(sc)
	if err != nil {
		return nil, err
	}
	if err := str.Start(ctx); err != nil {
		return nil, err
	}
	p.closers = append(p.closers, str.Stop)
	return p, startIngress(ctx, p, ipool, hinter)
}

// startIngress starts ingress with group commit on pool and sets p.url.
func startIngress(ctx context.Context, p *inletPipeline, pool *pgxpool.Pool, hinter ingress.Hinter) error {
	log := slog.New(slog.DiscardHandler)
	store := ingress.NewGroupStore(pool, hinter, ingress.GroupConfig{})
	p.closers = append(p.closers, store.Close)
	srv, err := ingress.New(ingress.Config{
		Section: ingress.Section{Listen: "127.0.0.1:0", StoreTimeout: 5 * time.Second, WriteTimeout: 10 * time.Second},
		Sources: []sources.Source{{Name: "stripe", Config: verify.Config{Type: "stripe", Secrets: []string{stripeSecret}}}},
		Store:   store, Logger: log,
	})
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	p.closers = append(p.closers, func() { _ = srv.Stop(context.Background()) })
	p.url = "http://" + srv.Addr().(*net.TCPAddr).String() + "/webhooks/stripe"
	return nil
}

// endToEnd runs ingress (group commit), a streamer woken by wake (notify,
// replication or poll) and a handler in this process over the in-process
// bus, offers rate signed webhooks per second for d (rate 0: as fast as
// e2eConns connections can post), and measures for each the time from its
// 200 to its handler call.
func endToEnd(ctx context.Context, b *bench, wake string, rate int, d time.Duration) (Latency, error) {
	// Only this run's handler is subscribed: earlier runs' would add jobs.
	owner, err := pgx.Connect(ctx, b.url)
	if err != nil {
		return Latency{}, err
	}
	_, err = owner.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET enabled = false`)
	owner.Close(ctx)
	if err != nil {
		return Latency{}, fmt.Errorf("disable earlier subscriptions: %w", err)
	}
	c := newCalls()
	p, err := startInlet(ctx, b.url, inletOptions{wake: wake, handlers: []string{"bench-" + wake}, concurrency: 64, handle: c.record, conns: 64})
	if err != nil {
		return Latency{}, err
	}
	defer p.stop()
	m, err := b.startMeter(ctx, b.url)
	if err != nil {
		return Latency{}, err
	}
	defer m.close()
	prefix := fmt.Sprintf("evt_e2e_%s_%d_", wake, time.Now().UnixNano())
	l := measureLatency(ctx, p.url, prefix, rate, d, c)
	l.System, l.Wake = "inlet", wake
	p.stop()
	if l.Stages, err = stages(ctx, b.url, prefix, l.warm, c); err != nil {
		return l, err
	}
	if l.Cost, err = m.finish(ctx, int64(l.Delivered)); err != nil {
		return l, err
	}
	return l, nil
}

// stages measures Stages for the events of prefix delivered to c, leaving
// out those received before warm, as measureLatency does.
func stages(ctx context.Context, url, prefix string, warm time.Time, c *calls) (*Stages, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	// A prefix LIKE on a parameter is estimated at one row, and jobs has no
	// index on event_id: a nested loop would scan jobs once per event.
	if _, err := conn.Exec(ctx, `SET enable_nestloop = off`); err != nil {
		return nil, fmt.Errorf("stages: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT e.external_event_id, e.received_at, j.attempted_at
		FROM webhook_ingress.events e JOIN webhook_ingress.jobs j ON j.event_id = e.id
		WHERE e.external_event_id LIKE $1 || '%' AND j.attempt_count = 1 AND j.attempted_at IS NOT NULL`, prefix)
	if err != nil {
		return nil, fmt.Errorf("stages: %w", err)
	}
	type row struct {
		id                string
		received, claimed time.Time
	}
	var all []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.received, &r.claimed); err != nil {
			return nil, fmt.Errorf("stages: %w", err)
		}
		all = append(all, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stages: %w", err)
	}
	var toClaim, toHandler []time.Duration
	c.mu.Lock()
	for _, r := range all {
		called, ok := c.at[r.id]
		if !ok || r.received.Before(warm) {
			continue
		}
		toClaim = append(toClaim, max(r.claimed.Sub(r.received), 0))
		toHandler = append(toHandler, max(called.Sub(r.claimed), 0))
	}
	c.mu.Unlock()
	slices.Sort(toClaim)
	slices.Sort(toHandler)
	return &Stages{ToClaimP50ms: percentileMs(toClaim, 0.5), ToClaimP99ms: percentileMs(toClaim, 0.99),
		ToHandlerP50ms: percentileMs(toHandler, 0.5), ToHandlerP99ms: percentileMs(toHandler, 0.99)}, nil
}

// measureLatency offers rate webhooks per second to url for d (rate 0:
// e2eConns connections back to back), waits until every acknowledged one
// has reached the handler that records into c (up to 15s: polling catches
// any missed wake-up within a second), and returns the latencies from each
// 200 to its handler call.
// e2eWarmUp is the start of a steady-rate run left out of its latencies.
const e2eWarmUp = time.Second

func measureLatency(ctx context.Context, url, prefix string, rate int, d time.Duration, c *calls) Latency {
	var mu sync.Mutex
	acked := map[string]time.Time{}
	start := time.Now()
	ld := offer(ctx, offerConfig{url: url, rate: rate, d: d, conns: e2eConns, prefix: prefix, body: minimalStripeBody,
		onAck: func(id string, at time.Time) {
			mu.Lock()
			acked[id] = at
			mu.Unlock()
		}})
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && int64(c.count()) < ld.Acked; {
		time.Sleep(20 * time.Millisecond)
	}
	// At a steady rate, the first second is warm-up for either system (pool
	// connections opened, statements prepared and planned), not steady
	// state: it is offered and delivered but not counted in the latencies.
	// (Measured: Inlet's first 250 ms at 1,000/s waited ~120 ms, every later
	// quarter second at most ~15-25 ms.) At saturation everything counts.
	warm := start
	if rate > 0 && d > 2*e2eWarmUp {
		warm = start.Add(e2eWarmUp)
	}
	var lat []time.Duration
	var last time.Time
	c.mu.Lock()
	for id, at := range acked {
		if at.Before(warm) {
			continue
		}
		if called, ok := c.at[id]; ok {
			lat = append(lat, max(called.Sub(at), 0))
			if called.After(last) {
				last = called
			}
		}
	}
	c.mu.Unlock()
	slices.Sort(lat)
	return Latency{warm: warm, Rate: rate, Delivered: len(lat), PerSecond: float64(len(lat)) / last.Sub(warm).Seconds(),
		P50ms: percentileMs(lat, 0.5), P99ms: percentileMs(lat, 0.99), MaxMs: percentileMs(lat, 1), Errors: ld.Errors}
}
