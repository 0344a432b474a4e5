package consumers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// r297Proxy forwards TCP connections to the test database. down() is a
// database restart as a client sees it: every connection is closed and new
// ones are refused (accepted and closed at once) until up(). freeze() is a
// network partition: nothing crosses in either direction and nothing is
// closed until the test ends.
type r297Proxy struct {
	ln            net.Listener
	port          uint16
	network, addr string

	mu       sync.Mutex
	mode     int // r297Up, r297Down, r297Frozen
	conns    []net.Conn
	released chan struct{}
	once     sync.Once
}

const (
	r297Up = iota
	r297Down
	r297Frozen
)

func newR297Proxy(t *testing.T, cfg *pgxpool.Config) *r297Proxy {
	t.Helper()
	network, addr := "tcp", net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	if strings.HasPrefix(cfg.ConnConfig.Host, "/") {
		network, addr = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &r297Proxy{ln: ln, port: uint16(ln.Addr().(*net.TCPAddr).Port), network: network, addr: addr, released: make(chan struct{})}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// pool opens a pool of cfg's role through the proxy, closed when t ends;
// connectTimeout bounds each new connection.
func (p *r297Proxy) pool(t *testing.T, cfg *pgxpool.Config, connectTimeout time.Duration) *pgxpool.Pool {
	t.Helper()
	pcfg := cfg.Copy()
	pcfg.ConnConfig.Host, pcfg.ConnConfig.Port = "127.0.0.1", p.port
	pcfg.ConnConfig.Fallbacks = nil
	pcfg.ConnConfig.ConnectTimeout = connectTimeout
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func (p *r297Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		select {
		case <-p.released:
			mode = r297Down
		default:
		}
		if mode == r297Down {
			p.mu.Unlock()
			_ = c.Close() // refused, as by a server that is restarting
			continue
		}
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		if mode == r297Frozen {
			continue // held open, nothing forwarded
		}
		go func() {
			s, err := net.Dial(p.network, p.addr)
			if err != nil {
				_ = c.Close()
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, s)
			p.mu.Unlock()
			go p.pump(c, s)
			go p.pump(s, c)
		}()
	}
}

func (p *r297Proxy) pump(src, dst net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		frozen := p.mode == r297Frozen
		p.mu.Unlock()
		if frozen {
			<-p.released // a partition: nothing crosses, not even a close
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			_ = src.Close()
			_ = dst.Close()
			return
		}
	}
}

// down closes every connection and refuses new ones until up.
func (p *r297Proxy) down() {
	p.mu.Lock()
	p.mode = r297Down
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (p *r297Proxy) up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = r297Up
}

func (p *r297Proxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = r297Frozen
}

func (p *r297Proxy) close() {
	p.once.Do(func() {
		p.mu.Lock()
		close(p.released)
		conns := p.conns
		p.conns = nil
		p.mu.Unlock()
		_ = p.ln.Close()
		for _, c := range conns {
			_ = c.Close()
		}
	})
}

// r297Service starts a service on cfg and stops it when t ends (the
// deadline generous: the point of these tests is elsewhere).
func r297Service(t *testing.T, cfg Config) *Service {
	t.Helper()
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
	})
	return svc
}

// TestShortDatabaseRestartKeepsASuccess (review helper-297, fixed).
// Defect: a handler that succeeds while PostgreSQL restarts (a minor
// upgrade, a failover, `pg_ctl restart`: a few seconds of refused
// connections) has its success thrown away although its lease still has
// most of a LeaseExtend to run. consumers/attempt.go: Service.complete
// (and Service.record for failures) retry an outcome only through
// retryWhileUnavailable, three tries 0.5 s and 1 s apart (~1.5 s in all),
// inside a recordTimeout of 15 s; the batched statement
// (batch.go: completeBatch) is not retried at all. After that the service
// logs "record attempt outcome failed; the lease will expire" and the
// job sits leased until the lease runs out, when the reaper records the
// attempt as lease_expired: a success becomes a counted failure (a step
// toward max_attempts and dead_letter, a failure of the handler's circuit
// breaker) and the handler's side effect runs again. A restart during a
// busy minute does this to every attempt finishing in it; on a job's last
// attempt the succeeded job is dead-lettered.
// Setup: the consumer's pool goes through a TCP proxy; the streamer's lease
// is 60 s, LeaseExtend the default 30 s. While the handler runs, the proxy
// starts refusing connections (every open one closed) for 5 s; the handler
// then returns nil.
// Expected: once the database answers again (5 s later, the lease still
// ~50 s from its end and within recordTimeout), the success is recorded:
// the job is completed on attempt 1.
// Observed: 1.5 s after the handler returned the service logged "record
// attempt outcome failed; the lease will expire"; 20 s after the database
// was back the job was still leased (attempt_count 1, no outcome, its lease
// 35 s from its end): nothing retries it, and the reaper counts it
// lease_expired when the lease runs out.
// Fixed: an outcome, batched (completeBatch) or alone (record, complete),
// is tried again while Postgres is unavailable (or the connection went away
// under the statement) until the attempt's lease runs out, as this process
// knows it (lease.end: the lease read and each extension, on its monotonic
// clock), each try within recordTimeout, 250 ms apart doubling to 2 s;
// still fenced on the lease token.
func TestShortDatabaseRestartKeepsASuccess(t *testing.T) {
	t.Parallel()
	b := consumertest.New(t)
	logs := &consumertest.LockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service logs:\n%s", logs.String())
		}
	})
	proxy := newR297Proxy(t, b.Worker.Config())
	pool := proxy.pool(t, b.Worker.Config(), 2*time.Second)

	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	returned := make(chan time.Time, 1)
	cfg := Config{Pool: pool, Subscriber: b.Bus, WorkerID: "r297-restart",
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Handlers: []Handler{{Name: "h", MaxAttempts: 3, Backoff: func(int) time.Duration { return 0 },
			Func: func(ctx context.Context, e *Event) error {
				entered <- struct{}{}
				<-release
				returned <- time.Now()
				return nil
			}}}}
	r297Service(t, cfg)

	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{Body: []byte(`{"id":"evt_1"}`)}), "h")
	refs := b.ClaimOnce(t, 60*time.Second)
	if len(refs) != 1 {
		t.Fatalf("claimed %d jobs, want 1", len(refs))
	}
	if err := b.PublishBatch(refs); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never ran")
	}

	// The database restarts: 5 s of refused connections, the handler
	// succeeding meanwhile.
	proxy.down()
	close(release)
	handlerReturned := <-returned
	time.Sleep(5 * time.Second) // the outage itself
	proxy.up()
	backAt := time.Now()

	const lostLog = "record attempt outcome failed"
	var j consumertest.Job
	deadline := time.Now().Add(20 * time.Second)
	for {
		j = b.Job(t, jobID)
		if j.Status == "completed" {
			break
		}
		if time.Now().After(deadline) {
			lost := strings.Contains(logs.String(), lostLog)
			t.Fatalf("%s after the database came back (%s after the handler returned nil) job %d is %s, attempt_count %d, lease until %v (%s from now): "+
				"the success was not recorded (service logged %q: %v); the reaper will count the attempt lease_expired and the handler runs again",
				time.Since(backAt).Round(100*time.Millisecond), time.Since(handlerReturned).Round(100*time.Millisecond), jobID, j.Status, j.AttemptCount,
				j.LeaseExpiresAt, time.Until(*j.LeaseExpiresAt).Round(time.Second), lostLog, lost)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if j.AttemptCount != 1 {
		t.Errorf("job completed on attempt %d, want 1", j.AttemptCount)
	}
}

// r297NilCause is a handler's error type whose Unwrap needs a non-nil
// receiver, as most do.
type r297NilCause struct{ cause error }

func (e *r297NilCause) Error() string { return "charge: " + e.cause.Error() }
func (e *r297NilCause) Unwrap() error { return e.cause }

// r297Charge returns its error as the interface: the classic typed nil
// (a nil *r297NilCause is a non-nil error).
func r297Charge() error {
	var e *r297NilCause
	return e
}

// TestWrappedTypedNilErrorIsARecordedFailure (review helper-297, fixed).
// Defect: a handler that returns a typed nil wrapped once — the commonest
// form of the typed-nil mistake, `return fmt.Errorf("charge: %w", err)`
// where err is a nil *MyError behind the error interface — crashes the
// whole consumer process (every attempt of every handler in it is lost
// and later counted lease_expired), instead of failing its attempt. The
// SDK turns a handler's panic into ClassPanic and an outermost typed nil
// into a recorded failure (call, notTypedNil; TestHandlerReturningATypedNil
// ErrorIsARecordedFailure), and an Error method that panics into a stored
// note (safeErrorString), but it walks the error's chain outside any
// recover: consumers/attempt.go Service.attempt calls ClassOf (errors.go:
// errors.As over the chain), and Service.record calls IsPermanent and
// RetryAfterOf, each of which calls the handler's Unwrap, which
// dereferences its nil receiver. A panic on the attempt's goroutine ends
// the program. doc.go: a handler's panic is a recorded failure; "a
// handler's error type is the handler's code" (attempt.go).
// Setup: the test re-runs itself as a child process (real PostgreSQL
// database made by the parent, in-process bus, a real Service); the
// handler returns fmt.Errorf("charge: %w", r297Charge()).
// Expected: the child lives; the job is failed (retried later) with class
// handler_error (or panic), the error text stored.
// Observed: the child dies with "panic: runtime error: invalid memory
// address or nil pointer dereference" in (*r297NilCause).Unwrap called
// from errors.As ← consumers.ClassOf ← (*Service).attempt; the job is
// left leased with attempt_count 1 and no outcome.
// Fixed: the handler's error is judged once, right after the handler
// returns (run, runTxOnce: judge), under a recover: its class, whether it
// is permanent, its Retry-After and whether it is a conflict; walking the
// chain panicking falls back to ClassHandlerError, not permanent, no
// Retry-After. attempt, record and runTx use that verdict, and never walk
// the chain again (conflicts.returned recovers too).
func TestWrappedTypedNilErrorIsARecordedFailure(t *testing.T) {
	if url := os.Getenv("R297_CHILD_DB"); url != "" {
		r297Child(t, url)
		return
	}
	t.Parallel()
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestWrappedTypedNilErrorIsARecordedFailure$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "R297_CHILD_DB="+url)
	out, err := cmd.CombinedOutput()

	admin, perr := pgxpool.New(context.Background(), url)
	if perr != nil {
		t.Fatal(perr)
	}
	defer admin.Close()
	var status string
	var class *string
	var attempts int
	if qerr := admin.QueryRow(context.Background(), `SELECT status, last_error_class, attempt_count FROM webhook_ingress.jobs WHERE handler = 'h'`).Scan(&status, &class, &attempts); qerr != nil {
		t.Fatal(qerr)
	}
	if err != nil {
		text := string(out)
		if i := strings.Index(text, "panic:"); i >= 0 {
			text = text[i:min(len(text), i+1500)]
		} else if len(text) > 3000 {
			text = text[len(text)-3000:]
		}
		t.Fatalf("the consumer process died (%v) when its handler returned a wrapped typed-nil error; job status %s, class %s, attempt_count %d. Child output:\n%s",
			err, status, derefR297(class), attempts, text)
	}
	if status != "failed" || (derefR297(class) != string(ClassHandlerError) && derefR297(class) != string(ClassPanic)) {
		t.Errorf("job %s with class %s after its handler returned a wrapped typed nil; want failed (handler_error or panic)", status, derefR297(class))
	}
}

func derefR297(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// r297Child runs a consumer whose handler returns a wrapped typed nil, until
// its job has an outcome.
func r297Child(t *testing.T, url string) {
	ctx := context.Background()
	admin, err := database.Open(ctx, url, database.Options{MaxConns: 4, AppName: "r297-admin"})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	worker, err := database.Open(ctx, url, database.Options{Role: "webhook_worker", MaxConns: 8, AppName: "r297-worker"})
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	ps := bus.NewGoChannel(slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer func() { _ = ps.Close() }()
	b := &consumertest.Bundle{Admin: admin, Worker: worker, Bus: ps}
	r297Service(t, Config{Pool: worker, Subscriber: ps, WorkerID: "r297-child",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handlers: []Handler{{Name: "h", MaxAttempts: 3, Backoff: func(int) time.Duration { return time.Hour },
			Func: func(context.Context, *Event) error {
				return fmt.Errorf("charge: %w", r297Charge())
			}}}})
	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h")
	if err := b.PublishBatch(b.ClaimOnce(t, 60*time.Second)); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "the job's outcome", func() (bool, string) {
		j := b.Job(t, jobID)
		return j.Status != "leased", j.Status
	})
}

// TestTxHandlerWrappedTypedNilErrorIsARecordedFailure: a transactional
// handler's error is judged once too (runTxOnce), so a wrapped typed nil
// fails its attempt, the transaction rolled back, instead of panicking in
// the walk that looks for a serialization failure (review helper-297).
func TestTxHandlerWrappedTypedNilErrorIsARecordedFailure(t *testing.T) {
	t.Parallel()
	b := consumertest.New(t)
	r297Service(t, Config{Pool: b.Worker, Subscriber: b.Bus, WorkerID: "r297-tx",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handlers: []Handler{{Name: "h", MaxAttempts: 3, Backoff: func(int) time.Duration { return time.Hour },
			TxFunc: func(context.Context, pgx.Tx, *Event) error {
				return fmt.Errorf("charge: %w", r297Charge())
			}}}})
	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h")
	if err := b.PublishBatch(b.ClaimOnce(t, 60*time.Second)); err != nil {
		t.Fatal(err)
	}
	j := b.WaitJobStatus(t, jobID, "failed", time.Minute)
	if j.AttemptCount != 1 {
		t.Errorf("job failed on attempt %d, want 1", j.AttemptCount)
	}
	got := b.Attempts(t, jobID)
	if len(got) != 1 {
		t.Fatalf("%d attempts recorded; want one", len(got))
	}
	if class := derefR297(got[0].ErrorClass); class != string(ClassHandlerError) {
		t.Errorf("attempt recorded with class %s; want %s", class, ClassHandlerError)
	}
}

// TestStopKeepsItsDeadlineWhileTheDatabaseIsCutOff (review helper-297, fixed).
// Defect: Stop's deadline is not honoured when the database stops
// answering (a network partition, a frozen server). consumers/service.go
// Service.Stop documents: once ctx is done "their contexts are cancelled,
// Stop waits a few seconds at most for them to return, and returns ctx's
// error" (giveBackTimeout, 5 s). But after that wait, Service.stop calls
// stopBackground, which calls completions.Close(): it waits for the
// completion batch in flight, whose statement runs on
// context.WithoutCancel(workCtx) for recordTimeout (15 s, batch.go:
// completeBatch), and then s.resets.Wait() (breaker resets, another
// recordTimeout each). A deploy's drain deadline (`inlet consumer`'s
// drain, an orchestrator's grace period) is overrun by up to
// recordTimeout and more; the program cannot get control back to exit.
// Setup: the consumer's pool through a TCP proxy (connect timeout 1 min,
// so a new connection hangs as an open one does); the handler returns nil
// right after the proxy froze (nothing forwarded, nothing closed), so its
// success batch hangs; then Stop with a 1 s deadline.
// Expected: Stop returns ctx's error within its deadline plus the few
// seconds it documents (giveBackTimeout 5 s; allowed here: 1 s + 5 s + 3 s
// of margin = 9 s).
// Observed: Stop returned after 15.0 s (deadline 1 s), i.e. when the
// frozen completion statement hit recordTimeout.
// Fixed: once ctx is done, Stop gives what it still waits for
// giveBackTimeout in all (graceAfter): the attempts cut short, then
// stopBackground (the liveness write, the completion batch, the breaker
// resets), whose waits are bounded by what is left of it and which then
// finishes in the background, as attempts cut short do.
func TestStopKeepsItsDeadlineWhileTheDatabaseIsCutOff(t *testing.T) {
	t.Parallel()
	b := consumertest.New(t)
	proxy := newR297Proxy(t, b.Worker.Config())
	// A partition: a new connection hangs as long as its statement's
	// context allows (an open one or a new one, the completion waits alike).
	pool := proxy.pool(t, b.Worker.Config(), time.Minute)

	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	returned := make(chan struct{})
	svc, err := New(Config{Pool: pool, Subscriber: b.Bus, WorkerID: "r297-stop",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handlers: []Handler{{Name: "h", MaxAttempts: 3,
			Func: func(ctx context.Context, e *Event) error {
				entered <- struct{}{}
				<-release
				close(returned)
				return nil
			}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h")
	if err := b.PublishBatch(b.ClaimOnce(t, 60*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never ran")
	}
	proxy.freeze()
	close(release)
	<-returned

	const deadline = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	began := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- svc.Stop(ctx) }()
	const allowed = deadline + giveBackTimeout + 3*time.Second
	select {
	case err := <-stopped:
		took := time.Since(began)
		t.Logf("Stop took %s: %v", took, err)
		if took > allowed {
			t.Errorf("Stop with a %s deadline returned after %s (%v); want within %s (its deadline and the few seconds it documents)", deadline, took.Round(100*time.Millisecond), err, allowed)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("Stop with a %s deadline has not returned after 2 minutes", deadline)
	}
}
