package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/freeport"
)

// The shipped defaults' one handler: `inlet dev`'s embedded configuration
// (inletyaml/dev.yaml) subscribes "log" to every event, and the
// separate services run the same.
const defaultsHandler = "log"

func devSettings() map[string]string {
	return map[string]string{
		"process": "the inlet binary (go build ./cmd/inlet): inlet dev, no --config, so its embedded defaults (inletyaml/dev.yaml)",
		"env":     "DATABASE_URL (the run's database), INLET_LISTEN, INLET_METRICS_LISTEN, INLET_ADMIN_LISTEN (free ports), STRIPE_WEBHOOK_SECRET",
		"handler": "log (every event), the defaults' concurrency, pools and batch sizes",
	}
}

func servicesSettings() map[string]string {
	return map[string]string{
		"process": "inlet ingress, inlet streamer, inlet consumer: three processes of the inlet binary over a nats-server (JetStream)",
		"config":  "only what must be set: database_url, listen addresses, source stripe, bus nats, one handler log; everything else at its default",
	}
}

// binary builds the inlet binary once for the section.
func (s *sustainedRun) binary(ctx context.Context) (string, error) {
	if s.bin != "" {
		return s.bin, nil
	}
	bin := filepath.Join(s.dir, "inlet")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/inlet-dev/inlet/cmd/inlet").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build inlet: %w\n%s", err, out)
	}
	s.bin = bin
	return bin, nil
}

// workDir is a new directory for one run's processes: their logs, their
// configuration, and no inlet.yaml for inlet dev to find.
func (s *sustainedRun) workDir(system string) (string, error) {
	s.seq++
	dir := filepath.Join(s.dir, system+"-"+strconv.Itoa(s.seq))
	return dir, os.MkdirAll(dir, 0o755)
}

func freeAddrs(n int) ([]string, error) {
	addrs := make([]string, n)
	for i := range addrs {
		p, err := freeport.Pick()
		if err != nil {
			return nil, err
		}
		addrs[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	return addrs, nil
}

// startDev runs `inlet dev` on its embedded defaults against the database
// at url, as a new user would (with the ports moved off the defaults).
func (s *sustainedRun) startDev(ctx context.Context, url string) (started, error) {
	bin, err := s.binary(ctx)
	if err != nil {
		return started{}, err
	}
	dir, err := s.workDir("dev")
	if err != nil {
		return started{}, err
	}
	addrs, err := freeAddrs(3)
	if err != nil {
		return started{}, err
	}
	cmd := exec.Command(bin, "dev")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url, "INLET_LISTEN="+addrs[0], "INLET_METRICS_LISTEN="+addrs[1],
		"INLET_ADMIN_LISTEN="+addrs[2], "STRIPE_WEBHOOK_SECRET="+stripeSecret)
	p, err := startProcess(cmd, filepath.Join(dir, "dev.log"))
	if err != nil {
		return started{}, fmt.Errorf("inlet dev: %w", err)
	}
	svc := &service{process: p, name: "dev"}
	if err := svc.waitReady("http://"+addrs[1]+"/readyz", time.Minute); err != nil {
		svc.stop()
		return started{}, err
	}
	if err := waitHandler(ctx, url, defaultsHandler, 30*time.Second); err != nil {
		svc.stop()
		return started{}, err
	}
	return started{url: "http://" + addrs[0] + "/webhooks/stripe", stop: svc.stop, pid: p.cmd.Process.Pid}, nil
}

// startServices runs inlet ingress, streamer and consumer as processes over
// a nats-server of their own (a fresh JetStream store, so no reference from
// an earlier run is left in the stream), on a configuration that sets only
// what has no default.
func (s *sustainedRun) startServices(ctx context.Context, url string) (_ started, err error) {
	bin, err := s.binary(ctx)
	if err != nil {
		return started{}, err
	}
	dir, err := s.workDir("services")
	if err != nil {
		return started{}, err
	}
	var stops []func()
	stop := func() {
		for _, f := range slices.Backward(stops) {
			f()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	ns, err := startNATSServer(ctx)
	if err != nil {
		return started{}, err
	}
	stops = append(stops, ns.stop)
	addrs, err := freeAddrs(4)
	if err != nil {
		return started{}, err
	}
	cfg := filepath.Join(dir, "inlet.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `
database_url: ${DATABASE_URL}
ingress:
  listen: %q
  metrics_listen: %q
sources:
  - name: stripe
    type: stripe
    secrets: [%q]
bus:
  kind: nats
  url: %q
streamer:
  health_listen: %q
consumer:
  health_listen: %q
  handlers:
    - name: %s
      type: log
`, addrs[0], addrs[1], stripeSecret, ns.url, addrs[2], addrs[3], defaultsHandler), 0o600); err != nil {
		return started{}, err
	}
	env := append(os.Environ(), "DATABASE_URL="+url)
	migrate := exec.CommandContext(ctx, bin, "migrate", "--config", cfg)
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		return started{}, fmt.Errorf("inlet migrate: %w\n%s", err, out)
	}
	// The consumer first: starting, it subscribes its handler, and events
	// stored before that get no job. Stopped last first: ingress, then the
	// streamer, then the consumer.
	for _, svc := range []struct{ name, ready string }{
		{"consumer", "http://" + addrs[3] + "/readyz"},
		{"streamer", "http://" + addrs[2] + "/readyz"},
		{"ingress", "http://" + addrs[1] + "/readyz"},
	} {
		p, err := startService(ctx, bin, svc.name, cfg, dir, env)
		if err != nil {
			return started{}, err
		}
		stops = append(stops, p.stop)
		if err := p.waitReady(svc.ready, time.Minute); err != nil {
			return started{}, err
		}
	}
	if err := waitHandler(ctx, url, defaultsHandler, 30*time.Second); err != nil {
		return started{}, err
	}
	done := false
	return started{url: "http://" + addrs[0] + "/webhooks/stripe", stop: func() {
		if !done {
			done = true
			stop()
		}
	}}, nil
}

// waitHandler waits until handler's subscription is registered.
func waitHandler(ctx context.Context, url, handler string, within time.Duration) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(ctx, `/* bench-monitor */ SELECT count(*) FROM webhook_ingress.subscriptions WHERE handler = $1 AND enabled`, handler).Scan(&n); err != nil {
			return fmt.Errorf("look for the subscription of %s: %w", handler, err)
		}
		if n > 0 {
			return nil
		}
	}
	return fmt.Errorf("handler %s was not subscribed within %s", handler, within)
}
