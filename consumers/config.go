package consumers

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config configures a [Service].
type Config struct {
	// Pool is the consumer's database pool, connected as (or SET ROLE to)
	// webhook_worker, which runs every handler (OpenPool), or to a consumer
	// role of the team's own, which PostgreSQL holds to its handlers
	// (OpenPoolAs; inlet roles create-consumer). Required.
	Pool *pgxpool.Pool
	// Subscriber receives the streamer's job references: natsbus.New for
	// NATS JetStream across processes, bus.NewGoChannel in one process.
	// Required: nil, or a nil pointer in the interface (a *natsbus.NATS
	// never made), is refused.
	Subscriber message.Subscriber
	// Handlers are the handlers this service runs: at least one, unique
	// names.
	Handlers []Handler
	// WorkerID is recorded in job_attempts.worker_id: at most 200 bytes of
	// valid UTF-8 without NUL (PostgreSQL text). Defaults to
	// "<hostname>-<pid>", "-2", "-3"… appended for a process's later
	// services: each says alive in a row of its own.
	WorkerID string
	// LeaseExtend is the lease extension of a running attempt: every LeaseExtend/3
	// the job's lease is pushed to now()+LeaseExtend. The streamer's lease
	// must outlast LeaseExtend/3 plus delivery delay. Defaults to 30s.
	LeaseExtend time.Duration
	// AliveInterval is how often the service tells Postgres it is alive for
	// its handlers (webhook_ingress.consumers). Streamers lease nothing of a
	// handler whose consumers have all been quiet for three intervals, and
	// count an expired lease as an attempt only when a consumer of its
	// handler was alive meanwhile. Defaults to 5s.
	AliveInterval time.Duration
	// CompleteBatch is the most successful outcomes recorded by one
	// statement: attempts that finish while the last batch is being written
	// share the next one (a lone one is written at once). Defaults to 128; a
	// negative value records each attempt in its own transaction.
	CompleteBatch int
	// TakeBatch is the most attempts one read statement takes: the
	// references of a bus message that start together are read together, at
	// once, with those of the messages that queued while the last read ran
	// (two reads run at a time). Defaults to 64; a negative value reads each
	// attempt with its own statement.
	TakeBatch int
	// Logger receives metadata-only log lines. Defaults to slog.Default().
	Logger *slog.Logger
	// Metrics counts finished attempts (see [Metrics]). Defaults to counting
	// nothing (nil; a nil pointer in the interface is refused).
	Metrics Metrics
	// TracerProvider makes the span of each attempt (inlet.consumer.attempt,
	// a child of the streamer's span the job reference carries, and the
	// parent of the handler's spans). The program picks the exporter: pass
	// otel.GetTracerProvider() or a provider of its own. Defaults to a no-op
	// provider, under which handlers still see the streamer's trace context
	// (nil; a nil pointer in the interface is refused).
	TracerProvider trace.TracerProvider
	// CheckFilter compiles a handler's Filter, so that New rejects a bad
	// expression with the position of its error instead of registering a
	// filter ingress cannot run: pass filter.Check (module
	// github.com/inlet-dev/inlet/filter), as inlet consumer does. Required
	// when a handler has a Filter. The SDK does not compile CEL itself, so
	// that programs without filters do not carry a CEL compiler.
	CheckFilter func(expr string) error
}

const (
	defaultLeaseExtend = 30 * time.Second
	minLeaseExtend     = 30 * time.Millisecond
)

// WithDefaults returns c with every unset field, its handlers' included, at
// its default. It does not modify c's Handlers slice.
func (c Config) WithDefaults() Config {
	hs := make([]Handler, len(c.Handlers))
	for i, h := range c.Handlers {
		hs[i] = h.WithDefaults()
	}
	c.Handlers = hs
	if c.WorkerID == "" {
		c.WorkerID = defaultWorkerID()
	}
	c.LeaseExtend = cmp.Or(c.LeaseExtend, defaultLeaseExtend)
	c.AliveInterval = cmp.Or(c.AliveInterval, 5*time.Second)
	c.CompleteBatch = cmp.Or(c.CompleteBatch, 128)
	c.TakeBatch = cmp.Or(c.TakeBatch, 64)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	return c
}

// workerIDs counts the default worker ids given in this process.
var workerIDs atomic.Int64

// defaultWorkerID is HOST-PID, and HOST-PID-N for the Nth service of the
// process from the second on: two services in one process (two teams'
// roles) said alive in one consumers row, each overwriting the other's role,
// so a handler they share was never routed per role (review helper-172).
func defaultWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "consumer"
	}
	id := host + "-" + strconv.Itoa(os.Getpid())
	if n := workerIDs.Add(1); n > 1 {
		id += "-" + strconv.FormatInt(n, 10)
	}
	return id
}

// maxBatch bounds CompleteBatch and TakeBatch: a statement of that many
// outcomes or reads is far past where batching pays (and a batching group's
// queue is a channel of a multiple of it).
const maxBatch = 10_000

// anyTx reports whether a handler runs in a transaction (TxFunc).
func (c Config) anyTx() bool {
	return slices.ContainsFunc(c.Handlers, func(h Handler) bool { return h.TxFunc != nil })
}

// validate checks c after WithDefaults and names the bad field.
func (c Config) validate() error {
	if c.Pool == nil {
		return errors.New("pool: required")
	}
	if c.Subscriber == nil {
		return errors.New("subscriber: required")
	}
	// A typed nil (`var sub *natsbus.NATS; cfg.Subscriber = sub`) is != nil:
	// Start registered the subscriptions, then panicked in Subscribe (review
	// helper-137). The interfaces WithDefaults fills are refused likewise:
	// their first call would panic mid-attempt.
	if typedNil(c.Subscriber) {
		return fmt.Errorf("subscriber: required (got a nil %T)", c.Subscriber)
	}
	if typedNil(c.Metrics) {
		return fmt.Errorf("metrics: a nil %T; leave Metrics nil to count nothing", c.Metrics)
	}
	if typedNil(c.TracerProvider) {
		return fmt.Errorf("tracer_provider: a nil %T; leave TracerProvider nil for a no-op provider", c.TracerProvider)
	}
	if len(c.Handlers) == 0 {
		return errors.New("handlers: at least one is required")
	}
	for i, h := range c.Handlers {
		if err := h.validate(c.CheckFilter); err != nil {
			return fmt.Errorf("handlers[%d].%w", i, err)
		}
		if j := slices.IndexFunc(c.Handlers[:i], func(o Handler) bool { return o.Name == h.Name }); j >= 0 {
			return fmt.Errorf("handlers[%d].name: %q is also handlers[%d]", i, h.Name, j)
		}
	}
	if c.CompleteBatch > maxBatch {
		return fmt.Errorf("complete_batch: %d is more than %d", c.CompleteBatch, maxBatch)
	}
	if c.TakeBatch > maxBatch {
		return fmt.Errorf("take_batch: %d is more than %d", c.TakeBatch, maxBatch)
	}
	if c.anyTx() && c.Pool.Config().MaxConns <= txReserve {
		return fmt.Errorf("pool: %d connections, a transactional handler needs at least %d (its transaction holds one, and the service keeps %d for its own statements: the reads, lease extensions and outcomes)",
			c.Pool.Config().MaxConns, txReserve+1, txReserve)
	}
	if c.LeaseExtend < minLeaseExtend {
		return fmt.Errorf("lease_extend: %s is shorter than %s", c.LeaseExtend, minLeaseExtend)
	}
	if c.AliveInterval < 10*time.Millisecond {
		return fmt.Errorf("alive_interval: %s is shorter than 10ms", c.AliveInterval)
	}
	if len(c.WorkerID) > 200 {
		return fmt.Errorf("worker_id: %d bytes, longer than 200", len(c.WorkerID))
	}
	// PostgreSQL text refuses both, so every statement carrying the id
	// failed: no outcome was ever recorded and the job ran again for ever
	// (review helper-137).
	if !utf8.ValidString(c.WorkerID) {
		return fmt.Errorf("worker_id: %q is not valid UTF-8", c.WorkerID)
	}
	if strings.ContainsRune(c.WorkerID, 0) {
		return fmt.Errorf("worker_id: %q contains a NUL byte", c.WorkerID)
	}
	return nil
}

// typedNil reports whether v, non-nil as an interface, holds a nil pointer,
// map, channel, func or interface: a value whose methods would panic.
func typedNil(v any) bool {
	if v == nil {
		return false
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
