package consumers

import (
	"cmp"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5"
	"math"
	"net/textproto"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/inlet-dev/inlet/consumers/bus"
)

// Pattern is one (provider, event type) pair a handler subscribes to. Both are
// globs in which '*' matches any run of characters and is the only wildcard;
// every other character, '%' and '_' included, matches itself.
type Pattern struct {
	// Provider is matched against the source name. Defaults to "*".
	Provider string
	// EventType is matched against the event type. Defaults to "*" (which
	// matches an empty type too).
	EventType string
}

// Handler declares one named consumer of events.
type Handler struct {
	// Name identifies the handler: its subscriptions, its jobs and its bus
	// topic. 1-63 lower-case letters, digits, '-' or '_'. Required.
	Name string
	// Provider is a glob over the source name. Defaults to "*". Ignored when
	// Patterns is set.
	Provider string
	// EventType is a glob over the event type. Defaults to "*". Ignored when
	// Patterns is set.
	EventType string
	// Patterns subscribes the handler to several (provider, event type)
	// pairs; when set, Provider and EventType are ignored. An event matching
	// several pairs still makes one job.
	Patterns []Pattern
	// Filter, when set, is a CEL expression an event must also pass to get
	// a job of this handler (package filter: event.source, event.type,
	// event.headers, event.occurred_at, payload), evaluated by ingress
	// before the jobs are written, so an event it rejects costs no job row.
	// New compiles it with Config.CheckFilter, so a bad expression fails New
	// with the position of the error.
	Filter string
	// MaxAttempts is how many attempts a job gets before it is dead-lettered.
	// It applies to jobs created after registration. Defaults to 25.
	MaxAttempts int
	// Backoff returns the delay before the retry that follows failed attempt
	// n (1-based). Defaults to DefaultBackoff. It is called only when a
	// retry follows (not after the job's last attempt or a Permanent
	// error); should it panic, DefaultBackoff's delay is used.
	Backoff func(attempt int) time.Duration
	// Timeout bounds one attempt; the handler's context ends then. Defaults
	// to 60s; at most 24h (a "no timeout" such as math.MaxInt64 is refused:
	// a transactional handler above READ COMMITTED holds its lease for its
	// Timeout, so a consumer that dies holds its job that long, and waits
	// for a transaction's connection are bounded by multiples of it).
	Timeout time.Duration
	// Concurrency caps this handler's attempts reading their event or
	// running in this process; further messages wait unacknowledged. An
	// attempt whose handler returned gives its slot back while its outcome
	// waits for its batch to be written (the streamer's
	// max_leased_per_handler bounds those). Defaults to 64: an attempt spends
	// most of its time waiting on batched statements, so a handler needs many
	// in flight to keep up with ingress (8 held inlet dev to ~750/s).
	// Memory: a process holds at most Concurrency of this handler's bodies
	// at once (each up to its source's ingress.max_body_bytes, 1 MiB by
	// default; a handler that hangs keeps its own until it returns), and
	// messages waiting for a slot hold none: budget the sum over its
	// handlers of Concurrency × max body (64 MiB per handler at the
	// defaults).
	Concurrency int
	// RateLimit caps how many of this handler's jobs start per second. The
	// streamers lease its jobs no faster, across every replica (a token
	// bucket kept in webhook_ingress.handler_limits), and each consumer
	// process paces its starts with a token bucket of its own (RateLimit,
	// Burst): in any time t a process starts at most Burst + RateLimit·t of
	// them, also when jobs leased while its slots were busy (a stalled
	// downstream, or, for a TxFunc, busy transaction slots) queue in it.
	// Across N replicas starts stay within the rate over time, as the
	// leases do (at most Burst + RateLimit·t leased by time t), but after a
	// stall they may reach N·Burst at once, and up to N·RateLimit while
	// backlogs queued in several replicas drain. A job takes its token
	// last, right before its handler is called: once it holds a Concurrency
	// slot and its event is read, and for a TxFunc once it holds a
	// transaction slot too (it holds none while it waits for the token, so
	// other transactional handlers are not held back). Its jobs wait for
	// their tokens in turn, their leases extended; one whose token comes
	// more than LeaseExtend/2 later (a rate slower than about
	// 2/LeaseExtend) is given back uncounted, its handler not called, and
	// the streamers lease it again at the rate. 0: no rate limit, and no
	// pacing.
	RateLimit float64
	// Burst is how many jobs may start at once under RateLimit: the burst of
	// the streamers' shared bucket and of each consumer process's. Defaults
	// to RateLimit rounded up (at least 1).
	Burst int
	// MaxInFlight caps this handler's jobs leased at once across every
	// replica (Concurrency caps one process). 0: only the streamers'
	// max_leased_per_handler.
	MaxInFlight int
	// BreakerFailures opens the handler's circuit after that many
	// consecutive failed attempts: its jobs then wait without spending
	// attempts, one probe job runs every BreakerProbeInterval (once none of
	// the handler's jobs is leased), and a success closes the circuit. An
	// attempt that ran and never reported (the handler hung past Timeout
	// ignoring its context, or the consumer died in it), which the
	// streamer's reaper ends as lease_expired, counts as a failure too.
	// 0: no circuit breaker.
	BreakerFailures int
	// BreakerProbeInterval is the time between probes of an open circuit.
	// Defaults to 30s when BreakerFailures is set.
	BreakerProbeInterval time.Duration
	// OrderKey orders this handler's jobs per entity: where an event names
	// its entity, a dot path into the parsed payload ("data.object.id",
	// "repository.full_name"; the source must keep store_json) or a header
	// ("header:X-Shop-Id"). A job then runs only after the earlier jobs of
	// its key (by occurred_at, then arrival) have finished, across every
	// replica; a key whose head is failing holds back that key only. An
	// event without the key goes to the keyless lane, never blocked.
	// "": unordered.
	OrderKey string
	// OrderPolicy is what a dead-lettered job does to the later jobs of its
	// key: "block" (they wait until it is replayed; the default) or "skip"
	// (they go on).
	OrderPolicy string
	// Func handles one attempt. Exactly one of Func and TxFunc is required.
	Func HandlerFunc
	// TxFunc handles one attempt inside a transaction that also completes
	// the job (exactly-once effects in this PostgreSQL; see
	// [TxHandlerFunc]). Exactly one of Func and TxFunc is required.
	TxFunc TxHandlerFunc
	// TxOptions begins TxFunc's transaction: its isolation level
	// (REPEATABLE READ, SERIALIZABLE) and deferrable mode. Set the level
	// here, not with SET TRANSACTION in the handler: above READ COMMITTED
	// the lease is handled differently (see [TxHandlerFunc]). It must be
	// read-write: the job is completed in it.
	TxOptions pgx.TxOptions
}

const (
	defaultMaxAttempts = 25
	defaultTimeout     = 60 * time.Second
	maxTimeout         = 24 * time.Hour
	defaultConcurrency = 64
	maxPatternLen      = 200

	defaultProbeInterval = 30 * time.Second
	maxRateLimit         = 1_000_000
	maxLimit             = 1_000_000
	maxBreakerFailures   = 10_000
	maxOrderKeyLen       = 256
)

// WithDefaults returns h with every unset field at its default. Patterns is
// always filled: from Provider and EventType when it was empty.
func (h Handler) WithDefaults() Handler {
	if len(h.Patterns) == 0 {
		h.Provider = cmp.Or(h.Provider, "*")
		h.EventType = cmp.Or(h.EventType, "*")
		h.Patterns = []Pattern{{Provider: h.Provider, EventType: h.EventType}}
	} else {
		ps := make([]Pattern, len(h.Patterns))
		for i, p := range h.Patterns {
			ps[i] = Pattern{Provider: cmp.Or(p.Provider, "*"), EventType: cmp.Or(p.EventType, "*")}
		}
		h.Patterns = ps
	}
	h.MaxAttempts = cmp.Or(h.MaxAttempts, defaultMaxAttempts)
	if h.Backoff == nil {
		h.Backoff = DefaultBackoff
	}
	h.Timeout = cmp.Or(h.Timeout, defaultTimeout)
	h.Concurrency = cmp.Or(h.Concurrency, defaultConcurrency)
	if h.RateLimit > 0 && h.Burst == 0 {
		h.Burst = max(1, int(math.Ceil(h.RateLimit)))
	}
	if h.BreakerFailures > 0 {
		h.BreakerProbeInterval = cmp.Or(h.BreakerProbeInterval, defaultProbeInterval)
	}
	if h.OrderKey != "" {
		h.OrderPolicy = cmp.Or(h.OrderPolicy, "block")
		if name, ok := strings.CutPrefix(h.OrderKey, "header:"); ok {
			h.OrderKey = "header:" + textproto.CanonicalMIMEHeaderKey(name)
		}
	}
	return h
}

// limited reports whether the handler has limits kept in handler_limits.
func (h Handler) limited() bool {
	return h.RateLimit > 0 || h.MaxInFlight > 0 || h.BreakerFailures > 0
}

// validate checks a handler after WithDefaults, its Filter with
// checkFilter; errors name the field relative to the handler ("name: ...",
// "patterns[1].provider: ...").
func (h Handler) validate(checkFilter func(string) error) error {
	if h.Name == "" {
		return errors.New("name: required")
	}
	if err := bus.ValidHandlerName(h.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	switch {
	case h.Func == nil && h.TxFunc == nil:
		return errors.New("func: required (or tx_func)")
	case h.Func != nil && h.TxFunc != nil:
		return errors.New("func and tx_func: set one, not both")
	case h.TxOptions != (pgx.TxOptions{}) && h.TxFunc == nil:
		return errors.New("tx_options: set only with tx_func")
	case h.TxOptions.AccessMode == pgx.ReadOnly:
		return errors.New("tx_options: access mode read only: the job is completed in the handler's transaction, which must be read-write")
	}
	if h.MaxAttempts < 1 {
		return fmt.Errorf("max_attempts: %d must be at least 1", h.MaxAttempts)
	}
	if h.MaxAttempts > math.MaxInt32 {
		return fmt.Errorf("max_attempts: %d must be at most %d (the database's integer)", h.MaxAttempts, math.MaxInt32)
	}
	if h.Timeout <= 0 || h.Timeout > maxTimeout {
		return fmt.Errorf("timeout: %s must be positive and at most 24h", h.Timeout)
	}
	if h.Concurrency < 1 {
		return fmt.Errorf("concurrency: %d must be at least 1", h.Concurrency)
	}
	if err := h.validateLimits(); err != nil {
		return err
	}
	if h.Filter != "" {
		if checkFilter == nil {
			return errors.New("filter: set Config.CheckFilter (filter.Check of module github.com/inlet-dev/inlet/filter) so the expression is compiled before it is registered")
		}
		if err := checkFilter(h.Filter); err != nil {
			return fmt.Errorf("filter: %w", err)
		}
	}
	for i, p := range h.Patterns {
		if err := validPattern(p.Provider); err != nil {
			return fmt.Errorf("patterns[%d].provider: %w", i, err)
		}
		if err := validPattern(p.EventType); err != nil {
			return fmt.Errorf("patterns[%d].event_type: %w", i, err)
		}
		if j := slices.Index(h.Patterns[:i], p); j >= 0 {
			return fmt.Errorf("patterns[%d]: {%q, %q} is also patterns[%d]", i, p.Provider, p.EventType, j)
		}
	}
	return nil
}

func validPattern(p string) error {
	if len(p) > maxPatternLen {
		return fmt.Errorf("pattern is %d bytes, longer than %d", len(p), maxPatternLen)
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("pattern %q is not valid UTF-8", p)
	}
	for _, r := range p {
		if unicode.IsControl(r) {
			return fmt.Errorf("pattern %q contains a control character", p)
		}
	}
	return nil
}

// validateLimits checks the rate limit, in-flight limit and breaker
// settings (after WithDefaults), naming the key.
func (h Handler) validateLimits() error {
	switch {
	case h.RateLimit < 0 || h.RateLimit > maxRateLimit || math.IsNaN(h.RateLimit):
		return fmt.Errorf("rate_limit: %g must be between 0 (none) and %d events/s", h.RateLimit, maxRateLimit)
	case h.Burst < 0 || h.Burst > maxLimit:
		return fmt.Errorf("burst: %d must be between 0 and %d", h.Burst, maxLimit)
	case h.Burst > 0 && h.RateLimit == 0:
		return fmt.Errorf("burst: %d is set without rate_limit", h.Burst)
	case h.MaxInFlight < 0 || h.MaxInFlight > maxLimit:
		return fmt.Errorf("max_in_flight: %d must be between 0 (none) and %d", h.MaxInFlight, maxLimit)
	case h.BreakerFailures < 0 || h.BreakerFailures > maxBreakerFailures:
		return fmt.Errorf("breaker_failures: %d must be between 0 (none) and %d", h.BreakerFailures, maxBreakerFailures)
	case h.BreakerProbeInterval != 0 && h.BreakerFailures == 0:
		return fmt.Errorf("breaker_probe_interval: %s is set without breaker_failures", h.BreakerProbeInterval)
	case h.BreakerFailures > 0 && (h.BreakerProbeInterval < time.Second || h.BreakerProbeInterval > 24*time.Hour):
		return fmt.Errorf("breaker_probe_interval: %s must be between 1s and 24h", h.BreakerProbeInterval)
	case h.OrderPolicy != "" && h.OrderKey == "":
		return fmt.Errorf("order_policy: %q is set without order_key", h.OrderPolicy)
	case h.OrderKey != "" && h.OrderPolicy != "block" && h.OrderPolicy != "skip":
		return fmt.Errorf("order_policy: %q is not block or skip", h.OrderPolicy)
	}
	if h.OrderKey != "" {
		if err := validOrderKey(h.OrderKey); err != nil {
			return fmt.Errorf("order_key: %w", err)
		}
	}
	return nil
}

// validOrderKey checks an order key spec: header:Name, or a dot path of
// non-empty segments.
func validOrderKey(k string) error {
	if len(k) > maxOrderKeyLen {
		return fmt.Errorf("%d bytes, longer than %d", len(k), maxOrderKeyLen)
	}
	if name, ok := strings.CutPrefix(k, "header:"); ok {
		if name == "" || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == ':' || r > '~' }) {
			return fmt.Errorf("%q: header:Name needs a header name", k)
		}
		return nil
	}
	for i, seg := range strings.Split(k, ".") {
		if seg == "" || strings.ContainsFunc(seg, unicode.IsControl) {
			return fmt.Errorf("%q: segment %d of the dot path (e.g. data.object.id) is empty", k, i+1)
		}
	}
	return nil
}
