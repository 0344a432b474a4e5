package consumers_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestOneStalledDurableLeavesOutOnlyItsHandlersLiveness (review helper-251, fixed).
//
// Defect: since 7eb52e2 a consumer service writes no liveness at all while
// its Subscriber's Healthy is not nil (consumers/alive.go: sayAliveLocked
// returns errBusDown before writing ConsumerAlive for any handler), and
// natsbus's Healthy is not nil as soon as ONE handler's durable is stalled
// (consumers/bus/natsbus/nats.go: Healthy joins n.stalled, set by
// existingConsumer/resume for that durable only). So when a single
// handler's durable is lost and cannot be made again (an account or stream
// consumer limit reached, NATS credentials allowed to consume but not to
// create that consumer), every other handler of the service, whose durables
// consume normally, also loses its liveness: within three AliveIntervals
// the streamer holds those handlers quiet (CountLeasedJobs quiet = true;
// streamer/inflight.go recount) and leases none of their jobs, for as
// long as the one durable stays stalled.
// Before 7eb52e2 the other handlers ran on; the commit meant a consumer
// "cut off from NATS" to count as down (docs/pipeline.md), not a consumer
// whose every other path works. Handler isolation ("handler A failing never
// retries handler B", DESIGN.md) is broken the other way round: handler A's
// bus problem stops handler B.
//
// Setup: real NATS and PostgreSQL. INLET_JOBS is made (as an operator or the
// account's JetStream limits would) with max_consumers 4: exactly the four
// durables of a service with handlers a and b (each handler's topic and its
// role topic). The service (AliveInterval 200 ms) starts on a natsbus that
// adopts the stream. Then a's durable is deleted and another consumer takes
// the freed slot, so the transport cannot make it again: Healthy reports
// a's durable stalled. b's durables are untouched.
//
// Expected: the service keeps recording its liveness for b (b's durables
// consume), so b stays runnable: b's seen_at moves on and b is not quiet
// for the streamer.
// Observed: b's seen_at never moves after a's durable stalls (no write in
// 5.07 s, 25 AliveIntervals; alive_until passed); CountLeasedJobs reports b
// quiet, so a streamer leases none of b's jobs. Healthy: "the bus:
// JetStream consumer inlet_a stopped consuming and cannot be looked up:
// ... consumer not found"; the service logged "the bus is not delivering
// to this consumer" and wrote nothing more for a or b.
//
// Fixed by helper-258: natsbus tells its connection (ConnectionHealthy)
// from its subscriptions not consuming (Stalled, by topic); sayAliveLocked
// (consumers/alive.go, busReach) skips the whole write only while the
// connection is down, and otherwise leaves out only the handlers one of
// whose topics is stalled, as it leaves out a scoped role's refused ones.
// The test also checks that a goes quiet meanwhile, and that it is alive
// again once its durable consumes again (the alive loop asks the bus every
// 100 ms while a handler is left out); TestTakeOfAHandlerLeftOutExtendsItsLease
// covers a reference of a left-out handler that still arrives.
func TestOneStalledDurableLeavesOutOnlyItsHandlersLiveness(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := natstest.Start(t)
	ctx := context.Background()

	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The stream as the operator (or the account's limits) made it: room for
	// the service's four durables.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: natsbus.StreamName, Subjects: []string{bus.TopicPrefix + ">"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, MaxConsumers: 4,
	}); err != nil {
		t.Fatal(err)
	}
	consumerBus, err := natsbus.New(ctx, natsbus.Config{URL: srv.URL(), Name: "consumer", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { consumerBus.Close() })

	cfg := b.config(
		consumers.Handler{Name: "a", Func: ok},
		consumers.Handler{Name: "b", Func: ok},
	)
	cfg.Subscriber = consumerBus
	cfg.AliveInterval = 200 * time.Millisecond
	svc := b.start(t, cfg)
	if err := svc.Healthy(); err != nil {
		t.Fatalf("control: the service is not healthy after Start: %v", err)
	}
	stream, err := js.Stream(ctx, natsbus.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	lister := stream.ListConsumers(ctx)
	var durables []string
	for ci := range lister.Info() {
		durables = append(durables, ci.Name)
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	if len(durables) != 4 {
		t.Fatalf("control: the service made durables %v, want 4 (the stream's max_consumers)", durables)
	}

	seenB := func() (time.Time, bool) {
		var seen time.Time
		var alive bool
		if err := b.Admin.QueryRow(ctx, `SELECT seen_at, alive_until > now()
			FROM webhook_ingress.consumers WHERE handler = 'b' AND worker_id = 'test-worker'`).Scan(&seen, &alive); err != nil {
			t.Fatal(err)
		}
		return seen, alive
	}
	if _, alive := seenB(); !alive {
		t.Fatal("control: b not alive after Start")
	}

	// a's durable is lost, and its slot taken before the transport can make
	// it again (a lost race is retried: the durable is deleted again).
	durA := natsbus.DurableName(bus.Topic("a"))
	testwait.Eventually(t, wait, "a's durable deleted and its slot taken", func() (bool, string) {
		if err := js.DeleteConsumer(ctx, natsbus.StreamName, durA); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return false, "delete: " + err.Error()
		}
		if _, err := js.CreateOrUpdateConsumer(ctx, natsbus.StreamName, jetstream.ConsumerConfig{
			Durable: "other-app", FilterSubject: bus.TopicPrefix + "zz-other-app", AckPolicy: jetstream.AckExplicitPolicy,
		}); err != nil {
			return false, "the transport made a's durable again first: " + err.Error()
		}
		return true, ""
	})
	testwait.Eventually(t, wait, "Healthy to report a's durable stalled", func() (bool, string) {
		err := svc.Healthy()
		return err != nil && strings.Contains(err.Error(), durA), "Healthy: " + errString(err)
	})
	stalledAt := time.Now()
	t.Logf("Healthy once a's durable stalled: %v", svc.Healthy())
	// Control: b's durables are there and consume (nothing else changed).
	for _, topic := range []string{bus.Topic("b"), bus.RoleTopic("b", "")} {
		if _, err := js.Consumer(ctx, natsbus.StreamName, natsbus.DurableName(topic)); err != nil {
			t.Fatalf("control: b's durable for %s: %v", topic, err)
		}
	}
	seenAtStall, _ := seenB()

	// b's liveness must go on being written (every 200 ms): 5 s is 25
	// AliveIntervals.
	moved := false
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if s, _ := seenB(); s.After(seenAtStall) {
			moved = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	// What the streamer then does with b (streamer/inflight.go recount:
	// a quiet handler is held, none of its jobs leased).
	var counts []queries.CountLeasedJobsRow
	if err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		var err error
		counts, err = queries.New(tx).CountLeasedJobs(ctx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	bQuiet := slices.ContainsFunc(counts, func(r queries.CountLeasedJobsRow) bool { return r.Handler == "b" && r.Quiet })
	_, aliveB := seenB()
	if !moved || bQuiet {
		t.Errorf("only handler a's durable stalled (Healthy: %v), b's durables consume, yet after %s the service wrote no liveness for b "+
			"(seen_at moved: %v, alive now: %v) and the streamer holds b quiet (leases none of its jobs): %v; "+
			"one handler's bus problem stops every handler of the consumer",
			svc.Healthy(), time.Since(stalledAt).Round(time.Millisecond), moved, aliveB, bQuiet)
	}

	// a's durable does not consume: a's liveness runs out (within three
	// AliveIntervals) and the streamer holds it, as for a stopped consumer.
	quiet := func(handler string) (bool, string) {
		var counts []queries.CountLeasedJobsRow
		if err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
			var err error
			counts, err = queries.New(tx).CountLeasedJobs(ctx)
			return err
		}); err != nil {
			return false, err.Error()
		}
		return slices.ContainsFunc(counts, func(r queries.CountLeasedJobsRow) bool { return r.Handler == handler && r.Quiet }),
			fmt.Sprintf("CountLeasedJobs: %+v", counts)
	}
	testwait.Eventually(t, wait, "a quiet for the streamer while its durable is stalled", func() (bool, string) {
		q, detail := quiet("a")
		return q, detail
	})
	if q, detail := quiet("b"); q {
		t.Errorf("b quiet for the streamer once a's liveness ran out: %s", detail)
	}

	// a's durable can be made again: the transport makes it (at its next
	// check) and consumes it, and a is alive again.
	if err := js.DeleteConsumer(ctx, natsbus.StreamName, "other-app"); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	testwait.Eventually(t, wait, "Healthy once a's durable consumes again", func() (bool, string) {
		err := svc.Healthy()
		return err == nil, "Healthy: " + errString(err)
	})
	testwait.Eventually(t, 2*time.Second, "a alive again once its durable consumes", func() (bool, string) {
		var alive bool
		if err := b.Admin.QueryRow(ctx, `SELECT alive_until > now()
			FROM webhook_ingress.consumers WHERE handler = 'a' AND worker_id = 'test-worker'`).Scan(&alive); err != nil {
			return false, err.Error()
		}
		q, detail := quiet("a")
		return alive && !q, fmt.Sprintf("alive %v, %s", alive, detail)
	})
	t.Logf("a alive again %s after its durable's slot was freed", time.Since(freed).Round(time.Millisecond))
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
