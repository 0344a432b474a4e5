package consumers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/filter"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	// New only checks the pool is set; a zero pool is never used here.
	pool := new(pgxpool.Pool)
	sub := bus.NewGoChannel(nil)
	h := func(name string) consumers.Handler { return consumers.Handler{Name: name, Func: ok} }
	cases := []struct {
		name string
		cfg  consumers.Config
		want string // "" = valid
	}{
		{"valid", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{h("billing")}}, ""},
		{"no pool", consumers.Config{Subscriber: sub, Handlers: []consumers.Handler{h("billing")}}, "pool: required"},
		{"no subscriber", consumers.Config{Pool: pool, Handlers: []consumers.Handler{h("billing")}}, "subscriber: required"},
		{"no handlers", consumers.Config{Pool: pool, Subscriber: sub}, "handlers: at least one"},
		{"duplicate name", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{h("billing"), h("billing")}},
			`handlers[1].name: "billing" is also handlers[0]`},
		{"empty name", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{{Func: ok}}}, "handlers[0].name: required"},
		{"bad name", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{h("ok"), h("Bad.Name")}}, `handlers[1].name: handler name "Bad.Name"`},
		{"no func", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{{Name: "x"}}}, "handlers[0].func: required"},
		{"negative attempts", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{{Name: "x", Func: ok, MaxAttempts: -1}}},
			"handlers[0].max_attempts"},
		{"attempts past int4", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{{Name: "x", Func: ok, MaxAttempts: 1 << 40}}},
			"handlers[0].max_attempts: 1099511627776 must be at most 2147483647"},
		{"tx options without tx_func", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{{Name: "x", Func: ok,
			TxOptions: pgx.TxOptions{IsoLevel: pgx.Serializable}}}}, "handlers[0].tx_options: set only with tx_func"},
		{"read-only tx", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{{Name: "x",
			TxFunc: func(context.Context, pgx.Tx, *consumers.Event) error { return nil }, TxOptions: pgx.TxOptions{AccessMode: pgx.ReadOnly}}}},
			"handlers[0].tx_options: access mode read only"},
		{"negative timeout", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{{Name: "x", Func: ok, Timeout: -time.Second}}},
			"handlers[0].timeout"},
		{"negative concurrency", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{{Name: "x", Func: ok, Concurrency: -2}}},
			"handlers[0].concurrency"},
		{"duplicate pattern", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{{Name: "x", Func: ok,
			Patterns: []consumers.Pattern{{Provider: "stripe"}, {Provider: "github"}, {Provider: "stripe", EventType: "*"}}}}},
			`handlers[0].patterns[2]: {"stripe", "*"} is also patterns[0]`},
		{"control char", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{{Name: "x", Func: ok, EventType: "a\nb"}}},
			"handlers[0].patterns[0].event_type"},
		{"bad filter", consumers.Config{Pool: pool, Subscriber: sub, CheckFilter: filter.Check, Handlers: []consumers.Handler{{Name: "x", Func: ok, Filter: `payload.amount >`}}},
			`handlers[0].filter: filter "payload.amount >": ERROR: <input>:1:17`},
		{"filter not a bool", consumers.Config{Pool: pool, Subscriber: sub, CheckFilter: filter.Check, Handlers: []consumers.Handler{{Name: "x", Func: ok, Filter: `"x"`}}},
			"handlers[0].filter: filter"},
		{"good filter", consumers.Config{Pool: pool, Subscriber: sub, CheckFilter: filter.Check, Handlers: []consumers.Handler{{Name: "x", Func: ok, Filter: `payload.amount > 10`}}}, ""},
		// Without a compiler nothing would catch a bad filter before ingress.
		{"filter unchecked", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{{Name: "x", Func: ok, Filter: `payload.amount > 10`}}},
			"handlers[0].filter: set Config.CheckFilter"},
		{"tiny lease", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{h("x")}, LeaseExtend: time.Millisecond},
			"lease_extend"},
		// PostgreSQL text refuses both (review helper-137).
		{"worker id not UTF-8", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{h("x")}, WorkerID: "replica\xff"},
			`worker_id: "replica\xff" is not valid UTF-8`},
		{"worker id with NUL", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{h("x")}, WorkerID: "replica\x00-1"},
			`worker_id: "replica\x00-1" contains a NUL byte`},
		// A nil pointer in an interface is not nil (review helper-137).
		{"typed nil metrics", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{h("x")}, Metrics: (*countingMetrics)(nil)},
			"metrics: a nil *consumers_test.countingMetrics"},
		{"typed nil tracer provider", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{h("x")}, TracerProvider: (*spanRecorder)(nil)},
			"tracer_provider: a nil *consumers_test.spanRecorder"},
		{"timeout past 24h", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{{Name: "x", Func: ok, Timeout: 25 * time.Hour}}},
			"handlers[0].timeout: 25h0m0s must be positive and at most 24h"},
		{"timeout of 24h", consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{{Name: "x", Func: ok, Timeout: 24 * time.Hour}}}, ""},
	}
	for _, c := range cases {
		_, err := consumers.New(c.cfg)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	in := consumers.Config{Handlers: []consumers.Handler{
		{Name: "a", Func: ok},
		{Name: "b", Func: ok, Provider: "ignored", Patterns: []consumers.Pattern{{Provider: "stripe"}, {EventType: "push"}}},
	}}
	c := in.WithDefaults()
	if c.LeaseExtend != 30*time.Second || c.Logger == nil || c.WorkerID == "" {
		t.Errorf("defaults: lease_extend %s, logger %v, worker id %q", c.LeaseExtend, c.Logger, c.WorkerID)
	}
	a := c.Handlers[0]
	if a.MaxAttempts != 25 || a.Timeout != 60*time.Second || a.Concurrency != 64 || a.Backoff == nil {
		t.Errorf("handler defaults: %+v", a)
	}
	if len(a.Patterns) != 1 || a.Patterns[0] != (consumers.Pattern{Provider: "*", EventType: "*"}) {
		t.Errorf("default patterns: %+v", a.Patterns)
	}
	want := []consumers.Pattern{{Provider: "stripe", EventType: "*"}, {Provider: "*", EventType: "push"}}
	if b := c.Handlers[1].Patterns; len(b) != 2 || b[0] != want[0] || b[1] != want[1] {
		t.Errorf("explicit patterns: %+v, want %+v", b, want)
	}
	if in.Handlers[1].Patterns[0].EventType != "" {
		t.Error("WithDefaults modified the caller's patterns")
	}
}

// Limits out of range stop the service at start, naming the setting.
func TestLimitSettingsOutOfRangeAreRejected(t *testing.T) {
	for _, tc := range []struct {
		h    consumers.ReadyHandler
		want string
	}{
		{consumers.ReadyHandler{RateLimit: -1}, "consumer.handlers[0].rate_limit: -1 must be between 0 (none) and 1000000 events/s"},
		{consumers.ReadyHandler{Burst: 5}, "consumer.handlers[0].burst: 5 is set without rate_limit"},
		{consumers.ReadyHandler{MaxInFlight: -3}, "consumer.handlers[0].max_in_flight: -3 must be between 0 (none) and 1000000"},
		{consumers.ReadyHandler{BreakerFailures: 20000}, "consumer.handlers[0].breaker_failures: 20000 must be between 0 (none) and 10000"},
		{consumers.ReadyHandler{BreakerFailures: 3, BreakerProbeInterval: time.Millisecond}, "consumer.handlers[0].breaker_probe_interval: 1ms must be between 1s and 24h"},
		{consumers.ReadyHandler{BreakerProbeInterval: time.Second}, "consumer.handlers[0].breaker_probe_interval: 1s is set without breaker_failures"},
		{consumers.ReadyHandler{OrderPolicy: "skip"}, `consumer.handlers[0].order_policy: "skip" is set without order_key`},
		{consumers.ReadyHandler{OrderKey: "data.object.id", OrderPolicy: "drop"}, `consumer.handlers[0].order_policy: "drop" is not block or skip`},
		{consumers.ReadyHandler{OrderKey: "data..id"}, `consumer.handlers[0].order_key: "data..id": segment 2 of the dot path (e.g. data.object.id) is empty`},
		{consumers.ReadyHandler{OrderKey: "header:"}, `consumer.handlers[0].order_key: "header:": header:Name needs a header name`},
		{consumers.ReadyHandler{Timeout: 48 * time.Hour}, "consumer.handlers[0].timeout: 48h0m0s must be at most 24h"},
	} {
		tc.h.Name, tc.h.Type = "h", "log"
		err := consumers.Section{Handlers: []consumers.ReadyHandler{tc.h}}.WithDefaults().Validate()
		if err == nil || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", tc.h, err, tc.want)
		}
	}
	ok := consumers.ReadyHandler{Name: "h", Type: "log", RateLimit: 2.5, MaxInFlight: 4, BreakerFailures: 5, OrderKey: "header:x-shop-id"}
	if err := (consumers.Section{Handlers: []consumers.ReadyHandler{ok}}).WithDefaults().Validate(); err != nil {
		t.Errorf("valid limits rejected: %v", err)
	}
}
