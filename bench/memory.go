package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/freeport"
)

// The memory measurement's load: this many keep-alive connections, each
// posting back to back a Stripe-signed body of exactly memoryBodyBytes.
const (
	memoryConns     = 256
	memoryBodyBytes = 1 << 20
	memoryHandler   = "bench-memory"
	memoryDatabase  = "inlet_bench_memory"
)

// ServiceMemory is one inlet process of the memory measurement.
type ServiceMemory struct {
	Service string `json:"service"`
	// PeakRSSMiB is the kernel's high-water mark of the resident set
	// (VmHWM), read just before the process was stopped.
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// SampledRSSMiB is the largest VmRSS seen, sampled every 20ms.
	SampledRSSMiB float64 `json:"sampled_rss_max_mib"`
	// PerSecond is acknowledged webhooks per second (ingress) or jobs
	// completed per second from the first post to the last completion
	// (streamer and consumer, which hand on and run the same jobs).
	PerSecond float64 `json:"per_second"`
	Count     int64   `json:"count"`
	Errors    int64   `json:"errors"`
	// Logged counts the process's warning and error lines by message, with
	// the first one's error attribute.
	Logged map[string]string `json:"logged,omitempty"`
}

// Memory is the memory measurement.
type Memory struct {
	Connections int             `json:"connections"`
	BodyBytes   int             `json:"body_bytes"`
	Duration    string          `json:"duration"`
	Statuses    map[string]int  `json:"statuses"` // ingress answers by status code; "transport" for failed requests
	Drained     bool            `json:"drained"`  // the consumer completed every acknowledged event in time
	Services    []ServiceMemory `json:"services"`
	Excluded    string          `json:"excluded"`
	// Burst is inlet ingress alone under burstConns connections at once.
	Burst *Burst `json:"burst,omitempty"`
}

// runMemory runs inlet ingress, streamer and consumer as separate processes
// (over a real nats-server, on a database of their own), drives ingress with
// memoryConns connections posting 1 MiB bodies for b.duration, waits for the
// consumer to complete every acknowledged event, and reports each process's
// peak resident set. Then the burst: inlet ingress alone under burstConns
// connections posting 1 MiB bodies at once for b.duration.
func runMemory(ctx context.Context, b *bench) (any, error) {
	dir, err := os.MkdirTemp("", "inlet-bench-memory-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	inlet := filepath.Join(dir, "inlet")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", inlet, "github.com/inlet-dev/inlet/cmd/inlet").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build inlet: %w\n%s", err, out)
	}
	ns, err := startNATSServer(ctx)
	if err != nil {
		return nil, err
	}
	defer ns.stop()
	natsURL := ns.url
	dbURL, err := freshDatabase(ctx, b, memoryDatabase)
	if err != nil {
		return nil, err
	}

	// The handler forwards to a target that reads each body and answers 204.
	target := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = target.Serve(tl) }()
	defer target.Close()

	ports := make([]string, 5)
	for i := range ports {
		p, err := freeport.Pick()
		if err != nil {
			return nil, err
		}
		ports[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	ingressAddr := ports[0]
	cfg := filepath.Join(dir, "inlet.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `
database_url: ${DATABASE_URL}
ingress:
  listen: %q
  metrics_listen: %q
  max_body_bytes: %d
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
      type: http-forward
      provider: stripe
      url: %q
      secret: "bench-memory-forward-secret"
log:
  level: warn
`, ingressAddr, ports[1], memoryBodyBytes+64<<10, stripeSecret, natsURL, ports[2], ports[3], memoryHandler,
		"http://"+tl.Addr().String()+"/"), 0o600); err != nil {
		return nil, err
	}
	env := append(os.Environ(), "DATABASE_URL="+dbURL)
	migrate := exec.CommandContext(ctx, inlet, "migrate", "--config", cfg)
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("inlet migrate: %w\n%s", err, out)
	}

	// The consumer first: starting, it subscribes its handler, and events
	// stored before that get no job.
	var procs []*service
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	for _, s := range []struct{ name, ready string }{
		{"consumer", "http://" + ports[3] + "/readyz"},
		{"streamer", "http://" + ports[2] + "/readyz"},
		{"ingress", "http://" + ports[1] + "/readyz"},
	} {
		p, err := startService(ctx, inlet, s.name, cfg, dir, env)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		if err := p.waitReady(s.ready, 30*time.Second); err != nil {
			return nil, err
		}
	}
	if err := waitSubscribed(ctx, dbURL, 30*time.Second); err != nil {
		return nil, err
	}

	start := time.Now()
	acked, statuses := postLarge(ingressAddr, b.duration)
	ackedAt := time.Since(start)

	// Every acknowledged event reaches the handler, or we stop waiting.
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	var events, completed, failed int64
	drained := false
	lastChange, lastDone := time.Now(), int64(-1)
	for deadline := time.Now().Add(max(2*time.Minute, 20*b.duration)); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_ingress.events),
			count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status IN ('failed', 'dead_letter'))
			FROM webhook_ingress.jobs WHERE handler = $1`, memoryHandler).Scan(&events, &completed, &failed); err != nil {
			return nil, err
		}
		if completed != lastDone {
			lastChange, lastDone = time.Now(), completed
		}
		if completed >= events && events >= acked {
			drained = true
			break
		}
	}
	deliveredIn := lastChange.Sub(start)

	m := Memory{Connections: memoryConns, BodyBytes: memoryBodyBytes, Duration: b.duration.String(), Statuses: statuses,
		Drained: drained, Excluded: "nats-server and postgres are not measured"}
	for _, p := range procs {
		hwm, _ := procStatusKiB(p.cmd.Process.Pid, "VmHWM")
		p.stop()
		sm := ServiceMemory{Service: p.name, PeakRSSMiB: float64(hwm) / 1024, SampledRSSMiB: float64(p.maxRSS.Load()) / 1024,
			Logged: logSummary(p.log)}
		switch p.name {
		case "ingress":
			sm.Count, sm.PerSecond = acked, float64(acked)/ackedAt.Seconds()
			for code, n := range statuses {
				if code != "200" {
					sm.Errors += int64(n)
				}
			}
		default:
			sm.Count, sm.PerSecond, sm.Errors = completed, float64(completed)/deliveredIn.Seconds(), failed+max(0, events-completed-failed)
		}
		m.Services = append(m.Services, sm)
	}
	procs = nil
	// ingress, streamer, consumer: the order of the pipeline.
	m.Services[0], m.Services[2] = m.Services[2], m.Services[0]

	fmt.Printf("inlet ingress, streamer and consumer as separate processes over NATS; %d connections posting %d-byte "+
		"Stripe-signed bodies for %s, then until the consumer has completed every event (%s). %s.\n\n",
		memoryConns, memoryBodyBytes, b.duration, map[bool]string{true: "it did", false: "it did NOT in time"}[drained], m.Excluded)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tPEAK RSS MiB (VmHWM)\tMAX SAMPLED RSS MiB\tCOUNT\tPER SECOND\tERRORS")
	for _, s := range m.Services {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%d\t%.1f\t%d\n", s.Service, s.PeakRSSMiB, s.SampledRSSMiB, s.Count, s.PerSecond, s.Errors)
	}
	tw.Flush()
	fmt.Printf("\ningress answers: %v (count: webhooks acknowledged; streamer and consumer: jobs completed)\n", statuses)
	for _, s := range m.Services {
		for msg, first := range s.Logged {
			fmt.Printf("%s logged %s%s\n", s.Service, msg, firstError(first))
		}
	}

	burst, err := runBurst(ctx, b, inlet, dir)
	if err != nil {
		return nil, fmt.Errorf("burst: %w", err)
	}
	m.Burst = burst
	printBurst(burst)
	return m, nil
}

// postLarge drives ingress with memoryConns connections for d, each posting
// its own event (a valid Stripe event JSON padded to memoryBodyBytes), and
// returns how many got their 200 and the answers by status.
func postLarge(addr string, d time.Duration) (int64, map[string]int) {
	url := "http://" + addr + "/webhooks/stripe"
	// Padding that does not compress, so Postgres stores each byte.
	raw := make([]byte, memoryBodyBytes)
	for i := range raw {
		raw[i] = byte(rand.N(256))
	}
	const idWidth = 40
	head := `{"id":"%s","object":"event","api_version":"2024-06-20","created":%d,"type":"invoice.paid","livemode":false,` +
		`"data":{"object":{"id":"in_bench","object":"invoice","currency":"usd","amount_due":2000,"description":"`
	tail := `"}}}`
	headLen := len(fmt.Sprintf(head, strings.Repeat("x", idWidth), time.Now().Unix()))
	pad := base64.RawURLEncoding.EncodeToString(raw)[:memoryBodyBytes-headLen-len(tail)]

	transport := &http.Transport{MaxIdleConnsPerHost: memoryConns, MaxConnsPerHost: memoryConns}
	client := &http.Client{Transport: transport, Timeout: 60 * time.Second}
	defer transport.CloseIdleConnections()
	prefix := fmt.Sprintf("evt_mem_%d_", time.Now().UnixNano())
	var seq, acked atomic.Int64
	var mu sync.Mutex
	statuses := map[string]int{}
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range memoryConns {
		wg.Go(func() {
			for time.Now().Before(stop) {
				id := fmt.Sprintf("%s%0*d", prefix, idWidth-len(prefix), seq.Add(1))
				body := make([]byte, 0, memoryBodyBytes)
				body = fmt.Appendf(body, head, id, time.Now().Unix())
				body = append(append(body, pad...), tail...)
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				req.Header = verify.SignStripe(stripeSecret, time.Now(), body)
				req.Header.Set("Content-Type", "application/json")
				code := "transport"
				if resp, err := client.Do(req); err == nil {
					answer, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					code = strconv.Itoa(resp.StatusCode)
					switch {
					case resp.StatusCode != http.StatusOK:
					case bytes.Contains(answer, []byte(`"duplicate"`)):
						code = "200 duplicate" // every event is new: this is a fault
					default:
						acked.Add(1)
					}
				}
				mu.Lock()
				statuses[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return acked.Load(), statuses
}

// freshDatabase (re)creates database name on the run's cluster, empty; inlet
// migrate gives it the schema.
func freshDatabase(ctx context.Context, b *bench, name string) (string, error) {
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	for _, q := range []string{`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`, `CREATE DATABASE ` + name} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("%s: %w", q, err)
		}
	}
	return b.cluster.URL(name), nil
}

// waitSubscribed waits for the consumer's subscription to be registered.
func waitSubscribed(ctx context.Context, url string, within time.Duration) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.subscriptions WHERE handler = $1 AND enabled`, memoryHandler).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
	}
	return fmt.Errorf("the consumer did not subscribe %s within %s", memoryHandler, within)
}

// service is one running inlet process whose resident set is sampled.
type service struct {
	*process
	name   string
	maxRSS atomic.Int64 // KiB
	once   sync.Once
}

func startService(ctx context.Context, bin, name, cfg, dir string, env []string) (*service, error) {
	cmd := exec.Command(bin, name, "--config", cfg)
	cmd.Env, cmd.Dir = env, dir
	p, err := startProcess(cmd, filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("inlet %s: %w", name, err)
	}
	s := &service{process: p, name: name}
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if kib, err := procStatusKiB(s.cmd.Process.Pid, "VmRSS"); err == nil && kib > s.maxRSS.Load() {
				s.maxRSS.Store(kib)
			}
			select {
			case <-s.done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s, nil
}

// waitReady polls url until it answers 200.
func (s *service) waitReady(url string, within time.Duration) error {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-s.done:
			b, _ := os.ReadFile(s.log)
			return fmt.Errorf("inlet %s exited at start:\n%s", s.name, b)
		default:
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("inlet %s not ready at %s within %s", s.name, url, within)
}

// stop sends SIGTERM and waits, killing after 30s.
func (s *service) stop() { s.once.Do(func() { s.terminate(30 * time.Second) }) }

// procStatusKiB reads one "Vm…: N kB" field of /proc/<pid>/status.
func procStatusKiB(pid int, field string) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// logSummary counts a JSON log's warning and error lines by level and
// message: "ERROR webhook not stored ×12" → the first such line's error.
func logSummary(path string) map[string]string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	type line struct {
		Level string `json:"level"`
		Msg   string `json:"msg"`
		Error string `json:"error"`
	}
	counts, first := map[string]int{}, map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l line
		if json.Unmarshal(sc.Bytes(), &l) != nil || (l.Level != "WARN" && l.Level != "ERROR") {
			continue
		}
		k := l.Level + " " + l.Msg
		if counts[k]++; counts[k] == 1 {
			first[k] = l.Error
		}
	}
	if len(counts) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, n := range counts {
		out[fmt.Sprintf("%s ×%d", k, n)] = first[k]
	}
	return out
}

// The burst measurement's load: inlet ingress alone, burstConns connections
// at once, each posting Stripe-signed bodies of memoryBodyBytes back to back.
// Far more bodies than ingress.max_inflight_bytes holds arrive at once: the
// budget must cap ingress's memory whatever the concurrency, storing what fits
// and answering the excess 503 overloaded.
const (
	burstConns    = 1000
	burstDatabase = "inlet_bench_memory_burst"
)

// Burst is the burst measurement.
type Burst struct {
	Connections      int            `json:"connections"`
	BodyBytes        int            `json:"body_bytes"`
	Duration         string         `json:"duration"`
	MaxInflightBytes int64          `json:"max_inflight_bytes"`
	Statuses         map[string]int `json:"statuses"` // by status code and reason; "transport" for failed requests
	Acked            int64          `json:"acked"`
	Stored           int64          `json:"stored"` // events in the table afterwards
	// PeakRSSMiB is ingress's VmHWM, SampledRSSMiB the largest VmRSS seen
	// every 20ms.
	PeakRSSMiB    float64           `json:"peak_rss_mib"`
	SampledRSSMiB float64           `json:"sampled_rss_max_mib"`
	Logged        map[string]string `json:"logged,omitempty"`
}

// runBurst runs inlet ingress (built at inlet) on a database of its own and
// drives it with burstConns connections for b.duration.
func runBurst(ctx context.Context, b *bench, inlet, dir string) (*Burst, error) {
	dbURL, err := freshDatabase(ctx, b, burstDatabase)
	if err != nil {
		return nil, err
	}
	ports := make([]string, 2)
	for i := range ports {
		p, err := freeport.Pick()
		if err != nil {
			return nil, err
		}
		ports[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	const inflight = 32 << 20 // the default, said out loud
	cfg := filepath.Join(dir, "burst.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `
database_url: ${DATABASE_URL}
ingress:
  listen: %q
  metrics_listen: %q
  max_body_bytes: %d
  max_inflight_bytes: %d
sources:
  - name: stripe
    type: stripe
    secrets: [%q]
log:
  level: warn
`, ports[0], ports[1], memoryBodyBytes+64<<10, inflight, stripeSecret), 0o600); err != nil {
		return nil, err
	}
	env := append(os.Environ(), "DATABASE_URL="+dbURL)
	migrate := exec.CommandContext(ctx, inlet, "migrate", "--config", cfg)
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("inlet migrate: %w\n%s", err, out)
	}
	p, err := startService(ctx, inlet, "ingress", cfg, dir, env)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	if err := p.waitReady("http://"+ports[1]+"/readyz", 30*time.Second); err != nil {
		return nil, err
	}

	acked, statuses := postBurst(ports[0], burstConns, b.duration)
	hwm, _ := procStatusKiB(p.cmd.Process.Pid, "VmHWM")
	p.stop()
	r := &Burst{Connections: burstConns, BodyBytes: memoryBodyBytes, Duration: b.duration.String(), MaxInflightBytes: inflight,
		Statuses: statuses, Acked: acked, PeakRSSMiB: float64(hwm) / 1024, SampledRSSMiB: float64(p.maxRSS.Load()) / 1024,
		Logged: logSummary(p.log)}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events`).Scan(&r.Stored); err != nil {
		return nil, err
	}
	return r, nil
}

// postBurst drives ingress at addr with conns connections for d, each
// posting its own events of memoryBodyBytes back to back. The bodies are
// streamed from one shared padding (a thousand bodies in flight would
// otherwise cost the load generator a GiB), signed as they are streamed.
// It returns how many got their 200 and the answers by status and reason.
func postBurst(addr string, conns int, d time.Duration) (int64, map[string]int) {
	url := "http://" + addr + "/webhooks/stripe"
	raw := make([]byte, memoryBodyBytes)
	for i := range raw {
		raw[i] = byte(rand.N(256))
	}
	const idWidth = 40
	head := `{"id":"%s","object":"event","api_version":"2024-06-20","created":%d,"type":"invoice.paid","livemode":false,` +
		`"data":{"object":{"id":"in_bench","object":"invoice","currency":"usd","amount_due":2000,"description":"`
	tail := []byte(`"}}}`)
	headLen := len(fmt.Sprintf(head, strings.Repeat("x", idWidth), time.Now().Unix()))
	pad := []byte(base64.RawURLEncoding.EncodeToString(raw)[:memoryBodyBytes-headLen-len(tail)])

	transport := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	client := &http.Client{Transport: transport, Timeout: 60 * time.Second}
	defer transport.CloseIdleConnections()
	prefix := fmt.Sprintf("evt_burst_%d_", time.Now().UnixNano())
	var seq, acked atomic.Int64
	var mu sync.Mutex
	statuses := map[string]int{}
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for time.Now().Before(stop) {
				id := fmt.Sprintf("%s%0*d", prefix, idWidth-len(prefix), seq.Add(1))
				now := time.Now()
				h := fmt.Appendf(nil, head, id, now.Unix())
				mac := hmac.New(sha256.New, []byte(stripeSecret))
				fmt.Fprintf(mac, "%d.", now.Unix())
				mac.Write(h)
				mac.Write(pad)
				mac.Write(tail)
				body := io.MultiReader(bytes.NewReader(h), bytes.NewReader(pad), bytes.NewReader(tail))
				req, _ := http.NewRequest(http.MethodPost, url, body)
				req.ContentLength = int64(len(h) + len(pad) + len(tail))
				req.Header.Set("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now.Unix(), hex.EncodeToString(mac.Sum(nil))))
				req.Header.Set("Content-Type", "application/json")
				code := "transport"
				if resp, err := client.Do(req); err == nil {
					var a struct{ Status, Reason string }
					answer, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					_ = json.Unmarshal(answer, &a)
					code = strings.TrimSpace(strconv.Itoa(resp.StatusCode) + " " + a.Reason)
					if resp.StatusCode == http.StatusOK && a.Status == "stored" {
						acked.Add(1)
					}
				}
				mu.Lock()
				statuses[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return acked.Load(), statuses
}

func printBurst(r *Burst) {
	fmt.Printf("\ninlet ingress alone, %d connections posting %d-byte Stripe-signed bodies at once for %s, ingress.max_inflight_bytes %d MiB:\n",
		r.Connections, r.BodyBytes, r.Duration, r.MaxInflightBytes>>20)
	fmt.Printf("  peak RSS %.1f MiB (VmHWM), max sampled RSS %.1f MiB; %d acknowledged, %d stored; answers %v\n",
		r.PeakRSSMiB, r.SampledRSSMiB, r.Acked, r.Stored, r.Statuses)
	for msg, first := range r.Logged {
		fmt.Printf("  ingress logged %s%s\n", msg, firstError(first))
	}
}

// firstError is how a logged line's first error is printed after it:
// nothing when the line had no error attribute.
func firstError(err string) string {
	if err == "" {
		return ""
	}
	return " (first: " + err + ")"
}
