// Command example is a consumer service built on Inlet's consumer SDK: the way
// a platform team adds its own handlers without touching ingress. It declares
// two handlers, registers their subscriptions when it starts, and takes their
// jobs from NATS JetStream (where `inlet streamer` publishes them).
//
//	go run ./consumers/example --database-url "$DATABASE_URL" --nats-url nats://127.0.0.1:4222
//
// Run several copies: replicas of a handler share its jobs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	dbURL := fs.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (login role must be a member of webhook_worker)")
	natsURL := fs.String("nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	// Only the public SDK: this could be any module's main package.
	pool, err := consumers.OpenPool(ctx, *dbURL, "example-consumer")
	if err != nil {
		return err
	}
	defer pool.Close()
	nats, err := natsbus.New(ctx, natsbus.Config{URL: *natsURL, Name: "example-consumer", Logger: log})
	if err != nil {
		return err
	}
	defer nats.Close()

	svc, err := consumers.New(consumers.Config{
		Pool:       pool,
		Subscriber: nats,
		Logger:     log,
		Handlers: []consumers.Handler{
			{
				// Paid invoices unlock the customer's plan.
				Name: "example-invoices", Provider: "stripe", EventType: "invoice.*",
				MaxAttempts: 10, Timeout: 30 * time.Second, Func: handleInvoice,
			},
			{
				// Every GitHub push, with its own retries.
				Name: "example-pushes", Provider: "github", EventType: "push", Func: handlePush,
			},
		},
	})
	if err != nil {
		return err
	}
	if err := svc.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	drain, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return svc.Stop(drain)
}

// handleInvoice reads the verified Stripe event. The job id is the
// idempotency key: a redelivery of the same job must not act twice.
func handleInvoice(ctx context.Context, e *consumers.Event) error {
	var ev struct {
		Type string `json:"type"`
		Data struct {
			Object struct {
				ID string `json:"id"`
			} `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(e.Body, &ev); err != nil {
		// Retrying cannot fix a body that does not parse.
		return consumers.Permanent(fmt.Errorf("decode stripe event %d: %w", e.EventID, err))
	}
	if ev.Data.Object.ID == "" {
		return consumers.Permanent(errors.New("stripe event without data.object.id"))
	}
	slog.InfoContext(ctx, "invoice event", slog.String("type", ev.Type), slog.String("idempotency_key", e.IdempotencyKey()))
	return nil
}

func handlePush(ctx context.Context, e *consumers.Event) error {
	slog.InfoContext(ctx, "push", slog.Int64("event_id", e.EventID), slog.Int("bytes", len(e.Body)))
	return nil
}
