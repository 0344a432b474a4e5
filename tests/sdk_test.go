package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// What a team pays for the consumer SDK. Before it was a module of its own,
// `go list -deps ./consumers` listed 304 non-standard packages (69 of them
// gRPC: the OTLP exporter) and a module importing it listed 268 modules.
const (
	// maxSDKPackages bounds the lines of `go list -deps ./consumers` that
	// contain a dot: non-standard packages, and the standard library's
	// vendored golang.org/x ones. 75 when this was written.
	maxSDKPackages = 90
	// maxHelloModules bounds `go list -m all` of a hello-world consumer
	// module outside the repository. 59 when this was written: most are the
	// requirements of watermill's and watermill-nats's go.mod (Prometheus client,
	// chi, protobuf), listed though none of their packages is built. 60 with
	// golang.org/x/time (a rate-limited handler's start pacing; it requires
	// nothing).
	maxHelloModules = 61
)

// sdkModules are the repository's modules a consumer program requires: the
// SDK and the small modules it shares with the server.
var sdkModules = []string{"consumers", "internal/database", "internal/groupcommit", "schema"}

// The consumer SDK stays light: the consumers package pulls no exporter, no
// gRPC, no Prometheus client and no CEL compiler (the program picks those),
// and a consumer program in a module of its own requires a few dozen modules,
// none of them Inlet's server.
func TestSDKStaysLight(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}

	deps := goCmd(t, root, nil, "list", "-deps", "./consumers")
	var nonStd []string
	for _, p := range strings.Fields(deps) {
		if strings.Contains(p, ".") {
			nonStd = append(nonStd, p)
		}
	}
	if len(nonStd) > maxSDKPackages {
		t.Errorf("go list -deps ./consumers: %d packages with a dot, want at most %d:\n%s", len(nonStd), maxSDKPackages, strings.Join(nonStd, "\n"))
	}
	for _, p := range nonStd {
		switch {
		case strings.Contains(p, "grpc"),
			strings.HasPrefix(p, "go.opentelemetry.io/otel/sdk"),
			strings.HasPrefix(p, "go.opentelemetry.io/otel/exporters"),
			strings.HasPrefix(p, "github.com/prometheus/"),
			strings.HasPrefix(p, "cel.dev/"),
			strings.HasPrefix(p, "github.com/nats-io/"): // NATS is consumers/bus/natsbus's, not the core package's
			t.Errorf("package consumers depends on %s", p)
		case strings.HasPrefix(p, "github.com/inlet-dev/inlet/") && !inSDKModules(p):
			t.Errorf("package consumers depends on %s, a package of Inlet's server module", p)
		}
	}

	// A hello-world consumer service in a module of its own, as a team
	// writes one: the replace lines stand in for published versions.
	dir := t.TempDir()
	var mod strings.Builder
	mod.WriteString("module example.com/hello\n\ngo 1.26\n\nrequire github.com/inlet-dev/inlet/consumers v0.0.0-00010101000000-000000000000\n\n")
	// The server's module is replaced too, so that a requirement on it shows
	// up as its hundreds of modules below rather than as a download error.
	mod.WriteString("replace github.com/inlet-dev/inlet => " + root + "\n")
	for _, m := range sdkModules {
		mod.WriteString("replace github.com/inlet-dev/inlet/" + m + " => " + filepath.Join(root, m) + "\n")
	}
	writeFile(t, dir, "go.mod", mod.String())
	// The SDK's checksums, so that resolving needs no checksum database.
	sum, err := os.ReadFile(filepath.Join(root, "consumers", "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "go.sum", string(sum))
	writeFile(t, dir, "main.go", helloConsumer)
	env := []string{"GOWORK=off", "GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod")}
	goCmd(t, dir, env, "build", "-o", filepath.Join(dir, "hello"), ".")
	mods := strings.Split(strings.TrimSpace(goCmd(t, dir, env, "list", "-m", "all")), "\n")
	if len(mods) >= maxHelloModules {
		t.Errorf("hello-world consumer: go list -m all lists %d modules, want fewer than %d:\n%s", len(mods), maxHelloModules, strings.Join(mods, "\n"))
	}
	for _, m := range mods {
		if strings.HasPrefix(m, "github.com/inlet-dev/inlet ") {
			t.Errorf("hello-world consumer requires Inlet's server module: %s", m)
		}
	}
	t.Logf("go list -deps ./consumers: %d packages with a dot; hello-world consumer: %d modules", len(nonStd), len(mods))
}

func inSDKModules(pkg string) bool {
	for _, m := range sdkModules {
		if p := "github.com/inlet-dev/inlet/" + m; pkg == p || strings.HasPrefix(pkg, p+"/") {
			return true
		}
	}
	return false
}

// goCmd runs the go command in dir with env added and returns its stdout.
func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return string(out)
}

// helloConsumer is the smallest consumer service: a pool, the NATS
// transport, one handler.
const helloConsumer = `package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := consumers.OpenPool(ctx, os.Getenv("DATABASE_URL"), "hello")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	sub, err := natsbus.New(ctx, natsbus.Config{URL: os.Getenv("NATS_URL"), Name: "hello"})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	svc, err := consumers.New(consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{{
		Name: "hello",
		Func: func(ctx context.Context, e *consumers.Event) error {
			slog.InfoContext(ctx, "hello", slog.Int64("event_id", e.EventID))
			return nil
		},
	}}})
	if err != nil {
		panic(err)
	}
	if err := svc.Start(ctx); err != nil {
		panic(err)
	}
	<-ctx.Done()
	_ = svc.Stop(context.Background())
}
`
