package consumers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/schema"
)

// Section is the consumer: section of inlet.yaml: the ready consumers
// (handlers of Inlet's own: log, http-forward) that inlet consumer and inlet
// dev run. A program using this package as a library does not need it.
type Section struct {
	// Handlers are the ready consumers to run, each its own subscription and
	// its own jobs.
	Handlers []ReadyHandler `yaml:"handlers"`
	// LeaseExtend is how far each lease extension of a running handler
	// pushes its lease (Config.LeaseExtend). Defaults to 30s.
	LeaseExtend time.Duration `yaml:"lease_extend"`
	// DBRole is assumed after connecting. "" keeps the login role. Defaults
	// to "webhook_worker".
	DBRole *string `yaml:"db_role"`
	// HealthListen serves GET /healthz, /readyz and /metrics for `inlet
	// consumer`. Defaults to "127.0.0.1:8082": this machine only, so
	// set it (":8082") where probes or Prometheus come from elsewhere, as in
	// Kubernetes.
	HealthListen string `yaml:"health_listen"`
}

// ReadyHandler is one entry of consumer.handlers: a ready consumer.
type ReadyHandler struct {
	// Name is the handler (jobs.handler, the topic). Required; lower-case
	// letters, digits, '-' and '_'.
	Name string `yaml:"name"`
	// Type is "log" (metadata to the log) or "http-forward" (POST the raw
	// body and provider headers to URL, signed). Required.
	Type string `yaml:"type"`
	// Provider is a glob over the source name. Defaults to "*".
	Provider string `yaml:"provider"`
	// EventType is a glob over the event type. Defaults to "*".
	EventType string `yaml:"event_type"`
	// Filter is a CEL expression an event must also pass (event.source,
	// event.type, event.headers, event.occurred_at, payload), e.g.
	// `payload.data.object.amount > 10000`. Defaults to "": none.
	Filter string `yaml:"filter"`
	// MaxAttempts before dead_letter. Defaults to 25.
	MaxAttempts int `yaml:"max_attempts"`
	// Concurrency is the handler's in-flight attempts in this process.
	// Defaults to 64.
	Concurrency int `yaml:"concurrency"`
	// Timeout bounds one attempt, at most 24h. Defaults to 60s
	// (http-forward: 10s).
	Timeout time.Duration `yaml:"timeout"`
	// URL is where http-forward POSTs. Required for http-forward.
	URL string `yaml:"url"`
	// Secret signs http-forward requests (Inlet-Signature). Required for
	// http-forward, at least 16 bytes.
	Secret string `yaml:"secret"`
	// RateLimit caps the handler's job starts per second across every
	// replica (Handler.RateLimit). Defaults to 0: none.
	RateLimit float64 `yaml:"rate_limit"`
	// Burst is the jobs that may start at once under rate_limit. Defaults to
	// rate_limit rounded up.
	Burst int `yaml:"burst"`
	// MaxInFlight caps the handler's jobs leased at once across every
	// replica. Defaults to 0: none.
	MaxInFlight int `yaml:"max_in_flight"`
	// BreakerFailures opens the handler's circuit after that many
	// consecutive failures (Handler.BreakerFailures). Defaults to 0: no
	// breaker.
	BreakerFailures int `yaml:"breaker_failures"`
	// BreakerProbeInterval is the time between probes of an open circuit.
	// Defaults to 30s.
	BreakerProbeInterval time.Duration `yaml:"breaker_probe_interval"`
	// OrderKey orders the handler's jobs per entity (Handler.OrderKey): a
	// dot path into the payload or header:Name. Defaults to "": unordered.
	OrderKey string `yaml:"order_key"`
	// OrderPolicy is block (default) or skip: whether a dead-lettered job
	// holds back the later jobs of its key.
	OrderPolicy string `yaml:"order_policy"`
}

// WithDefaults returns a copy with every unset field, the handlers'
// included, at its default. It does not modify s's Handlers slice.
func (s Section) WithDefaults() Section {
	s.LeaseExtend = cmp.Or(s.LeaseExtend, defaultLeaseExtend)
	if s.DBRole == nil {
		r := schema.WorkerRole
		s.DBRole = &r
	}
	s.HealthListen = cmp.Or(s.HealthListen, "127.0.0.1:8082")
	if s.Handlers != nil {
		hs := make([]ReadyHandler, len(s.Handlers))
		for i, h := range s.Handlers {
			h.Provider = cmp.Or(h.Provider, "*")
			h.EventType = cmp.Or(h.EventType, "*")
			h.MaxAttempts = cmp.Or(h.MaxAttempts, 25)
			h.Concurrency = cmp.Or(h.Concurrency, 64)
			if h.Type == "http-forward" {
				h.Timeout = cmp.Or(h.Timeout, 10*time.Second)
			}
			h.Timeout = cmp.Or(h.Timeout, 60*time.Second)
			hs[i] = h
		}
		s.Handlers = hs
	}
	return s
}

var readyHandlerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Validate checks the section (after WithDefaults) and names the first bad
// key. That consumer.lease_extend suits streamer.lease_duration is checked
// where both sections are known (inletyaml).
func (s Section) Validate() error {
	if s.HealthListen != "" && s.HealthListen != "off" {
		if _, port, err := net.SplitHostPort(s.HealthListen); err != nil {
			return fmt.Errorf("consumer.health_listen: %q is not host:port (\":8082\", \"127.0.0.1:8082\")", s.HealthListen)
		} else if n, err := strconv.Atoi(port); err == nil && (n < 0 || n > 65535) {
			return fmt.Errorf("consumer.health_listen: port %d of %q is not between 0 and 65535", n, s.HealthListen)
		} else if _, lerr := net.LookupPort("tcp", port); err != nil && lerr != nil {
			return fmt.Errorf("consumer.health_listen: port %q of %q is neither a number nor a known service", port, s.HealthListen)
		}
	}
	if s.LeaseExtend < time.Second {
		return fmt.Errorf("consumer.lease_extend: %s must be at least 1s", s.LeaseExtend)
	}
	seen := map[string]int{}
	for i, h := range s.Handlers {
		field := fmt.Sprintf("consumer.handlers[%d]", i)
		if !readyHandlerName.MatchString(h.Name) {
			return fmt.Errorf("%s.name: %q must be 1-63 lower-case letters, digits, '-' or '_'", field, h.Name)
		}
		if j, dup := seen[h.Name]; dup {
			return fmt.Errorf("%s.name: %q is already the name of consumer.handlers[%d]", field, h.Name, j)
		}
		seen[h.Name] = i
		switch h.Type {
		case "log":
		case "http-forward":
			// The URL may hold credentials: the message never quotes it.
			if err := CheckTargetURL(h.URL); err != nil {
				return fmt.Errorf("%s.url: must be an http:// or https:// URL with a host: %w (not quoted here: it may hold credentials)", field, err)
			}
			if len(h.Secret) < 16 {
				return fmt.Errorf("%s.secret: at least 16 bytes required to sign forwarded requests", field)
			}
		case "":
			return fmt.Errorf("%s.type: required (log or http-forward)", field)
		default:
			return fmt.Errorf("%s.type: %q is not log or http-forward", field, h.Type)
		}
		if h.MaxAttempts < 1 || h.Concurrency < 1 || h.Timeout <= 0 {
			return fmt.Errorf("%s: max_attempts, concurrency and timeout must be positive", field)
		}
		// What New checks at start, named as YAML keys here, so that
		// `inlet config check` refuses what the consumer would.
		if h.Timeout > maxTimeout {
			return fmt.Errorf("%s.timeout: %s must be at most 24h", field, h.Timeout)
		}
		if h.MaxAttempts > math.MaxInt32 {
			return fmt.Errorf("%s.max_attempts: %d must be at most %d (the database's integer)", field, h.MaxAttempts, math.MaxInt32)
		}
		if err := validPattern(h.Provider); err != nil {
			return fmt.Errorf("%s.provider: %w", field, err)
		}
		if err := validPattern(h.EventType); err != nil {
			return fmt.Errorf("%s.event_type: %w", field, err)
		}
		// The limits' own checks, named as YAML keys.
		if err := h.Handler(func(context.Context, *Event) error { return nil }).WithDefaults().validateLimits(); err != nil {
			return fmt.Errorf("%s.%w", field, err)
		}
	}
	return nil
}

// Handler is the SDK Handler of the entry, running f (built from Type).
func (h ReadyHandler) Handler(f HandlerFunc) Handler {
	return Handler{
		Name:        h.Name,
		Provider:    h.Provider,
		EventType:   h.EventType,
		Filter:      h.Filter,
		MaxAttempts: h.MaxAttempts,
		Concurrency: h.Concurrency,
		Timeout:     h.Timeout,
		Func:        f,

		RateLimit:            h.RateLimit,
		Burst:                h.Burst,
		MaxInFlight:          h.MaxInFlight,
		BreakerFailures:      h.BreakerFailures,
		BreakerProbeInterval: h.BreakerProbeInterval,
		OrderKey:             h.OrderKey,
		OrderPolicy:          h.OrderPolicy,
	}
}

// CheckTargetURL checks the URL a ready consumer posts to (http-forward's):
// an http or https URL with a host name (http://:8080/ would dial this
// machine) and, when it names one, a port in 1-65535. Its errors never
// quote the URL, which may hold credentials.
func CheckTargetURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("not a valid URL")
	case !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https"):
		return fmt.Errorf("scheme %q must be http or https", u.Scheme)
	case u.Hostname() == "":
		return errors.New("no host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return errors.New("port not in 1-65535")
		}
	}
	return nil
}
