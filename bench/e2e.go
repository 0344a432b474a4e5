package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/bus"
	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/streamer"
)

// Latency is one end-to-end measurement: from the ingress 200 to the
// handler's call, at a steady offered rate.
type Latency struct {
	Wake string `json:"wake"`
	// Rate is the offered rate; 0 at saturation (128 connections posting
	// back to back).
	Rate      int `json:"offered_per_second"`
	Delivered int `json:"delivered"`
	// PerSecond is delivered / (first post to last handler call).
	PerSecond float64 `json:"delivered_per_second"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
	Errors    int64   `json:"errors"`
}

// endToEnd runs ingress (group commit), a streamer woken by wake (notify,
// replication or poll) and a no-op handler in this process over the
// in-process bus, offers rate signed webhooks per second for d (rate 0: as
// fast as 128 connections can post), and measures for each the time from
// its 200 to its handler call.
func endToEnd(ctx context.Context, url, wake string, rate int, d time.Duration) (Latency, error) {
	log := slog.New(slog.DiscardHandler)
	// Only this run's handler is subscribed: earlier runs' would add jobs.
	owner, err := pgx.Connect(ctx, url)
	if err != nil {
		return Latency{}, err
	}
	_, err = owner.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET enabled = false`)
	owner.Close(ctx)
	if err != nil {
		return Latency{}, err
	}
	open := func(role, name string) (*pgxpool.Pool, error) {
		return database.Open(ctx, url, database.Options{Role: role, MaxConns: 64, AppName: "inlet-bench-" + name})
	}
	ipool, err := open(config.DefaultIngressRole, "ingress")
	if err != nil {
		return Latency{}, err
	}
	defer ipool.Close()
	spool, err := open(config.DefaultStreamerRole, "streamer")
	if err != nil {
		return Latency{}, err
	}
	defer spool.Close()
	wpool, err := open(config.DefaultWorkerRole, "worker")
	if err != nil {
		return Latency{}, err
	}
	defer wpool.Close()
	ps := bus.NewGoChannel(log)
	defer ps.Close()

	// The handler records when it was called, by the event's id.
	var mu sync.Mutex
	called := map[string]time.Time{}
	handler := consumers.Handler{Name: "bench-" + wake, Provider: "stripe", Concurrency: 64, Func: func(_ context.Context, e *consumers.Event) error {
		now := time.Now()
		mu.Lock()
		called[e.ExternalID] = now
		mu.Unlock()
		return nil
	}}
	cons, err := consumers.New(consumers.Config{Pool: wpool, Subscriber: ps, Handlers: []consumers.Handler{handler}, Logger: log})
	if err != nil {
		return Latency{}, err
	}
	if err := cons.Start(ctx); err != nil {
		return Latency{}, err
	}
	defer cons.Stop(context.Background())

	sc := streamer.Config{Pool: spool, Publisher: ps, PollInterval: time.Second, Logger: log}
	var hinter ingress.Hinter
	switch wake {
	case "notify":
		sc.ListenConnect = func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) }
		h := notify.NewHinter(ipool, 0, log)
		defer h.Stop()
		hinter = h
	case "replication":
		sc.SlotName = "inlet_bench"
		sc.ReplicationConnect = func(ctx context.Context) (*pgconn.PgConn, error) { return streamer.ConnectReplication(ctx, url) }
	}
	str, err := streamer.New(sc)
	if err != nil {
		return Latency{}, err
	}
	if err := str.Start(ctx); err != nil {
		return Latency{}, err
	}
	defer str.Stop()

	store := ingress.NewGroupStore(ipool, hinter, ingress.GroupConfig{})
	srv, err := ingress.New(ingress.Config{
		Ingress: config.Ingress{Listen: "127.0.0.1:0", StoreTimeout: 5 * time.Second, WriteTimeout: 10 * time.Second},
		Sources: []config.Source{{Name: "stripe", Config: verify.Config{Type: "stripe", Secrets: []string{stripeSecret}}}},
		Store:   store, Logger: log,
	})
	if err != nil {
		return Latency{}, err
	}
	if err := srv.Start(ctx); err != nil {
		return Latency{}, err
	}
	defer srv.Stop(context.Background())
	base := "http://" + srv.Addr().(*net.TCPAddr).String() + "/webhooks/stripe"

	// Offer rate per second, paced, from up to 128 connections.
	transport := &http.Transport{MaxIdleConnsPerHost: 128, MaxConnsPerHost: 128}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	defer transport.CloseIdleConnections()
	var errs atomic.Int64
	acked := sync.Map{} // id → time of the 200
	work := make(chan string, 1024)
	var wg sync.WaitGroup
	for range 128 {
		wg.Go(func() {
			for id := range work {
				if !post(client, base, []byte(`{"id":"`+id+`","object":"event","type":"invoice.paid"}`)) {
					errs.Add(1)
					continue
				}
				acked.Store(id, time.Now())
			}
		})
	}
	prefix := fmt.Sprintf("evt_e2e_%s_%d_", wake, time.Now().UnixNano())
	total := 0
	start := time.Now()
	if rate > 0 {
		total = int(float64(rate) * d.Seconds())
		interval := time.Second / time.Duration(rate)
		for i := range total {
			if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
				time.Sleep(wait)
			}
			work <- prefix + strconv.Itoa(i)
		}
	} else {
		for stop := start.Add(d); time.Now().Before(stop); total++ {
			work <- prefix + strconv.Itoa(total)
		}
	}
	close(work)
	wg.Wait()
	// Every acknowledged webhook reaches the handler (polling catches any
	// missed wake-up within a second).
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(called)
		mu.Unlock()
		if int64(n) >= int64(total)-errs.Load() {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var lat []time.Duration
	var last time.Time
	mu.Lock()
	acked.Range(func(k, v any) bool {
		if c, ok := called[k.(string)]; ok {
			lat = append(lat, max(c.Sub(v.(time.Time)), 0))
			if c.After(last) {
				last = c
			}
		}
		return true
	})
	mu.Unlock()
	slices.Sort(lat)
	return Latency{Wake: wake, Rate: rate, Delivered: len(lat), PerSecond: float64(len(lat)) / last.Sub(start).Seconds(),
		P50ms: percentileMs(lat, 0.5), P99ms: percentileMs(lat, 0.99), MaxMs: percentileMs(lat, 1), Errors: errs.Load()}, nil
}
