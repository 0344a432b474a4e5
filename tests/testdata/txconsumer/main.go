// Command txconsumer is a consumer service with one transactional handler,
// built by the end-to-end tests (exactlyonce_test.go) to be killed between
// its handler's writes and their commit. Its handler "ledger" inserts one
// row per run into public.ledger in the transaction that completes the job.
// With --hold it prints "wrote job N" after writing and then waits until the
// process is killed, so the writes are never committed.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "txconsumer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("txconsumer", flag.ContinueOnError)
	dbURL := fs.String("database-url", "", "PostgreSQL URL")
	natsURL := fs.String("nats-url", "", "NATS server URL")
	hold := fs.Bool("hold", false, "after writing, wait until killed instead of returning")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	pool, err := consumers.OpenPool(ctx, *dbURL, "txconsumer")
	if err != nil {
		return err
	}
	defer pool.Close()
	nats, err := natsbus.New(ctx, natsbus.Config{URL: *natsURL, Name: "txconsumer", Logger: log})
	if err != nil {
		return err
	}
	defer nats.Close()
	svc, err := consumers.New(consumers.Config{
		Pool: pool, Subscriber: nats, Logger: log, LeaseExtend: time.Second,
		Handlers: []consumers.Handler{{Name: "ledger", Timeout: 10 * time.Minute,
			TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
				if _, err := tx.Exec(ctx, `INSERT INTO public.ledger (event_id, job_id, attempt) VALUES ($1, $2, $3)`,
					e.EventID, e.JobID, e.Attempt); err != nil {
					return err
				}
				if *hold {
					fmt.Printf("wrote job %d\n", e.JobID)
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			}}},
	})
	if err != nil {
		return err
	}
	if err := svc.Start(ctx); err != nil {
		return err
	}
	fmt.Println("txconsumer ready")
	<-ctx.Done()
	drain, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return svc.Stop(drain)
}
