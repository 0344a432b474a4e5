package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/inlet-dev/inlet/ingress/verify"
)

// The River receiver's settings, two sets as River's documentation gives
// them. For latency (the e2e section): river bench's (River's own
// benchmark, cmd/river/riverbench), FetchCooldown 2ms and FetchPollInterval
// 20ms, "much better than the client's default values" for fetching. For
// throughput (the sustained section): River's defaults, FetchCooldown 100ms
// and FetchPollInterval 1s, because FetchCooldown also spaces River's insert
// NOTIFYs (at most one per queue per cooldown, sent inside the inserting
// transaction), and a notifying commit holds PostgreSQL's notify lock
// through its WAL flush: at 2ms up to 500 commits a second queue on that
// lock, and the receiver here accepted about half as many webhooks as at
// 100ms (measured at 1,000/s offered, 10s each, twice). Both: 2,000 workers
// (the docs' benchmark page, riverqueue.com/docs/benchmarks), LISTEN/NOTIFY
// through riverpgxv5 (not PollOnly), River's default.
var (
	riverMaxWorkers       = flag.Int("river-max-workers", 2000, "the River receiver's MaxWorkers (sustained and e2e sections)")
	riverFetchCooldown    = flag.Duration("river-fetch-cooldown", 100*time.Millisecond, "the River receiver's FetchCooldown in the sustained section")
	riverFetchPoll        = flag.Duration("river-fetch-poll-interval", time.Second, "the River receiver's FetchPollInterval in the sustained section")
	riverE2EFetchCooldown = flag.Duration("river-e2e-fetch-cooldown", 2*time.Millisecond, "the River receiver's FetchCooldown in the e2e section")
	riverE2EFetchPoll     = flag.Duration("river-e2e-fetch-poll-interval", 20*time.Millisecond, "the River receiver's FetchPollInterval in the e2e section")
)

// riverConfig is one set of the receiver's River settings.
type riverConfig struct {
	maxWorkers    int
	fetchCooldown time.Duration
	fetchPoll     time.Duration
}

// riverForThroughput and riverForLatency are the flags' two sets.
func riverForThroughput() riverConfig {
	return riverConfig{maxWorkers: *riverMaxWorkers, fetchCooldown: *riverFetchCooldown, fetchPoll: *riverFetchPoll}
}

func riverForLatency() riverConfig {
	return riverConfig{maxWorkers: *riverMaxWorkers, fetchCooldown: *riverE2EFetchCooldown, fetchPoll: *riverE2EFetchPoll}
}

const (
	// receiverSchema holds the River receiver's events table and River's
	// own tables.
	receiverSchema = "river_recv"
	// receiverInsertConns is the pool the HTTP handler's transactions use,
	// as Inlet's in-process ingress pool in the same measurements;
	// receiverClientConns is River's (fetch, complete, maintenance, LISTEN
	// and the workers' body reads).
	receiverInsertConns = 64
	receiverClientConns = 64
	receiverMaxBody     = 1 << 20
)

// settings describes the receiver's configuration for the printout and the
// JSON.
func (c riverConfig) settings(handlers int) map[string]string {
	return map[string]string{
		"river":               "v0.51.2, riverpgxv5 (pgx v5), LISTEN/NOTIFY (not PollOnly)",
		"max_workers":         strconv.Itoa(c.maxWorkers),
		"fetch_cooldown":      c.fetchCooldown.String(),
		"fetch_poll_interval": c.fetchPoll.String(),
		"insert_pool_conns":   strconv.Itoa(receiverInsertConns),
		"client_pool_conns":   strconv.Itoa(receiverClientConns),
		"request":             fmt.Sprintf("verify (Inlet's Stripe verifier) → one transaction: INSERT event ON CONFLICT DO NOTHING + InsertManyTx of %d job(s) → COMMIT → 200", handlers),
		"worker":              "SELECT external_event_id, raw_body by id → the no-op handler",
	}
}

// setupReceiverSchema creates the receiver's events table and migrates
// River's tables into receiverSchema, on the database at url. It is
// idempotent.
func setupReceiverSchema(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The events table is what a River user would write: the raw bytes and
	// headers, the dedupe key unique, the id River's job carries.
	if _, err := pool.Exec(ctx, `
		CREATE SCHEMA IF NOT EXISTS `+receiverSchema+`;
		CREATE TABLE IF NOT EXISTS `+receiverSchema+`.events (
		    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		    provider          text        NOT NULL,
		    external_event_id text        NOT NULL,
		    event_type        text,
		    received_at       timestamptz NOT NULL DEFAULT now(),
		    headers           jsonb       NOT NULL,
		    raw_body          bytea       NOT NULL,
		    UNIQUE (provider, external_event_id)
		)`); err != nil {
		return fmt.Errorf("create the River receiver's events table: %w", err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: receiverSchema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate River's schema %s: %w", receiverSchema, err)
	}
	return nil
}

// receiveArgs is the River job of one (event, handler): a reference, as
// Inlet's bus message is.
type receiveArgs struct {
	EventID int64 `json:"event_id"`
	Handler int   `json:"handler"`
}

func (receiveArgs) Kind() string { return "inlet_bench_receive" }

// receiveWorker fetches the event's body by id and calls the handler, as
// Inlet's consumer does.
type receiveWorker struct {
	river.WorkerDefaults[receiveArgs]
	pool   *pgxpool.Pool
	handle func(ctx context.Context, externalID string, body []byte)
}

func (w *receiveWorker) Work(ctx context.Context, job *river.Job[receiveArgs]) error {
	var id string
	var body []byte
	if err := w.pool.QueryRow(ctx, `SELECT external_event_id, raw_body FROM `+receiverSchema+`.events WHERE id = $1`,
		job.Args.EventID).Scan(&id, &body); err != nil {
		return fmt.Errorf("fetch event %d: %w", job.Args.EventID, err)
	}
	w.handle(ctx, id, body)
	return nil
}

// riverReceiver is a webhook receiver built on River: the HTTP handler
// verifies the signature with Inlet's own verifier, stores the event and one
// River job per handler in one transaction and answers 200 after COMMIT.
type riverReceiver struct {
	url      string // where webhooks are posted
	handlers int
	verifier verify.Verifier
	insert   *pgxpool.Pool
	cpool    *pgxpool.Pool
	client   *river.Client[pgx.Tx]
	srv      *http.Server
	once     sync.Once
}

// startRiverReceiver starts the receiver on the database at url (whose
// receiverSchema setupReceiverSchema made), with handlers jobs per event,
// each worked by handle.
func startRiverReceiver(ctx context.Context, url string, rc riverConfig, handlers int, handle func(context.Context, string, []byte), log *slog.Logger) (r *riverReceiver, err error) {
	r = &riverReceiver{handlers: handlers}
	defer func() {
		if err != nil {
			r.stop()
		}
	}()
	if r.verifier, err = verify.New(verify.Config{Type: "stripe", Secrets: []string{stripeSecret}}); err != nil {
		return nil, err
	}
	if r.insert, err = openPool(ctx, url, receiverInsertConns, "inlet-bench-river-receiver"); err != nil {
		return nil, err
	}
	if r.cpool, err = openPool(ctx, url, receiverClientConns, "inlet-bench-river-client"); err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &receiveWorker{pool: r.cpool, handle: handle})
	r.client, err = river.NewClient(riverpgxv5.New(r.cpool), &river.Config{
		Schema:            receiverSchema,
		FetchCooldown:     rc.fetchCooldown,
		FetchPollInterval: rc.fetchPoll,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: rc.maxWorkers}},
		Workers:           workers,
		Logger:            log,
	})
	if err != nil {
		return nil, fmt.Errorf("create the River client: %w", err)
	}
	if err := r.client.Start(ctx); err != nil {
		return nil, fmt.Errorf("start River client: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhooks/stripe", r.receive)
	r.srv = &http.Server{Handler: mux, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	r.url = "http://" + ln.Addr().String() + "/webhooks/stripe"
	return r, nil
}

func openPool(ctx context.Context, url string, conns int32, name string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = conns
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	return pgxpool.NewWithConfig(ctx, cfg)
}

// receive is the receiver's HTTP handler: 401 on a bad signature, 503 when
// the event could not be stored, 200 once committed (or a duplicate).
func (r *riverReceiver) receive(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, receiverMaxBody))
	if err != nil {
		http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	res, err := r.verifier.Verify(&verify.Request{Header: req.Header, Body: body})
	if err != nil {
		http.Error(w, "signature", http.StatusUnauthorized)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
	defer cancel()
	stored, err := r.store(ctx, res, req.Header, body)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "not stored", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if !stored {
		_, _ = io.WriteString(w, `{"status":"duplicate"}`)
		return
	}
	_, _ = io.WriteString(w, `{"status":"stored"}`)
}

// store inserts the event and its River jobs in one transaction; false
// means the event was already stored (nothing new is written).
func (r *riverReceiver) store(ctx context.Context, res verify.Result, header http.Header, body []byte) (bool, error) {
	tx, err := r.insert.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	var id int64
	err = tx.QueryRow(ctx, `INSERT INTO `+receiverSchema+`.events (provider, external_event_id, event_type, headers, raw_body)
		VALUES ('stripe', $1, $2, $3, $4) ON CONFLICT (provider, external_event_id) DO NOTHING RETURNING id`,
		res.EventID, res.EventType, header, body).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, tx.Commit(ctx)
	}
	if err != nil {
		return false, fmt.Errorf("insert event %s: %w", res.EventID, err)
	}
	params := make([]river.InsertManyParams, r.handlers)
	for h := range params {
		params[h] = river.InsertManyParams{Args: receiveArgs{EventID: id, Handler: h}}
	}
	if _, err := r.client.InsertManyTx(ctx, tx, params); err != nil {
		return false, fmt.Errorf("insert River jobs of event %d: %w", id, err)
	}
	return true, tx.Commit(ctx)
}

// stop closes the listener, stops River (letting running jobs finish) and
// closes the pools.
func (r *riverReceiver) stop() {
	r.once.Do(func() {
		if r.srv != nil {
			_ = r.srv.Close()
		}
		if r.client != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := r.client.Stop(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "bench: stop River receiver:", err)
			}
			cancel()
		}
		if r.cpool != nil {
			r.cpool.Close()
		}
		if r.insert != nil {
			r.insert.Close()
		}
	})
}

// riverEndToEnd is endToEnd for the River receiver with one handler, on the
// run's database.
func riverEndToEnd(ctx context.Context, b *bench, rate int, d time.Duration) (Latency, error) {
	if err := setupReceiverSchema(ctx, b.url); err != nil {
		return Latency{}, err
	}
	c := newCalls()
	r, err := startRiverReceiver(ctx, b.url, riverForLatency(), 1, c.record, b.log)
	if err != nil {
		return Latency{}, err
	}
	defer r.stop()
	m, err := b.startMeter(ctx, b.url)
	if err != nil {
		return Latency{}, err
	}
	defer m.close()
	l := measureLatency(ctx, r.url, fmt.Sprintf("evt_e2e_river_%d_", time.Now().UnixNano()), rate, d, c)
	l.System, l.Wake = "river", "river"
	r.stop()
	if l.Cost, err = m.finish(ctx, int64(l.Delivered)); err != nil {
		return l, err
	}
	return l, nil
}
