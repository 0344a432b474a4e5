package consumers

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
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
	// n (1-based). Defaults to DefaultBackoff.
	Backoff func(attempt int) time.Duration
	// Timeout bounds one attempt; the handler's context ends then. Defaults
	// to 60s.
	Timeout time.Duration
	// Concurrency caps this handler's attempts reading their event or
	// running in this process; further messages wait unacknowledged. An
	// attempt whose handler returned gives its slot back while its outcome
	// waits for its batch to be written (the streamer's
	// max_leased_per_handler bounds those). Defaults to 64: an attempt spends
	// most of its time waiting on batched statements, so a handler needs many
	// in flight to keep up with ingress (8 held inlet dev to ~750/s).
	Concurrency int
	// Func handles one attempt. Exactly one of Func and TxFunc is required.
	Func HandlerFunc
	// TxFunc handles one attempt inside a transaction that also completes
	// the job (exactly-once effects in this PostgreSQL; see
	// [TxHandlerFunc]). Exactly one of Func and TxFunc is required.
	TxFunc TxHandlerFunc
}

const (
	defaultMaxAttempts = 25
	defaultTimeout     = 60 * time.Second
	defaultConcurrency = 64
	maxPatternLen      = 200
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
	return h
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
	}
	if h.MaxAttempts < 1 {
		return fmt.Errorf("max_attempts: %d must be at least 1", h.MaxAttempts)
	}
	if h.Timeout <= 0 {
		return fmt.Errorf("timeout: %s must be positive", h.Timeout)
	}
	if h.Concurrency < 1 {
		return fmt.Errorf("concurrency: %d must be at least 1", h.Concurrency)
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
