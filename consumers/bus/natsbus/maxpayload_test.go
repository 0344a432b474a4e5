package natsbus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/internal/freeport"
	"github.com/inlet-dev/inlet/internal/natstest"
)

// startNATSMaxPayload runs the harness's nats-server binary with JetStream
// and max_payload set to maxPayload bytes (natstest.Start cannot set it: an
// operator's `max_payload: 64KB` is what these tests stand for), until the
// test ends, and returns its URL once JetStream answers.
func startNATSMaxPayload(t *testing.T, maxPayload int) string {
	t.Helper()
	bin, err := natstest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listen: \"127.0.0.1:%d\"\nmax_payload: %d\njetstream {\n  store_dir: %q\n}\n",
		port, maxPayload, filepath.Join(dir, "store"))), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start nats-server -c %s: %v", conf, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := nats.Connect(url, nats.Timeout(time.Second))
		if err == nil {
			var js jetstream.JetStream
			if js, err = jetstream.New(nc); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err = js.AccountInfo(ctx)
				cancel()
			}
			got := nc.MaxPayload()
			nc.Close()
			if err == nil {
				if got != int64(maxPayload) {
					t.Fatalf("nats-server -c %s: max_payload is %d, want %d", conf, got, maxPayload)
				}
				return url
			}
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Fatalf("nats-server -c %s exited at start:\n%s", conf, b)
		case <-time.After(50 * time.Millisecond): // the server's port, not a state of ours: nothing to hook
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server -c %s not ready after 30s: %v", conf, err)
		}
	}
}

// bigRefs are n references of handler whose event types are 256 bytes that
// JSON escapes to 6 bytes each ('<' is \u003c): about 1.9 KB a reference,
// the largest the streamer makes.
func bigRefs(handler string, from, n int) []bus.Ref {
	refs := make([]bus.Ref, n)
	leased := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range refs {
		refs[i] = bus.Ref{
			JobID: int64(from + i), EventID: int64(1000 + from + i), Handler: handler, Provider: "stripe",
			EventType: strings.Repeat("<", 256), Attempt: 1,
			EventReceivedAt: leased, LeasedAt: leased, LeaseExpiresAt: leased.Add(time.Minute),
			TraceParent: fmt.Sprintf("00-%032x-%016x-01", from+i+1, from+i+1),
		}
	}
	return refs
}

// delivered is one bus message as a subscriber got it.
type delivered struct {
	uuid     string
	metadata message.Metadata
	refs     []bus.Ref
}

// subscribeRefs subscribes to topic and passes on each message's references.
func subscribeRefs(t *testing.T, n *natsbus.NATS, topic string) <-chan delivered {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := n.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan delivered, 1000)
	go func() {
		for m := range msgs {
			refs, err := bus.ParseRefs(m)
			m.Ack()
			if err != nil {
				t.Errorf("undecodable bus message %s: %v", m.UUID, err)
				continue
			}
			out <- delivered{uuid: m.UUID, metadata: m.Metadata, refs: refs}
		}
	}()
	return out
}

// TestPublishSplitsABatchOverMaxPayload: a batch message larger than the
// server's max_payload is delivered, split into batch messages that each
// fit, every reference exactly once, each part with the original's metadata
// (trace context) and an id of its own.
//
// Regression test (helper-177; it failed before the fix with "publish to
// inlet.jobs.billing: nats: maximum payload exceeded"). PublishContext sent
// each message as it was, never comparing it with the connection's
// MaxPayload: 32 references of ~1.9 KB (the streamer's default
// refs_per_message, event types that JSON escapes) make a ~60 KB message,
// over an operator's max_payload. The streamer gives the leases back and
// claims the same jobs again into the same message: they are never
// delivered, and the streamer spins.
func TestPublishSplitsABatchOverMaxPayload(t *testing.T) {
	const maxPayload = 8 << 10
	url := startNATSMaxPayload(t, maxPayload)
	n, err := natsbus.New(context.Background(), natsbus.Config{URL: url, Name: "inlet-streamer", Replicas: 1, Storage: "file",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	const handler = "billing"
	topic := bus.Topic(handler)
	got := subscribeRefs(t, n, topic)

	refs := bigRefs(handler, 1, 32)
	batch, err := bus.NewBatchMessage(refs)
	if err != nil {
		t.Fatal(err)
	}
	const traceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	batch.Metadata.Set("traceparent", traceParent)
	if len(batch.Payload) <= maxPayload {
		t.Fatalf("the batch is %d bytes, not over max_payload %d: nothing to prove", len(batch.Payload), maxPayload)
	}
	// A small message beside it goes through unchanged.
	small, err := bus.NewBatchMessage(bigRefs(handler, 100, 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.PublishContext(context.Background(), topic, batch, small); err != nil {
		t.Fatalf("publish a %d-byte batch of %d references over max_payload %d: %v", len(batch.Payload), len(refs), maxPayload, err)
	}

	var jobs []int64
	uuids := map[string]bool{}
	deadline := time.After(30 * time.Second)
	for len(jobs) < len(refs)+2 {
		select {
		case d := <-got:
			if uuids[d.uuid] {
				t.Errorf("two messages share id %s: transports that dedupe by id drop one", d.uuid)
			}
			uuids[d.uuid] = true
			isSmall := d.refs[0].JobID >= 100
			if !isSmall && d.metadata.Get("traceparent") != traceParent {
				t.Errorf("part %s of the split batch has traceparent %q, want the original's %q", d.uuid, d.metadata.Get("traceparent"), traceParent)
			}
			if d.metadata.Get("handler") != handler {
				t.Errorf("message %s has handler metadata %q, want %q", d.uuid, d.metadata.Get("handler"), handler)
			}
			for _, r := range d.refs {
				jobs = append(jobs, r.JobID)
				if !isSmall && r != refs[r.JobID-1] {
					t.Errorf("job %d arrived changed: %+v, want %+v", r.JobID, r, refs[r.JobID-1])
				}
			}
		case <-deadline:
			t.Fatalf("after 30s %d of %d references delivered: %v", len(jobs), len(refs)+2, jobs)
		}
	}
	slices.Sort(jobs)
	want := []int64{}
	for i := range 32 {
		want = append(want, int64(i+1))
	}
	want = append(want, 100, 101)
	if !slices.Equal(jobs, want) {
		t.Errorf("delivered jobs %v, want each of %v once", jobs, want)
	}
	if len(uuids) < 3 {
		t.Errorf("the batch arrived in %d messages with the small one: it was not split", len(uuids))
	}
}

// TestPublishRefusesAReferenceOverMaxPayload: one reference larger than
// max_payload alone can never be delivered over this server: PublishContext
// fails naming its job and size, without the reference's content, and sends
// nothing of the publish (the streamer gives every lease back; a part that
// was sent would be a reference of a pending job).
func TestPublishRefusesAReferenceOverMaxPayload(t *testing.T) {
	const maxPayload = 4 << 10
	url := startNATSMaxPayload(t, maxPayload)
	n, err := natsbus.New(context.Background(), natsbus.Config{URL: url, Name: "inlet-streamer", Replicas: 1, Storage: "file",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	const handler = "billing"
	topic := bus.Topic(handler)
	ctx := context.Background()

	refs := bigRefs(handler, 1, 8)
	secretish := "provider-" + strings.Repeat("x", maxPayload)
	refs[5].Provider = secretish // job 6 alone is over max_payload
	batch, err := bus.NewBatchMessage(refs)
	if err != nil {
		t.Fatal(err)
	}
	first, err := bus.NewBatchMessage(bigRefs(handler, 100, 1))
	if err != nil {
		t.Fatal(err)
	}
	perr := n.PublishContext(ctx, topic, first, batch)
	if perr == nil {
		t.Fatal("published a reference larger than max_payload")
	}
	if !errors.Is(perr, nats.ErrMaxPayload) {
		t.Errorf("error %q does not wrap nats.ErrMaxPayload", perr)
	}
	for _, want := range []string{"job 6", strconv.Itoa(maxPayload)} {
		if !strings.Contains(perr.Error(), want) {
			t.Errorf("error %q does not name %q", perr, want)
		}
	}
	if strings.Contains(perr.Error(), "xxxxxxxx") || strings.Contains(perr.Error(), "<<<<") {
		t.Errorf("error carries the reference's content: %q", perr)
	}

	// Nothing of the publish is in the stream.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, natsbus.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("a failed publish left %d messages in the stream: the streamer gives their leases back", info.State.Msgs)
	}

	// A message that is no bus reference, over max_payload: an error naming
	// the message, not its content.
	other := message.NewMessage("not-a-ref", []byte(strings.Repeat("y", maxPayload+1)))
	perr = n.PublishContext(ctx, topic, other)
	if perr == nil || !strings.Contains(perr.Error(), "not-a-ref") || strings.Contains(perr.Error(), "yyyy") {
		t.Errorf("publish of a %d-byte non-reference message: error %v, want one naming message not-a-ref without its payload", len(other.Payload), perr)
	}

	// The headers count: a message whose data and headers (as NATS writes
	// them on the wire) make exactly max_payload is sent, whole, and the
	// server takes it; one byte more is refused before it is sent.
	header := len("NATS/1.0\r\n") + len(wmnats.WatermillUUIDHdr+": exact-fit\r\n") + len("\r\n")
	exact := message.NewMessage("exact-fit", []byte(strings.Repeat("z", maxPayload-header)))
	if err := n.PublishContext(ctx, topic, exact); err != nil {
		t.Errorf("publish of a message of exactly max_payload (%d bytes of data, %d of headers): %v", len(exact.Payload), header, err)
	}
	over := message.NewMessage("exact-fit", []byte(strings.Repeat("z", maxPayload-header+1)))
	if perr := n.PublishContext(ctx, topic, over); perr == nil || !strings.Contains(perr.Error(), "exact-fit is "+strconv.Itoa(maxPayload+1)+" bytes") {
		t.Errorf("publish of a message one byte over max_payload: error %v, want one saying it is %d bytes", perr, maxPayload+1)
	}
}
