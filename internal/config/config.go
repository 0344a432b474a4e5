package config

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/inlet-dev/inlet/ingress/verify"
)

// Config is the whole file. Every section is optional; defaults make `inlet dev`
// work with none.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string. Defaults to $DATABASE_URL.
	DatabaseURL string `yaml:"database_url"`
	// Ingress configures the webhook receiver.
	Ingress Ingress `yaml:"ingress"`
	// Sources are the webhook senders Inlet accepts, one per URL path
	// (POST /webhooks/{name}).
	Sources []Source `yaml:"sources"`
	// Streamer configures the service that hands due jobs to consumers.
	Streamer Streamer `yaml:"streamer"`
	// Consumer configures the ready consumers this process runs.
	Consumer Consumer `yaml:"consumer"`
	// Bus selects the transport between streamer and consumers.
	Bus Bus `yaml:"bus"`
	// Audit configures the tamper-evidence sealer.
	Audit Audit `yaml:"audit"`
	// Admin configures the operator tools: inlet events, dlq and replay, and
	// the admin HTTP API.
	Admin Admin `yaml:"admin"`
	// Retention configures inlet retention: how long the event log is kept
	// and how it is partitioned.
	Retention Retention `yaml:"retention"`
	// Heartbeat configures the silent-source detector.
	Heartbeat Heartbeat `yaml:"heartbeat"`
	// Tracing configures OpenTelemetry span export.
	Tracing Tracing `yaml:"tracing"`
	// Log configures logging.
	Log Log `yaml:"log"`
	// Relay configures inlet relay, the pass-through mode (relay.go).
	Relay Relay `yaml:"relay"`
	// Reporter configures the metadata report to an outside control plane.
	Reporter Reporter `yaml:"reporter"`
	// ControlPlane configures inlet control-plane.
	ControlPlane ControlPlane `yaml:"control_plane"`
}

// Streamer configures claiming and publishing.
type Streamer struct {
	// Wake is what wakes the streamer besides its poll tick: "notify"
	// (LISTEN/NOTIFY), "replication" (logical replication of the jobs table:
	// needs wal_level=logical and a role with REPLICATION) or "poll" (the
	// tick alone). Defaults to "notify".
	Wake string `yaml:"wake"`
	// SlotName is the replication slot of streamer.wake replication. A slot
	// has one reader: every streamer replica needs its own stable name.
	// Defaults to "inlet_streamer".
	SlotName string `yaml:"slot_name"`
	// BatchSize is the most jobs one claim leases. Defaults to 100.
	BatchSize int `yaml:"batch_size"`
	// LeaseDuration is how long a consumer has to report or extend before
	// the job is taken back. Defaults to 60s.
	LeaseDuration time.Duration `yaml:"lease_duration"`
	// MaxLeasedPerHandler stops leasing for a handler that already has this
	// many jobs leased, so a lagging handler's backlog does not sit leased in
	// the bus until the leases expire. Defaults to 5000.
	MaxLeasedPerHandler int `yaml:"max_leased_per_handler"`
	// PollInterval is the fallback wake-up. Defaults to 1s.
	PollInterval time.Duration `yaml:"poll_interval"`
	// ReapInterval is how often expired leases are looked for. Defaults to 5s.
	ReapInterval time.Duration `yaml:"reap_interval"`
	// DBRole is assumed after connecting. "" keeps the login role. Defaults
	// to "webhook_streamer".
	DBRole *string `yaml:"db_role"`
	// HealthListen serves GET /healthz, /readyz and /metrics for `inlet
	// streamer`. Defaults to "127.0.0.1:8081": this machine only, so
	// set it (":8081") where probes or Prometheus come from elsewhere, as in
	// Kubernetes.
	HealthListen string `yaml:"health_listen"`
}

// Consumer configures the ready consumers.
type Consumer struct {
	// Handlers are the ready consumers to run, each its own subscription and
	// its own jobs.
	Handlers []Handler `yaml:"handlers"`
	// LeaseExtend is how far each heartbeat of a running handler pushes its
	// lease. Defaults to 30s.
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

// Handler is one ready consumer.
type Handler struct {
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
	// Defaults to 8.
	Concurrency int `yaml:"concurrency"`
	// Timeout bounds one attempt. Defaults to 60s (http-forward: 10s).
	Timeout time.Duration `yaml:"timeout"`
	// URL is where http-forward POSTs. Required for http-forward.
	URL string `yaml:"url"`
	// Secret signs http-forward requests (Inlet-Signature). Required for
	// http-forward, at least 16 bytes.
	Secret string `yaml:"secret"`
}

// Audit configures the sealer, which writes Merkle checkpoints over the
// event log (webhook_ingress.audit_checkpoints; `inlet audit verify` checks
// them).
type Audit struct {
	// SealEvery runs the sealer inside inlet streamer (and inlet dev) at this
	// interval. 0 leaves it to a separate `inlet audit seal --every`.
	// Defaults to 0 for inlet streamer and 10s in inlet dev.
	SealEvery time.Duration `yaml:"seal_every"`
	// Grace is how old an event must be before it is sealed. Defaults to 5s.
	Grace time.Duration `yaml:"grace"`
	// DBRole is the role the sealer assumes. Defaults to "webhook_sealer".
	DBRole *string `yaml:"db_role"`
}

// Bus selects the transport.
type Bus struct {
	// Kind is "gochannel" (in-process: streamer and consumers in one process,
	// as in inlet dev) or "nats" (NATS JetStream: separate processes and
	// hosts). Defaults to "gochannel".
	Kind string `yaml:"kind"`
	// URL of the NATS server(s), comma-separated. Required for nats.
	URL string `yaml:"url"`
	// AckWait is how long JetStream waits for a consumer to acknowledge a
	// reference before redelivering it. Defaults to 30s.
	AckWait time.Duration `yaml:"ack_wait"`
	// Replicas of the INLET_JOBS stream in a NATS cluster. Defaults to 1.
	Replicas int `yaml:"replicas"`
	// Storage of the INLET_JOBS stream: "file" (references survive a NATS
	// restart) or "memory" (faster; a NATS restart loses the references in
	// the stream, and lease expiry publishes them again, so nothing is lost
	// but delivery waits up to streamer.lease_duration). Defaults to "file".
	// A stream's storage cannot change in place: delete the stream (nats
	// stream rm INLET_JOBS) with every service stopped to switch.
	Storage string `yaml:"storage"`
}

// Admin configures the operator tools and the admin HTTP API.
type Admin struct {
	// Listen is the address of the admin HTTP API, served by inlet ingress
	// and inlet dev on a listener of its own (never the webhook port).
	// Defaults to "": no admin API.
	Listen string `yaml:"listen"`
	// Token is the bearer token of the admin API. Required when Listen is
	// set, at least 16 bytes.
	Token string `yaml:"token"`
	// DatabaseURL is the connection string of the operator tools, for a
	// login role of its own (a member of DBRole) so the ingress login need
	// not be one. Defaults to "": DatabaseURL.
	DatabaseURL string `yaml:"database_url"`
	// DBRole is assumed after connecting. "" keeps the login role. Defaults
	// to "webhook_operator".
	DBRole *string `yaml:"db_role"`
}

// Retention configures inlet retention, which runs as the owner of
// webhook_ingress (the role of inlet migrate): it creates the period
// partitions of events, jobs and job_attempts ahead of time and drops whole
// periods older than MaxAge once their jobs are finished and their events
// sealed. inlet migrate and inlet dev create partitions ahead too.
type Retention struct {
	// MaxAge is how long events are kept: days (90d), weeks (13w) or a Go
	// duration (2160h). Defaults to "": kept forever.
	MaxAge string `yaml:"max_age"`
	// PartitionInterval is the length of new partitions: day, week or month
	// (UTC). Existing partitions keep theirs. Defaults to week.
	PartitionInterval string `yaml:"partition_interval"`
	// Ahead is how many periods past the current one get partitions; an
	// event whose period has none lands in the default partition, which is
	// kept forever. Defaults to 4.
	Ahead *int `yaml:"ahead"`
	// LockTimeout bounds each wait for partition locks (creating or dropping
	// a partition briefly locks the table ingress writes). Defaults to 5s.
	LockTimeout time.Duration `yaml:"lock_timeout"`
}

// MaxAgeDuration is MaxAge parsed; 0 when unset.
func (r Retention) MaxAgeDuration() (time.Duration, error) {
	if r.MaxAge == "" {
		return 0, nil
	}
	d, err := ParseAge(r.MaxAge)
	if err != nil {
		return 0, fmt.Errorf("retention.max_age: %w", err)
	}
	return d, nil
}

// ParseAge reads an age: a whole number of days (90d) or weeks (13w), or a Go
// duration (2160h).
func ParseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.Atoi(n)
			if err != nil || v < 0 {
				return 0, fmt.Errorf("age %q: want a whole number before %q (90d, 13w) or a duration (2160h)", s, suffix)
			}
			return time.Duration(v) * unit, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("age %q: want days (90d), weeks (13w) or a duration (2160h)", s)
	}
	return d, nil
}

// Ingress configures the HTTP receiver.
type Ingress struct {
	// Listen is the address of the webhook listener. Defaults to ":8080".
	Listen string `yaml:"listen"`
	// MaxBodyBytes is the largest body accepted; larger requests get 413
	// without being read whole. Defaults to 1 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// ReadTimeout bounds reading one request, headers and body. Defaults to 10s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds handling and answering one request. Defaults to 10s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes idle keep-alive connections. Defaults to 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// StoreTimeout bounds the database write of one webhook; past it the
	// answer is 503 so the provider retries. Defaults to 5s.
	StoreTimeout time.Duration `yaml:"store_timeout"`
	// MaxInflightBytes bounds the request bodies ingress holds in memory at
	// once, from before a body is read until its answer. A request reserves
	// its Content-Length (max_body_bytes when the sender does not say)
	// before reading the body; while the budget is spent it waits unread, so
	// TCP holds the sender back, and one that waits longer than
	// store_timeout is answered 503 + Retry-After (nothing acknowledged, the
	// provider retries). At least max_body_bytes. Defaults to 32 MiB, or
	// max_body_bytes if that is larger.
	MaxInflightBytes int64 `yaml:"max_inflight_bytes"`
	// DBRole is the role ingress assumes (SET ROLE) after connecting, so it
	// runs with the ingress privileges even when the login role has more.
	// Empty string keeps the login role. Defaults to "webhook_ingress_writer".
	DBRole *string `yaml:"db_role"`
	// MetricsListen serves GET /metrics (Prometheus) on a listener of its
	// own, never the public webhook port. In inlet dev it carries every
	// component's metrics. Defaults to "127.0.0.1:8083": this machine only,
	// so set it (":8083") for a Prometheus elsewhere; "off" disables it.
	MetricsListen string `yaml:"metrics_listen"`
	// GroupCommit lets concurrent webhooks share one transaction.
	GroupCommit GroupCommit `yaml:"group_commit"`
}

// GroupCommit configures ingress's group commit: verified webhooks that
// arrive together are stored by one multi-row INSERT and one COMMIT, each
// answered after it with its own stored or duplicate.
type GroupCommit struct {
	// Disabled stores each webhook in a transaction of its own.
	Disabled bool `yaml:"disabled"`
	// MaxBatch is the most webhooks one transaction stores. Defaults to 128.
	MaxBatch int `yaml:"max_batch"`
	// MaxBatchBytes closes a batch once its bodies reach it, so one
	// statement (which the driver copies whole into its buffers) stays
	// small; a webhook larger than it is stored in a batch of its own.
	// Defaults to 1 MiB (a batch of typical webhooks of a few KiB still fills max_batch).
	MaxBatchBytes int64 `yaml:"max_batch_bytes"`
	// MaxWait is how long a batch waits for more after its first webhook.
	// Defaults to 1ms.
	MaxWait time.Duration `yaml:"max_wait"`
	// Committers is how many batches commit at once. Defaults to 4.
	Committers int `yaml:"committers"`
}

// Heartbeat configures the silent-source detector, run by inlet streamer
// (and inlet dev): a source is silent when the time since its last event
// exceeds Factor × the median gap between its recent events, or its fixed
// MaxSilence.
type Heartbeat struct {
	// CheckEvery is how often sources are judged. Defaults to 1m.
	CheckEvery time.Duration `yaml:"check_every"`
	// Disabled turns the detector off.
	Disabled bool `yaml:"disabled"`
	// Factor multiplies the median gap. Defaults to 2.
	Factor float64 `yaml:"factor"`
	// History is how many recent events the median is taken over. Defaults to 50.
	History int `yaml:"history"`
	// MinEvents is the fewest events a median needs. Defaults to 10.
	MinEvents int `yaml:"min_events"`
	// MinSilence is the shortest silence ever reported. Defaults to 1m.
	MinSilence time.Duration `yaml:"min_silence"`
	// MaxSilence is a fixed limit per source name: {stripe: 6h}. A source
	// named here is watched before its first event.
	MaxSilence map[string]time.Duration `yaml:"max_silence"`
	// AlertURL receives a JSON POST when a source goes silent or resumes
	// (source, status, last_seen, threshold_seconds, reason). Defaults to
	// "": log line and metric only. New event types are POSTed here too
	// (status new_event_type).
	AlertURL string `yaml:"alert_url"`
	// TypesEvery is how often the streamer folds the event types stored
	// into event_types, refreshes inlet_events_unrouted_total and reports
	// types never seen before. Defaults to 10s.
	TypesEvery time.Duration `yaml:"types_every"`
	// MaxTypesPerSource caps the distinct event types a source keeps in
	// event_types, the metrics and the alerts; later new types are counted
	// as _other (GitHub's and Shopify's type headers are not signed).
	// Defaults to 100.
	MaxTypesPerSource int `yaml:"max_types_per_source"`
}

// Tracing configures OpenTelemetry tracing: spans from ingress through the
// streamer to each handler attempt, one trace per webhook. Off by default.
type Tracing struct {
	// OTLPEndpoint is the OTLP/HTTP collector (http://otel-collector:4318;
	// spans go to /v1/traces unless the URL has a path). Defaults to "": off.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// SampleRatio is the share of webhooks traced, 0 < r ≤ 1. Defaults to 1.
	SampleRatio float64 `yaml:"sample_ratio"`
}

// Source is one configured webhook sender: its name plus the verifier's
// settings (type, secrets, tolerance and the scheme's own fields; see
// verify.Config for each one and its default).
type Source struct {
	// Name is the URL path segment and the events.provider value. Required;
	// lower-case letters, digits, '-' and '_'.
	Name          string `yaml:"name"`
	verify.Config `yaml:",inline"`
	// RelaySecrets, when set, make ingress accept this source only through
	// inlet relay: each request must carry a valid Inlet-Relay-Signature
	// from one of these secrets (the relay's relay.secrets), checked before
	// the provider's signature, which is verified too. Each at least 16
	// bytes. Defaults to none: direct delivery.
	RelaySecrets []string `yaml:"relay_secrets"`
	// RelayTolerance is how far the relay signature's timestamp may be from
	// now, in either direction. Defaults to 5m.
	RelayTolerance time.Duration `yaml:"relay_tolerance"`
	// StoreJSON keeps a parsed copy of each body in events.payload (jsonb,
	// GIN-indexed) for auditors' JSON-path queries (inlet events list
	// --where). A body that is not JSON PostgreSQL accepts, or is over
	// StoreJSONMaxBytes, gets NULL there and is still stored and delivered.
	// Costs ingest time and disk (the bench measures it). Defaults to true,
	// except for twilio, whose webhooks are form-encoded.
	StoreJSON *bool `yaml:"store_json"`
	// StoreJSONMaxBytes is the largest body copied to payload. Defaults to
	// 256 KiB (DefaultStoreJSONMaxBytes).
	StoreJSONMaxBytes int `yaml:"store_json_max_bytes"`
}

// DefaultStoreJSONMaxBytes is Source.StoreJSONMaxBytes's default.
const DefaultStoreJSONMaxBytes = 256 << 10

// JSONCopy says whether the source keeps a payload copy and up to what size,
// its defaults applied.
func (s Source) JSONCopy() (keep bool, maxBytes int) {
	keep = s.Type != "twilio"
	if s.StoreJSON != nil {
		keep = *s.StoreJSON
	}
	return keep, or(s.StoreJSONMaxBytes, DefaultStoreJSONMaxBytes)
}

// Log configures log/slog output.
type Log struct {
	// Level is debug, info, warn or error. Defaults to info.
	Level string `yaml:"level"`
	// Format is json or text. Defaults to json for services, text for `inlet dev`.
	Format string `yaml:"format"`
}

// The ingress memory bounds by default: with them 256 concurrent 1 MiB
// webhooks keep inlet ingress under 150 MiB resident (go run ./bench -only
// memory).
const (
	DefaultMaxInflightBytes = 32 << 20
	DefaultMaxBatchBytes    = 1 << 20
)

// The database roles the services run as by default.
const (
	DefaultIngressRole  = "webhook_ingress_writer"
	DefaultStreamerRole = "webhook_streamer"
	DefaultWorkerRole   = "webhook_worker"
	DefaultOperatorRole = "webhook_operator"
)

// WithDefaults returns a copy with every unset field at its default.
func (c Config) WithDefaults() Config {
	if c.DatabaseURL == "" {
		c.DatabaseURL = os.Getenv("DATABASE_URL")
	}
	c.Ingress.Listen = or(c.Ingress.Listen, ":8080")
	c.Ingress.MaxBodyBytes = or(c.Ingress.MaxBodyBytes, 1<<20)
	c.Ingress.ReadTimeout = or(c.Ingress.ReadTimeout, 10*time.Second)
	c.Ingress.WriteTimeout = or(c.Ingress.WriteTimeout, 10*time.Second)
	c.Ingress.IdleTimeout = or(c.Ingress.IdleTimeout, 120*time.Second)
	c.Ingress.StoreTimeout = or(c.Ingress.StoreTimeout, 5*time.Second)
	c.Ingress.MaxInflightBytes = or(c.Ingress.MaxInflightBytes, max(DefaultMaxInflightBytes, c.Ingress.MaxBodyBytes))
	if c.Ingress.DBRole == nil {
		r := DefaultIngressRole
		c.Ingress.DBRole = &r
	}
	c.Streamer.Wake = or(c.Streamer.Wake, "notify")
	c.Streamer.SlotName = or(c.Streamer.SlotName, "inlet_streamer")
	c.Streamer.BatchSize = or(c.Streamer.BatchSize, 100)
	c.Streamer.MaxLeasedPerHandler = or(c.Streamer.MaxLeasedPerHandler, 5000)
	c.Streamer.LeaseDuration = or(c.Streamer.LeaseDuration, 60*time.Second)
	c.Streamer.PollInterval = or(c.Streamer.PollInterval, time.Second)
	c.Streamer.ReapInterval = or(c.Streamer.ReapInterval, 5*time.Second)
	if c.Streamer.DBRole == nil {
		r := DefaultStreamerRole
		c.Streamer.DBRole = &r
	}
	c.Streamer.HealthListen = or(c.Streamer.HealthListen, "127.0.0.1:8081")
	c.Ingress.MetricsListen = or(c.Ingress.MetricsListen, "127.0.0.1:8083")
	c.Ingress.GroupCommit.MaxBatch = or(c.Ingress.GroupCommit.MaxBatch, 128)
	c.Ingress.GroupCommit.MaxBatchBytes = or(c.Ingress.GroupCommit.MaxBatchBytes, DefaultMaxBatchBytes)
	c.Ingress.GroupCommit.MaxWait = or(c.Ingress.GroupCommit.MaxWait, time.Millisecond)
	c.Ingress.GroupCommit.Committers = or(c.Ingress.GroupCommit.Committers, 4)
	c.Heartbeat.CheckEvery = or(c.Heartbeat.CheckEvery, time.Minute)
	c.Tracing.SampleRatio = or(c.Tracing.SampleRatio, 1)
	c.Heartbeat.Factor = or(c.Heartbeat.Factor, 2)
	c.Heartbeat.History = or(c.Heartbeat.History, 50)
	c.Heartbeat.MinEvents = or(c.Heartbeat.MinEvents, 10)
	c.Heartbeat.MinSilence = or(c.Heartbeat.MinSilence, time.Minute)
	c.Heartbeat.TypesEvery = or(c.Heartbeat.TypesEvery, 10*time.Second)
	c.Heartbeat.MaxTypesPerSource = or(c.Heartbeat.MaxTypesPerSource, 100)
	c.Consumer.HealthListen = or(c.Consumer.HealthListen, "127.0.0.1:8082")
	c.Bus.AckWait = or(c.Bus.AckWait, 30*time.Second)
	c.Bus.Replicas = or(c.Bus.Replicas, 1)
	c.Bus.Storage = or(c.Bus.Storage, "file")
	c.Consumer.LeaseExtend = or(c.Consumer.LeaseExtend, 30*time.Second)
	if c.Consumer.DBRole == nil {
		r := DefaultWorkerRole
		c.Consumer.DBRole = &r
	}
	for i := range c.Consumer.Handlers {
		h := &c.Consumer.Handlers[i]
		h.Provider = or(h.Provider, "*")
		h.EventType = or(h.EventType, "*")
		h.MaxAttempts = or(h.MaxAttempts, 25)
		h.Concurrency = or(h.Concurrency, 64)
		if h.Type == "http-forward" {
			h.Timeout = or(h.Timeout, 10*time.Second)
		}
		h.Timeout = or(h.Timeout, 60*time.Second)
	}
	c.Bus.Kind = or(c.Bus.Kind, "gochannel")
	c.Audit.Grace = or(c.Audit.Grace, 5*time.Second)
	if c.Audit.DBRole == nil {
		r := "webhook_sealer"
		c.Audit.DBRole = &r
	}
	if c.Admin.DBRole == nil {
		r := DefaultOperatorRole
		c.Admin.DBRole = &r
	}
	c.Retention.PartitionInterval = or(c.Retention.PartitionInterval, "week")
	if c.Retention.Ahead == nil {
		n := 4
		c.Retention.Ahead = &n
	}
	c.Retention.LockTimeout = or(c.Retention.LockTimeout, 5*time.Second)
	c.Log.Level = or(c.Log.Level, "info")
	c.Relay = c.Relay.WithDefaults()
	c.reportingDefaults()
	return c
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

var sourceName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Validate checks the configuration (after WithDefaults) and names the first
// bad field. Scheme-specific checks of a source (secret formats) are the
// verifier's, made when ingress starts.
func (c Config) Validate() error {
	if c.Ingress.MaxBodyBytes < 0 {
		return errors.New("ingress.max_body_bytes: must be positive")
	}
	for name, d := range map[string]time.Duration{
		"ingress.read_timeout": c.Ingress.ReadTimeout, "ingress.write_timeout": c.Ingress.WriteTimeout,
		"ingress.idle_timeout": c.Ingress.IdleTimeout, "ingress.store_timeout": c.Ingress.StoreTimeout,
	} {
		if d < 0 {
			return fmt.Errorf("%s: must not be negative, got %s", name, d)
		}
	}
	if gc := c.Ingress.GroupCommit; gc.MaxBatch < 1 || gc.MaxBatch > 10000 || gc.MaxWait < 0 || gc.MaxWait > time.Second || gc.Committers < 1 || gc.Committers > 64 {
		return fmt.Errorf("ingress.group_commit: max_batch %d (1..10000), max_wait %s (0..1s), committers %d (1..64)", gc.MaxBatch, gc.MaxWait, gc.Committers)
	}
	if c.Ingress.MaxInflightBytes < c.Ingress.MaxBodyBytes {
		return fmt.Errorf("ingress.max_inflight_bytes: %d is less than ingress.max_body_bytes (%d), so a body of the largest size could never be read",
			c.Ingress.MaxInflightBytes, c.Ingress.MaxBodyBytes)
	}
	if c.Ingress.GroupCommit.MaxBatchBytes < 1 {
		return fmt.Errorf("ingress.group_commit.max_batch_bytes: %d must be positive", c.Ingress.GroupCommit.MaxBatchBytes)
	}
	if c.Ingress.StoreTimeout >= c.Ingress.WriteTimeout {
		return fmt.Errorf("ingress.store_timeout (%s) must be shorter than ingress.write_timeout (%s), or no answer is written", c.Ingress.StoreTimeout, c.Ingress.WriteTimeout)
	}
	seen := map[string]int{}
	for i, s := range c.Sources {
		field := fmt.Sprintf("sources[%d]", i)
		if !sourceName.MatchString(s.Name) {
			return fmt.Errorf("%s.name: %q must be 1-63 lower-case letters, digits, '-' or '_'", field, s.Name)
		}
		if j, dup := seen[s.Name]; dup {
			return fmt.Errorf("%s.name: %q is already the name of sources[%d]", field, s.Name, j)
		}
		seen[s.Name] = i
		if s.Type == "" {
			return fmt.Errorf("%s.type: required", field)
		}
		if s.StoreJSONMaxBytes < 0 {
			return fmt.Errorf("%s.store_json_max_bytes: must not be negative, got %d", field, s.StoreJSONMaxBytes)
		}
		if len(s.Secrets) == 0 {
			return fmt.Errorf("%s.secrets: at least one secret is required", field)
		}
		for k, sec := range s.Secrets {
			if strings.TrimSpace(sec) == "" {
				return fmt.Errorf("%s.secrets[%d]: empty", field, k)
			}
		}
		if s.Tolerance < 0 {
			return fmt.Errorf("%s.tolerance: must not be negative", field)
		}
	}
	if err := c.validatePipeline(); err != nil {
		return err
	}
	if err := c.validateTracing(); err != nil {
		return err
	}
	if err := c.validateHeartbeat(); err != nil {
		return err
	}
	if err := c.validateRetention(); err != nil {
		return err
	}
	if err := c.validateAdmin(); err != nil {
		return err
	}
	if err := c.validateRelay(); err != nil {
		return err
	}
	if err := c.validateReporting(); err != nil {
		return err
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "", "json", "text":
	default:
		return fmt.Errorf("log.format: %q is not json or text", c.Log.Format)
	}
	return nil
}

// Source returns the source named name.
func (c Config) Source(name string) (Source, bool) {
	for _, s := range c.Sources {
		if s.Name == name {
			return s, true
		}
	}
	return Source{}, false
}

// Service says which inlet service reads the file. A service reads only its
// own sections: the others are dropped before ${VAR} expansion, so a streamer
// or consumer never needs (nor holds) the webhook signing secrets, and
// ingress never needs the consumers' forwarding secrets.
type Service int

// The services with sections of their own; AllSections reads everything
// (inlet dev, and tools that act for several services).
const (
	AllSections Service = iota
	IngressService
	StreamerService
	ConsumerService
	RelayService
	ControlPlaneService
)

var droppedSections = map[Service][]string{
	IngressService:  {"streamer", "consumer", "bus", "audit", "retention", "reporter", "control_plane", "relay"},
	StreamerService: {"ingress", "sources", "consumer", "admin", "retention", "control_plane", "relay"},
	ConsumerService: {"ingress", "sources", "streamer", "admin", "audit", "retention", "heartbeat", "reporter", "control_plane", "relay"},
	// The relay stores nothing: no database, only its sources and itself.
	RelayService: {"database_url", "ingress", "streamer", "consumer", "bus", "audit", "admin", "retention", "heartbeat", "tracing", "reporter", "control_plane"},
	// The control plane is another party's service: it reads only its own
	// section, never the data plane's database or secrets.
	ControlPlaneService: {"database_url", "ingress", "sources", "streamer", "consumer", "bus", "audit", "admin", "retention", "heartbeat", "tracing", "reporter", "relay"},
}

// Reads reports whether service reads the top-level section (a YAML key of
// the file such as "sources"); its ${VAR}s need to be set only where it does.
func (s Service) Reads(section string) bool {
	return !slices.Contains(droppedSections[s], section)
}

// ServiceOf maps an inlet subcommand to the sections it reads: ingress,
// streamer and consumer have their own; everything else reads the whole file.
func ServiceOf(subcommand string) Service {
	switch subcommand {
	case "ingress":
		return IngressService
	case "streamer":
		return StreamerService
	case "consumer":
		return ConsumerService
	case "relay":
		return RelayService
	case "control-plane":
		return ControlPlaneService
	}
	return AllSections
}

// Load reads, expands, parses, defaults and validates the whole file at path.
func Load(path string) (Config, error) { return LoadFor(path, AllSections) }

// LoadFor is Load of the sections service reads.
func LoadFor(path string, service Service) (Config, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator's own -config file
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	c, err := ParseFor(b, os.LookupEnv, service)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

//go:embed dev.yaml
var devYAML []byte

// Dev is the embedded configuration of `inlet dev` when no file is given: three
// demo sources with development secrets (overridable by the same environment
// variables a real file would use).
func Dev() (Config, error) {
	c, err := Parse(devYAML, os.LookupEnv)
	if err != nil {
		return Config{}, fmt.Errorf("embedded dev config: %w", err)
	}
	return c, nil
}

// Parse is Load on bytes, with lookup resolving ${VAR}.
func Parse(b []byte, lookup func(string) (string, bool)) (Config, error) {
	return ParseFor(b, lookup, AllSections)
}

// ParseFor is Parse of the sections service reads.
func ParseFor(b []byte, lookup func(string) (string, bool), service Service) (Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return Config{}, err
	}
	dropSections(&root, droppedSections[service])
	if err := expandNode(&root, lookup); err != nil {
		return Config{}, err
	}
	var c Config
	if len(root.Content) > 0 {
		// Re-encode the expanded tree and decode strictly, so unknown fields fail.
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		if err := enc.Encode(&root); err != nil {
			return Config{}, err
		}
		dec := yaml.NewDecoder(&buf)
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil {
			return Config{}, err
		}
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// dropSections removes the named top-level keys of a document.
func dropSections(root *yaml.Node, names []string) {
	if len(names) == 0 || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return
	}
	m := root.Content[0]
	kept := m.Content[:0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if !slices.Contains(names, m.Content[i].Value) {
			kept = append(kept, m.Content[i], m.Content[i+1])
		}
	}
	m.Content = kept
}

var (
	envRef  = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}`)
	fileRef = regexp.MustCompile(`\$\{file:([^}]+)\}`)
)

// expandNode replaces ${file:PATH} with the file's content (one trailing
// newline dropped: a mounted Kubernetes or Docker secret), and ${VAR} and
// ${VAR:-default} with the environment's, in every scalar value. It works on
// parsed values, not the raw text, so a secret with YAML syntax in it stays
// one string, and a file's content is never expanded again. Errors name the
// line and the variable or file, never a value.
func expandNode(n *yaml.Node, lookup func(string) (string, bool)) error {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		var missing string
		var fileErr error
		// Split around file references so their content is never expanded.
		var parts []string
		var fromFile []bool
		rest := n.Value
		for {
			loc := fileRef.FindStringSubmatchIndex(rest)
			if loc == nil {
				break
			}
			parts, fromFile = append(parts, rest[:loc[0]]), append(fromFile, false)
			path := rest[loc[2]:loc[3]]
			b, err := os.ReadFile(path) //nolint:gosec // G304: a ${file:...} reference in the operator's own config
			if err != nil && fileErr == nil {
				var pe *fs.PathError
				if errors.As(err, &pe) {
					err = pe.Err
				}
				fileErr = fmt.Errorf("line %d: secret file %s: %w", n.Line, path, err)
			}
			parts = append(parts, strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"))
			fromFile = append(fromFile, true)
			rest = rest[loc[1]:]
		}
		parts, fromFile = append(parts, rest), append(fromFile, false)
		if fileErr != nil {
			return fileErr
		}
		for i, part := range parts {
			if fromFile[i] {
				continue
			}
			parts[i] = envRef.ReplaceAllStringFunc(part, func(ref string) string {
				m := envRef.FindStringSubmatch(ref)
				if v, ok := lookup(m[1]); ok && v != "" {
					return v
				}
				if strings.Contains(ref, ":-") {
					return m[2]
				}
				if missing == "" {
					missing = m[1]
				}
				return ""
			})
		}
		n.Value = strings.Join(parts, "")
		if missing != "" {
			return fmt.Errorf("line %d: environment variable %s is not set (write ${%s:-default} for a default)", n.Line, missing, missing)
		}
		n.Tag = "" // let the decoder resolve the expanded text's type afresh
		n.Style = 0
	}
	for _, c := range n.Content {
		if err := expandNode(c, lookup); err != nil {
			return err
		}
	}
	return nil
}

var handlerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

func (c Config) validatePipeline() error {
	switch c.Streamer.Wake {
	case "notify", "poll", "replication":
	default:
		return fmt.Errorf("streamer.wake: %q is not notify, replication or poll", c.Streamer.Wake)
	}
	if c.Streamer.BatchSize < 1 || c.Streamer.BatchSize > 10000 {
		return fmt.Errorf("streamer.batch_size: %d must be between 1 and 10000", c.Streamer.BatchSize)
	}
	if c.Streamer.MaxLeasedPerHandler < c.Streamer.BatchSize {
		return fmt.Errorf("streamer.max_leased_per_handler: %d must be at least streamer.batch_size (%d)", c.Streamer.MaxLeasedPerHandler, c.Streamer.BatchSize)
	}
	if c.Streamer.LeaseDuration < time.Second {
		return fmt.Errorf("streamer.lease_duration: %s must be at least 1s", c.Streamer.LeaseDuration)
	}
	if c.Streamer.PollInterval <= 0 || c.Streamer.ReapInterval <= 0 {
		return errors.New("streamer.poll_interval and streamer.reap_interval: must be positive")
	}
	if c.Audit.SealEvery < 0 || c.Audit.Grace < 0 {
		return errors.New("audit.seal_every and audit.grace: must not be negative")
	}
	if c.Consumer.LeaseExtend < time.Second {
		return fmt.Errorf("consumer.lease_extend: %s must be at least 1s", c.Consumer.LeaseExtend)
	}
	if c.Consumer.LeaseExtend > c.Streamer.LeaseDuration*10 {
		return fmt.Errorf("consumer.lease_extend: %s is far longer than streamer.lease_duration %s", c.Consumer.LeaseExtend, c.Streamer.LeaseDuration)
	}
	seen := map[string]int{}
	for i, h := range c.Consumer.Handlers {
		field := fmt.Sprintf("consumer.handlers[%d]", i)
		if !handlerName.MatchString(h.Name) {
			return fmt.Errorf("%s.name: %q must be 1-63 lower-case letters, digits, '-' or '_'", field, h.Name)
		}
		if j, dup := seen[h.Name]; dup {
			return fmt.Errorf("%s.name: %q is already the name of consumer.handlers[%d]", field, h.Name, j)
		}
		seen[h.Name] = i
		switch h.Type {
		case "log":
		case "http-forward":
			if !strings.HasPrefix(h.URL, "http://") && !strings.HasPrefix(h.URL, "https://") {
				return fmt.Errorf("%s.url: %q must be an http:// or https:// URL", field, h.URL)
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
	}
	switch c.Bus.Kind {
	case "gochannel":
	case "nats":
		if c.Bus.URL == "" {
			return errors.New("bus.url: required for bus.kind nats (e.g. nats://127.0.0.1:4222)")
		}
	default:
		return fmt.Errorf("bus.kind: %q is not gochannel or nats", c.Bus.Kind)
	}
	if c.Bus.Storage != "file" && c.Bus.Storage != "memory" {
		return fmt.Errorf("bus.storage: %q is not file or memory", c.Bus.Storage)
	}
	return nil
}

// minAdminToken is the shortest admin.token accepted (admin.MinTokenBytes).
const minAdminToken = 16

func (c Config) validateTracing() error {
	t := c.Tracing
	if t.SampleRatio <= 0 || t.SampleRatio > 1 {
		return fmt.Errorf("tracing.sample_ratio: %g must be in (0, 1]", t.SampleRatio)
	}
	if t.OTLPEndpoint != "" {
		u, err := url.Parse(t.OTLPEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("tracing.otlp_endpoint: want an http:// or https:// URL")
		}
	}
	return nil
}

func (c Config) validateHeartbeat() error {
	h := c.Heartbeat
	switch {
	case h.CheckEvery < time.Second:
		return fmt.Errorf("heartbeat.check_every: %s must be at least 1s", h.CheckEvery)
	case h.Factor < 1:
		return fmt.Errorf("heartbeat.factor: %g must be at least 1", h.Factor)
	case h.MinEvents < 2 || h.History < h.MinEvents:
		return fmt.Errorf("heartbeat.min_events: %d must be at least 2 and at most heartbeat.history (%d)", h.MinEvents, h.History)
	case h.MinSilence < 0:
		return fmt.Errorf("heartbeat.min_silence: must not be negative, got %s", h.MinSilence)
	case h.TypesEvery < 100*time.Millisecond:
		return fmt.Errorf("heartbeat.types_every: %s must be at least 100ms", h.TypesEvery)
	case h.MaxTypesPerSource < 1:
		return fmt.Errorf("heartbeat.max_types_per_source: %d must be at least 1", h.MaxTypesPerSource)
	}
	for name, d := range h.MaxSilence {
		if d <= 0 {
			return fmt.Errorf("heartbeat.max_silence.%s: %s must be positive", name, d)
		}
	}
	if h.AlertURL != "" {
		u, err := url.Parse(h.AlertURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("heartbeat.alert_url: want an http:// or https:// URL")
		}
	}
	return nil
}

func (c Config) validateRetention() error {
	r := c.Retention
	if _, err := r.MaxAgeDuration(); err != nil {
		return err
	}
	if !slices.Contains([]string{"day", "week", "month"}, r.PartitionInterval) {
		return fmt.Errorf("retention.partition_interval: %q must be day, week or month", r.PartitionInterval)
	}
	if r.Ahead != nil && (*r.Ahead < 0 || *r.Ahead > 366) {
		return fmt.Errorf("retention.ahead: %d must be 0..366", *r.Ahead)
	}
	if r.LockTimeout < 0 {
		return fmt.Errorf("retention.lock_timeout: must not be negative, got %s", r.LockTimeout)
	}
	return nil
}

func (c Config) validateAdmin() error {
	if c.Admin.Listen == "" {
		return nil
	}
	if len(c.Admin.Token) < minAdminToken {
		return fmt.Errorf("admin.token: at least %d bytes required when admin.listen is set", minAdminToken)
	}
	if sameListener(c.Admin.Listen, c.Ingress.Listen) {
		return fmt.Errorf("admin.listen: %q is the webhook listener (ingress.listen %q); the admin API needs a listener of its own", c.Admin.Listen, c.Ingress.Listen)
	}
	return nil
}

// sameListener reports whether two listen addresses would collide: the same
// port on the same host, or on every interface ("" or an unspecified IP).
func sameListener(a, b string) bool {
	ah, ap, err1 := net.SplitHostPort(a)
	bh, bp, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil {
		return a == b
	}
	if ap != bp || ap == "0" { // port 0: each gets a free port of its own
		return false
	}
	everywhere := func(h string) bool { ip := net.ParseIP(h); return h == "" || (ip != nil && ip.IsUnspecified()) }
	return ah == bh || everywhere(ah) || everywhere(bh)
}
