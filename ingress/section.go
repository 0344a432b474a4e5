package ingress

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/schema"
)

// Section is the ingress: section of inlet.yaml: the webhook listener, its
// limits and timeouts. Config embeds it; New applies WithDefaults.
type Section struct {
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
	// provider retries). A request's headers are counted with its body.
	// The requests waiting for room may hold half as much again (their
	// headers; past that a request is answered 503 at once), and the
	// bodies parsed for subscription filters half as much again (a parse
	// that finds no room waits, as a body does). At least max_body_bytes.
	// Defaults to 32 MiB, or max_body_bytes if that is larger.
	MaxInflightBytes int64 `yaml:"max_inflight_bytes"`
	// MaxConnections caps the connections open at once, so the memory held
	// for connections is bounded whatever the number of clients: each holds
	// its buffers and headers, about 85 KiB with the largest headers the
	// listener reads (64 KiB), 6-10 KiB with a provider's usual ones, from
	// before they are whole (ingress cannot count them in
	// max_inflight_bytes until then). Past it a new connection waits in
	// the kernel's accept queue, unrefused, until one closes. While ingress
	// is full it makes room: keep-alive is off (idle connections closed,
	// each answer closing its connection), and a connection that has not
	// sent a request's headers whole within 1 s of its accept (of its
	// connect, if it sent nothing while queued) is closed, so neither idle
	// connections nor ones that send nothing keep new ones out for long.
	// Defaults to 512 (at most about 43 MiB).
	MaxConnections int `yaml:"max_connections"`
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

// GroupCommit is ingress.group_commit: verified webhooks that arrive
// together are stored by one multi-row INSERT and one COMMIT, each answered
// after it with its own stored or duplicate.
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
	// MaxWait is how long a batch of two or more waits for more. Defaults
	// to 0: no wait (a batch is whatever arrived while the last commit
	// ran).
	MaxWait time.Duration `yaml:"max_wait"`
	// Committers is how many batches commit at once. Defaults to 2.
	Committers int `yaml:"committers"`
}

// The ingress memory bounds by default: with them 256 concurrent 1 MiB
// webhooks keep inlet ingress under 150 MiB resident (go run ./bench -only
// memory).
const (
	DefaultMaxInflightBytes = 32 << 20
	DefaultMaxBatchBytes    = 1 << 20
	DefaultMaxConnections   = 512
)

// WithDefaults returns a copy with every unset field at its default.
func (s Section) WithDefaults() Section {
	s.Listen = cmp.Or(s.Listen, ":8080")
	s.MaxBodyBytes = cmp.Or(s.MaxBodyBytes, 1<<20)
	s.ReadTimeout = cmp.Or(s.ReadTimeout, 10*time.Second)
	s.WriteTimeout = cmp.Or(s.WriteTimeout, 10*time.Second)
	s.IdleTimeout = cmp.Or(s.IdleTimeout, 120*time.Second)
	s.StoreTimeout = cmp.Or(s.StoreTimeout, 5*time.Second)
	s.MaxInflightBytes = cmp.Or(s.MaxInflightBytes, max(DefaultMaxInflightBytes, s.MaxBodyBytes))
	s.MaxConnections = cmp.Or(s.MaxConnections, DefaultMaxConnections)
	if s.DBRole == nil {
		r := schema.IngressRole
		s.DBRole = &r
	}
	s.MetricsListen = cmp.Or(s.MetricsListen, "127.0.0.1:8083")
	s.GroupCommit.MaxBatch = cmp.Or(s.GroupCommit.MaxBatch, 128)
	s.GroupCommit.MaxBatchBytes = cmp.Or(s.GroupCommit.MaxBatchBytes, DefaultMaxBatchBytes)
	s.GroupCommit.Committers = cmp.Or(s.GroupCommit.Committers, DefaultCommitters)
	return s
}

// Validate checks the section (after WithDefaults) and names the first bad
// key.
func (s Section) Validate() error {
	if err := config.CheckListen("ingress.listen", s.Listen, ""); err != nil {
		return err
	}
	if err := config.CheckListen("ingress.metrics_listen", s.MetricsListen, "", "off"); err != nil {
		return err
	}
	if s.MaxBodyBytes < 0 {
		return errors.New("ingress.max_body_bytes: must be positive")
	}
	for name, d := range map[string]time.Duration{
		"ingress.read_timeout": s.ReadTimeout, "ingress.write_timeout": s.WriteTimeout,
		"ingress.idle_timeout": s.IdleTimeout, "ingress.store_timeout": s.StoreTimeout,
	} {
		if d < 0 {
			return fmt.Errorf("%s: must not be negative, got %s", name, d)
		}
	}
	if gc := s.GroupCommit; gc.MaxBatch < 1 || gc.MaxBatch > 10000 || gc.MaxWait < 0 || gc.MaxWait > time.Second || gc.Committers < 1 || gc.Committers > 64 {
		return fmt.Errorf("ingress.group_commit: max_batch %d (1..10000), max_wait %s (0..1s), committers %d (1..64)", gc.MaxBatch, gc.MaxWait, gc.Committers)
	}
	if s.MaxInflightBytes < s.MaxBodyBytes {
		return fmt.Errorf("ingress.max_inflight_bytes: %d is less than ingress.max_body_bytes (%d), so a body of the largest size could never be read",
			s.MaxInflightBytes, s.MaxBodyBytes)
	}
	if s.MaxConnections < 1 {
		return fmt.Errorf("ingress.max_connections: %d must be positive", s.MaxConnections)
	}
	if s.GroupCommit.MaxBatchBytes < 1 {
		return fmt.Errorf("ingress.group_commit.max_batch_bytes: %d must be positive", s.GroupCommit.MaxBatchBytes)
	}
	if s.StoreTimeout >= s.WriteTimeout {
		return fmt.Errorf("ingress.store_timeout: %s must be shorter than ingress.write_timeout (%s), or no answer is written", s.StoreTimeout, s.WriteTimeout)
	}
	return nil
}

// GroupConfig is the group commit's config with the section's settings
// (group_commit, and store_timeout bounding each batch).
func (s Section) GroupConfig() GroupConfig {
	gc := s.GroupCommit
	return GroupConfig{MaxBatch: gc.MaxBatch, MaxBatchBytes: gc.MaxBatchBytes, MaxWait: gc.MaxWait, Committers: gc.Committers, Timeout: s.StoreTimeout}
}
