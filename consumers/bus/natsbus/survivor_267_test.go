package natsbus_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/internal/natstest"
)

// streamConfig267 is INLET_JOBS' configuration as the server has it, waiting
// up to 60 s for the stream to be there (a service may be recreating it).
func streamConfig267(t *testing.T, url string) jetstream.StreamConfig {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		cfg, err := lookupStreamConfig267(url)
		if err == nil {
			return cfg
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stream %s at %s within 60 s: %v", natsbus.StreamName, url, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the server
	}
}

func lookupStreamConfig267(url string) (jetstream.StreamConfig, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return jetstream.StreamConfig{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return jetstream.StreamConfig{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, natsbus.StreamName)
	if err != nil {
		return jetstream.StreamConfig{}, err
	}
	return s.CachedInfo().Config, nil
}

// TestSurvivor267_StreamAndDurableTakeTheConfiguredSettings: the stream a
// service makes has Config.MaxAge ("MaxAge bounds how long an unconsumed
// reference stays in the stream") and work-queue retention, and a
// subscription's durable waits Config.AckWait for an acknowledgement, not
// the default.
//
// Mutants: consumers/bus/natsbus/nats.go streamConfig, the line
// `MaxAge: cfg.MaxAge,` deleted (NATS's zero: references kept forever);
// consumerConfig, `AckWait: n.ackWait` replaced by 30 * time.Second (the
// default whatever the configuration says). Existing tests missed the first:
// they read back only the stream's storage and replicas, and none sets
// MaxAge.
func TestSurvivor267_StreamAndDurableTakeTheConfiguredSettings(t *testing.T) {
	srv := natstest.Start(t)
	quiet := slog.New(slog.DiscardHandler)
	const maxAge, ackWait = 90 * time.Minute, 7 * time.Second
	n, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), Name: "inlet-streamer", Storage: "file",
		MaxAge: maxAge, AckWait: ackWait, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	cfg := streamConfig267(t, srv.URL())
	if cfg.MaxAge != maxAge {
		t.Fatalf("%s has max age %v, want the configured %v", natsbus.StreamName, cfg.MaxAge, maxAge)
	}
	if cfg.Retention != jetstream.WorkQueuePolicy {
		t.Fatalf("%s has retention %v, want work queue", natsbus.StreamName, cfg.Retention)
	}

	topic := bus.Topic("billing")
	_ = receive(t, n, topic)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, natsbus.StreamName, natsbus.DurableName(topic))
	if err != nil {
		t.Fatalf("the subscription's durable %s: %v", natsbus.DurableName(topic), err)
	}
	if got := c.CachedInfo().Config.AckWait; got != ackWait {
		t.Fatalf("durable %s has AckWait %v, want the configured %v", natsbus.DurableName(topic), got, ackWait)
	}
	if got := c.CachedInfo().Config.AckPolicy; got != jetstream.AckExplicitPolicy {
		t.Fatalf("durable %s has ack policy %v, want explicit", natsbus.DurableName(topic), got)
	}
}

// TestSurvivor267_AdoptedStreamComesBackWithItsMaxAge: a consumer without
// bus settings (adopt mode) that recreates the stream after a NATS restart
// makes it with the settings of the stream it found, max age included
// (Config.Replicas: "made again with the settings of the stream last
// found").
//
// Mutant: consumers/bus/natsbus/nats.go adopted, `MaxAge: found.MaxAge`
// replaced by 24 * time.Hour (the default): the streamer's max age is lost
// whenever a consumer recreates the stream. Existing tests missed it: the
// adopt-mode tests (adopt_storage_test.go) check only the recreated
// stream's storage, and their streams have the default max age anyway.
func TestSurvivor267_AdoptedStreamComesBackWithItsMaxAge(t *testing.T) {
	srv := natstest.Start(t)
	quiet := slog.New(slog.DiscardHandler)
	const maxAge = 3 * time.Hour
	streamer, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), Name: "inlet-streamer", Storage: "memory",
		MaxAge: maxAge, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), Name: "billing", Logger: quiet})
	if err != nil {
		streamer.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { consumer.Close() })
	_ = receive(t, consumer, bus.Topic("billing"))
	if got := streamConfig267(t, srv.URL()).MaxAge; got != maxAge {
		streamer.Close()
		t.Fatalf("control: the streamer made %s with max age %v, want %v", natsbus.StreamName, got, maxAge)
	}
	// Only the consumer is left to make the stream again.
	streamer.Close()
	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	cfg := streamConfig267(t, srv.URL())
	if cfg.Storage != jetstream.MemoryStorage || cfg.MaxAge != maxAge {
		t.Fatalf("after a NATS restart the consumer made %s again with %v storage and max age %v, want memory and %v (the stream it found)",
			natsbus.StreamName, cfg.Storage, cfg.MaxAge, maxAge)
	}
}
