package natsbus_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/internal/freeport"
	"github.com/inlet-dev/inlet/internal/natstest"
)

// startCluster runs a real three-node JetStream cluster (the real
// nats-server binary of natstest) and returns its client URLs.
func startCluster(t *testing.T) string {
	t.Helper()
	bin, err := natstest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	var cports, rports []int
	for range 3 {
		p, err := freeport.Pick()
		if err != nil {
			t.Fatal(err)
		}
		r, err := freeport.Pick()
		if err != nil {
			t.Fatal(err)
		}
		cports, rports = append(cports, p), append(rports, r)
	}
	var routes []string
	for _, r := range rports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", r))
	}
	var urls []string
	for i := range 3 {
		dir := t.TempDir()
		conf := fmt.Sprintf(`server_name: n%d
listen: 127.0.0.1:%d
jetstream { store_dir: %q }
cluster { name: rv, listen: 127.0.0.1:%d, routes: [%s] }
`, i, cports[i], dir, rports[i], strings.Join(routes, ", "))
		cf := filepath.Join(dir, "n.conf")
		if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		logf, err := os.Create(filepath.Join(dir, "log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-c", cf)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", cports[i]))
	}
	url := strings.Join(urls, ",")
	// Wait for a JetStream meta leader: a stream of 3 replicas can be made.
	deadline := time.Now().Add(60 * time.Second)
	for {
		nc, err := nats.Connect(url, nats.Timeout(time.Second))
		if err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe"}, Replicas: 3})
			if err == nil {
				_ = js.DeleteStream(ctx, "PROBE")
			}
			cancel()
			nc.Close()
			if err == nil {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ready: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A streamer configured with bus.replicas: 3 makes INLET_JOBS R3. A consumer
// service written as docs/pipeline.md shows (natsbus.Config{URL, Name}, no
// Replicas or Storage of its own) then starts and uses the stream as it is.
// (Found by a review: its New updated the shared stream to its defaults, and
// INLET_JOBS dropped to one replica until the next streamer start.)
func TestConsumerStartDoesNotShrinkTheStreamsReplicas(t *testing.T) {
	url := startCluster(t)
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)

	streamer, err := natsbus.New(ctx, natsbus.Config{URL: url, Name: "streamer", Replicas: 3, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer streamer.Close()

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	replicas := func() int {
		s, err := js.Stream(ctx, natsbus.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.Replicas
	}
	if got := replicas(); got != 3 {
		t.Fatalf("streamer made INLET_JOBS with %d replicas, want 3", got)
	}

	// The SDK example's consumer service (docs/pipeline.md, "Your own consumers").
	consumer, err := natsbus.New(ctx, natsbus.Config{URL: url, Name: "billing", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()

	if got := replicas(); got != 3 {
		t.Fatalf("a consumer service's start changed INLET_JOBS from 3 replicas to %d (CreateOrUpdateStream with its own defaults)", got)
	}
}

// Same on one server: a streamer on bus.storage: memory, then the SDK
// example's consumer (Storage unset) starts against that stream. (It could
// not: its New tried to change the stream's storage, which JetStream
// refuses.)
func TestConsumerStartsAgainstAMemoryStream(t *testing.T) {
	srv := natstest.Start(t)
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	streamer, err := natsbus.New(ctx, natsbus.Config{URL: srv.URL(), Name: "streamer", Storage: "memory", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer streamer.Close()
	consumer, err := natsbus.New(ctx, natsbus.Config{URL: srv.URL(), Name: "billing", Logger: quiet})
	if err != nil {
		t.Fatalf("the SDK example's consumer cannot start against the streamer's memory stream: %v", err)
	}
	consumer.Close()
}
