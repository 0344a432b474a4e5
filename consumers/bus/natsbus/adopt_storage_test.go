package natsbus_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/internal/natstest"
)

// TestMemoryStreamRecreatedByAConsumerKeepsItsStorage (review helper-224, fixed).
// Defect: with `bus.storage: memory` on the streamer and a consumer program
// opened as docs/pipeline.md shows (natsbus.Config{URL, Name}: no Storage,
// no Replicas, so it "adopts" the stream), a NATS restart loses INLET_JOBS
// and the consumer's subscription check recreates it first (the streamer
// only recreates it on a failed publish, and an idle streamer publishes
// nothing). It recreates it with its own defaults, file storage
// (consumers/bus/natsbus/nats.go: restoreConsumer -> ensureStream with
// adopt=true, which makes a missing stream with cfg.Storage "file"). The
// operator's memory stream silently becomes a file stream, and the next
// start of the streamer fails: its CreateOrUpdateStream(memory) is refused
// ("can not change storage type"), so `inlet streamer` cannot start again
// until someone deletes the stream by hand. docs/configuration.md says of
// bus.storage memory: "a NATS restart loses the references in it; the
// services recreate the stream and their durables" — it does not say the
// restart changes the stream's storage and blocks the streamer's restart.
// Setup: one nats-server; a streamer-side bus with Storage "memory"; a
// consumer-side bus with only URL and Name, subscribed to a handler's
// topic. The server is killed and restarted; nothing is published.
// Expected: the stream the services recreate is a memory stream (as the
// operator configured it), and the streamer starts again.
// Observed: within ~1 s of the restart the consumer recreated INLET_JOBS
// with file storage, and natsbus.New with Storage "memory" then fails:
// "create or update JetStream stream INLET_JOBS at nats://… (is JetStream
// enabled, nats-server -js?): nats: API error: code=500 err_code=10052
// description=stream configuration update can not change storage type"
// (its hint about -js is misleading as well).
// Fixed: a process in adopt mode remembers the settings of the stream it
// found (storage, replicas, max age from js.Stream's info; looked up again
// whenever it makes a durable) and makes a lost stream again with those
// (NATS.stream, ensureStream, learnStream); a stream of other storage than bus.storage
// fails New saying to stop every service and delete the stream, and the
// -js hint is kept for errors that say JetStream is not there.
func TestMemoryStreamRecreatedByAConsumerKeepsItsStorage(t *testing.T) {
	srv := natstest.Start(t)
	quiet := slog.New(slog.DiscardHandler)
	streamer, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), Name: "inlet-streamer", Storage: "memory", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { streamer.Close() })
	consumer, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), Name: "billing", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { consumer.Close() })
	_ = receive(t, consumer, bus.Topic("billing"))

	side := func() jetstream.JetStream {
		nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	js := side()
	info, err := js.Stream(context.Background(), natsbus.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if st := info.CachedInfo().Config.Storage; st != jetstream.MemoryStorage {
		t.Fatalf("control: the streamer made a %v stream, want memory", st)
	}

	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	js = side()
	// The consumer's subscription notices the lost stream and durable and
	// recreates them (its check runs every 5 s, or on a consume error).
	var stream jetstream.Stream
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		stream, err = js.Stream(ctx, natsbus.StreamName)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no service recreated %s within 60 s after the NATS restart: %v", natsbus.StreamName, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	got := stream.CachedInfo().Config.Storage

	// The streamer restarts (a deploy, a crash): it opens the bus with its
	// configuration, bus.storage memory.
	streamer.Close()
	again, nerr := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), Name: "inlet-streamer", Storage: "memory", Logger: quiet})
	if nerr == nil {
		t.Cleanup(func() { again.Close() })
	}
	if got != jetstream.MemoryStorage || nerr != nil {
		t.Fatalf("after a NATS restart the consumer (natsbus.Config without Storage) recreated %s with %v storage, "+
			"though the streamer configured memory; the streamer's next start then fails: %v",
			natsbus.StreamName, got, nerr)
	}
}

// TestStreamerWithMemoryStorageStartsAfterAConsumerMadeTheStream (review
// helper-224, fixed): on a fresh NATS an SDK consumer (no Storage, no
// Replicas) starts before the streamer and makes INLET_JOBS with the
// defaults, file storage. The streamer with bus.storage memory then failed
// to start ("can not change storage type") until someone deleted the
// stream by hand.
// Fixed: a stream made in adopt mode is marked (metadata inlet.defaults);
// a process with settings of its own replaces a marked stream whose
// storage differs (a consumer's check leaves such a stream, lost, to the
// streamer for a second, so as not to make it again between the delete and
// the make), and the consumer recreates its durable on the new stream and
// learns its settings, which it keeps across a NATS restart.
func TestStreamerWithMemoryStorageStartsAfterAConsumerMadeTheStream(t *testing.T) {
	srv := natstest.Start(t)
	quiet := slog.New(slog.DiscardHandler)
	consumer, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), Name: "billing", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { consumer.Close() })
	refs := receive(t, consumer, bus.Topic("billing"))

	streamer, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), Name: "inlet-streamer", Storage: "memory", Logger: quiet})
	if err != nil {
		t.Fatalf("the streamer (bus.storage memory) cannot start after a consumer made %s with the defaults: %v", natsbus.StreamName, err)
	}
	t.Cleanup(func() { streamer.Close() })
	if st := streamStorage(t, srv.URL()); st != jetstream.MemoryStorage {
		t.Fatalf("after the streamer's start %s has %v storage, want memory", natsbus.StreamName, st)
	}
	// The consumer's durable went with the replaced stream: its
	// subscription makes it again on the new one.
	deliveredAfter(t, streamer, refs, 1)

	// The consumer learned the new stream's settings: a NATS restart
	// loses the memory stream, and what comes back is a memory stream.
	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if st, ok := lookupStorage(srv.URL()); ok {
			if st != jetstream.MemoryStorage {
				t.Fatalf("after a NATS restart the consumer recreated %s with %v storage, want memory (the streamer's)", natsbus.StreamName, st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no service recreated %s within 60 s after the NATS restart", natsbus.StreamName)
		}
		time.Sleep(100 * time.Millisecond)
	}
	deliveredAfter(t, streamer, refs, 2)
}

// TestStorageMismatchSaysToDeleteTheStream: a process whose bus.storage is
// not that of the stream the streamer made fails to start saying what to
// do (stop every service and delete the stream), not blaming JetStream's
// configuration (review helper-224, fixed).
func TestStorageMismatchSaysToDeleteTheStream(t *testing.T) {
	srv := natstest.Start(t)
	quiet := slog.New(slog.DiscardHandler)
	streamer, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), Name: "inlet-streamer", Storage: "file", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { streamer.Close() })
	other, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), Name: "inlet-consumer", Storage: "memory", Logger: quiet})
	if err == nil {
		other.Close()
		t.Fatalf("a process with bus.storage memory started against the streamer's file stream %s", natsbus.StreamName)
	}
	msg := err.Error()
	if strings.Contains(msg, "-js") || !strings.Contains(msg, "nats stream rm "+natsbus.StreamName) || !strings.Contains(msg, "file storage") {
		t.Fatalf("storage mismatch error %q: want the stream's storage and how to switch (nats stream rm %s), no -js hint", msg, natsbus.StreamName)
	}
	if st := streamStorage(t, srv.URL()); st != jetstream.FileStorage {
		t.Fatalf("the refused start changed %s to %v storage", natsbus.StreamName, st)
	}
}

// deliveredAfter publishes job id on the streamer and waits for refs to
// get it (a subscription's check recreates a lost durable within ~5 s).
func deliveredAfter(t *testing.T, streamer *natsbus.NATS, refs <-chan bus.Ref, id int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		// A publish may fail while the stream is away (the streamer
		// recreates it then); the lease would republish, as here.
		msg, err := bus.NewMessage(bus.Ref{JobID: int64(id), EventID: 1, Handler: "billing", Provider: "p", Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		_ = streamer.Publish(bus.Topic("billing"), msg)
		select {
		case r := <-refs:
			if r.JobID == int64(id) {
				return
			}
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d not delivered to the consumer within 60 s", id)
		}
	}
}

// lookupStorage is INLET_JOBS' storage, ok false while there is none.
func lookupStorage(url string) (jetstream.StorageType, bool) {
	nc, err := nats.Connect(url)
	if err != nil {
		return 0, false
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, natsbus.StreamName)
	if err != nil {
		return 0, false
	}
	return s.CachedInfo().Config.Storage, true
}

// streamStorage is INLET_JOBS' storage; the stream must exist.
func streamStorage(t *testing.T, url string) jetstream.StorageType {
	t.Helper()
	st, ok := lookupStorage(url)
	if !ok {
		t.Fatalf("no stream %s at %s", natsbus.StreamName, url)
	}
	return st
}
