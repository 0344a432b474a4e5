// Package inletyaml is inlet.yaml, Inlet's one configuration file: one
// section per service, each the Section type its service owns (with its
// defaults and validation). internal/config reads the file; this package
// only composes the sections and checks what spans two of them. A new
// setting of a service belongs in that service's Section, not here.
package inletyaml

import (
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/audit"
	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/controlplane"
	"github.com/inlet-dev/inlet/filter"
	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/internal/tracing"
	"github.com/inlet-dev/inlet/monitor"
	"github.com/inlet-dev/inlet/relay"
	"github.com/inlet-dev/inlet/reporter"
	"github.com/inlet-dev/inlet/retention"
	"github.com/inlet-dev/inlet/streamer"
)

// Config is the whole file. Every section is optional; defaults make `inlet
// dev` work with none.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string. Defaults to $DATABASE_URL.
	DatabaseURL string `yaml:"database_url"`
	// Ingress configures the webhook receiver.
	Ingress ingress.Section `yaml:"ingress"`
	// Sources are the webhook senders Inlet accepts, one per URL path
	// (POST /webhooks/{name}).
	Sources []sources.Source `yaml:"sources"`
	// Streamer configures the service that hands due jobs to consumers.
	Streamer streamer.Section `yaml:"streamer"`
	// Consumer configures the ready consumers this process runs.
	Consumer consumers.Section `yaml:"consumer"`
	// Bus selects the transport between streamer and consumers.
	Bus bus.Section `yaml:"bus"`
	// Audit configures the tamper-evidence sealer.
	Audit audit.Section `yaml:"audit"`
	// Admin configures the operator tools: inlet events, dlq and replay, and
	// the admin HTTP API.
	Admin admin.Section `yaml:"admin"`
	// Retention configures inlet retention: how long the event log is kept
	// and how it is partitioned.
	Retention retention.Section `yaml:"retention"`
	// Silence configures the silent-source detector (read from the old key
	// heartbeat: too).
	Silence monitor.Section `yaml:"silence"`
	// Reconcile is the streamer's scheduled inlet reconcile (off by
	// default); see backfill.Section.
	Reconcile backfill.Section `yaml:"reconcile"`
	// Tracing configures OpenTelemetry span export.
	Tracing tracing.Section `yaml:"tracing"`
	// Log configures logging.
	Log Log `yaml:"log"`
	// Relay configures inlet relay, the pass-through mode.
	Relay relay.Section `yaml:"relay"`
	// Reporter configures the metadata report to an outside control plane.
	Reporter reporter.Section `yaml:"reporter"`
	// ControlPlane configures inlet control-plane.
	ControlPlane controlplane.Section `yaml:"control_plane"`
}

// Log configures log/slog output.
type Log struct {
	// Level is debug, info, warn or error. Defaults to info.
	Level string `yaml:"level"`
	// Format is json or text. Defaults to json for services, text for `inlet dev`.
	Format string `yaml:"format"`
}

// RenamedKeys are the old names of top-level keys, still read (with a
// warning once): heartbeat: meant three things (the consumers' lease
// extension, this detector, a dashboard table), so the detector's section is
// silence: now.
func (Config) RenamedKeys() map[string]string {
	return map[string]string{"heartbeat": "silence"}
}

// WithDefaults returns a copy with every unset field at its default.
func (c Config) WithDefaults() Config {
	if c.DatabaseURL == "" {
		c.DatabaseURL = os.Getenv("DATABASE_URL")
	}
	c.Ingress = c.Ingress.WithDefaults()
	c.Streamer = c.Streamer.WithDefaults()
	c.Consumer = c.Consumer.WithDefaults()
	c.Bus = c.Bus.WithDefaults()
	c.Audit = c.Audit.WithDefaults()
	c.Admin = c.Admin.WithDefaults()
	c.Retention = c.Retention.WithDefaults()
	c.Silence = c.Silence.WithDefaults()
	c.Reconcile = c.Reconcile.WithDefaults()
	c.Tracing = c.Tracing.WithDefaults()
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	c.Relay = c.Relay.WithDefaults()
	c.Reporter = c.Reporter.WithDefaults()
	c.ControlPlane = c.ControlPlane.WithDefaults()
	return c
}

// Validate checks the configuration (after WithDefaults): each section,
// then what spans two. It returns every problem it finds (errors.Join), each
// naming its key; a section stops at its first.
func (c Config) Validate() error {
	var errs []error
	for _, s := range []interface{ Validate() error }{c.Ingress, sourcesSection(c.Sources), c.Streamer, c.Audit, c.Consumer,
		c.Bus, c.Tracing, c.Silence, c.Reconcile, c.Retention, c.Admin, c.Relay, c.Reporter, c.ControlPlane} {
		errs = append(errs, s.Validate())
	}
	// A handler's filter compiles here too, not only when its consumer
	// starts: `inlet config check` answers for the file as the services do.
	for i, h := range c.Consumer.Handlers {
		if h.Filter == "" {
			continue
		}
		if err := filter.Check(h.Filter); err != nil {
			errs = append(errs, fmt.Errorf("consumer.handlers[%d].filter: %w", i, err))
		}
	}
	if c.Reconcile.Enabled {
		// The scheduled reconcile stores under a source's name what the
		// provider's API lists by the provider's id: a source keyed by an
		// id of its own would get every event again, each round.
		// A name no source has (a typo) finds none of the stored webhooks,
		// so would store every listed event again under that name; another
		// provider's API would store its events as this source's. Checked
		// where sources: is read (inlet config check, inlet dev; the
		// streamer drops the section and its secrets).
		for i, rs := range c.Reconcile.Sources {
			j := slices.IndexFunc(c.Sources, func(s sources.Source) bool { return s.Name == rs.Source })
			switch {
			case len(c.Sources) == 0 || rs.Source == "":
			case j < 0:
				errs = append(errs, fmt.Errorf("reconcile.sources[%d].source: no source %q among sources", i, rs.Source))
			case c.Sources[j].Type != rs.Type:
				errs = append(errs, fmt.Errorf("reconcile.sources[%d].type: source %q is of type %s, not %s", i, rs.Source, c.Sources[j].Type, rs.Type))
			default:
				if err := backfill.CheckSourceIDs(c.Sources[j]); err != nil {
					errs = append(errs, fmt.Errorf("reconcile.sources[%d]: %w", i, err))
				}
			}
		}
	}
	if c.Consumer.LeaseExtend > c.Streamer.LeaseDuration*10 {
		errs = append(errs, fmt.Errorf("consumer.lease_extend: %s is far longer than streamer.lease_duration %s", c.Consumer.LeaseExtend, c.Streamer.LeaseDuration))
	}
	if c.Admin.Listen != "" && !Loopback(c.Admin.Listen) && PublicAdminToken(c) {
		// The admin API serves raw bodies and replays: never beyond this
		// machine with a token everyone knows.
		errs = append(errs, fmt.Errorf("admin.token: Inlet's public development token, while admin.listen %q is beyond this machine: "+
			"set admin.token (INLET_ADMIN_TOKEN in inlet dev, at least 16 bytes) or listen on loopback", c.Admin.Listen))
	}
	if c.Admin.Listen != "" && sameListener(c.Admin.Listen, c.Ingress.Listen) {
		errs = append(errs, fmt.Errorf("admin.listen: %q is the webhook listener (ingress.listen %q); the admin API needs a listener of its own", c.Admin.Listen, c.Ingress.Listen))
	}
	// The other listeners one process opens: the second would fail to start
	// (address already in use).
	for _, p := range []struct{ key, addr, otherKey, other string }{
		{"ingress.metrics_listen", c.Ingress.MetricsListen, "ingress.listen", c.Ingress.Listen},
		{"admin.listen", c.Admin.Listen, "ingress.metrics_listen", c.Ingress.MetricsListen},
		{"relay.metrics_listen", c.Relay.MetricsListen, "relay.listen", c.Relay.Listen},
	} {
		if p.addr != "" && p.addr != "off" && p.other != "" && p.other != "off" && sameListener(p.addr, p.other) {
			errs = append(errs, fmt.Errorf("%s: %q is %s's address (%q); each listener needs one of its own", p.key, p.addr, p.otherKey, p.other))
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level: %q is not one of debug, info, warn, error", c.Log.Level))
	}
	switch c.Log.Format {
	case "", "json", "text":
	default:
		errs = append(errs, fmt.Errorf("log.format: %q is not json or text", c.Log.Format))
	}
	return errors.Join(errs...)
}

// sourcesSection is the sources: list as a section.
type sourcesSection []sources.Source

func (s sourcesSection) Validate() error { return sources.Validate(s) }

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

// Source returns the source named name.
func (c Config) Source(name string) (sources.Source, bool) {
	for _, s := range c.Sources {
		if s.Name == name {
			return s, true
		}
	}
	return sources.Source{}, false
}

// Load reads, expands, parses, defaults and validates the whole file at path.
// A relative ${file:PATH} in it is read from the file's directory.
func Load(path string) (Config, error) { return LoadFor(path, config.AllSections) }

// LoadFor is Load of the sections service reads.
func LoadFor(path string, service config.Service) (Config, error) {
	return config.Load[Config](path, service)
}

// Parse is Load on bytes, with lookup resolving ${VAR}; having no file, it
// reads a relative ${file:PATH} from the working directory.
func Parse(b []byte, lookup func(string) (string, bool)) (Config, error) {
	return ParseFor(b, lookup, config.AllSections)
}

// ParseFor is Parse of the sections service reads.
func ParseFor(b []byte, lookup func(string) (string, bool), service config.Service) (Config, error) {
	return config.Parse[Config](b, lookup, service)
}

//go:embed dev.yaml
var devYAML []byte

// PublicSecretSources names the sources of c that accept a secret of the
// embedded development defaults (dev.yaml, whatever the environment says).
// Those secrets are published with Inlet: anyone can sign a webhook that
// verifies with them.
func PublicSecretSources(c Config) []string {
	dev, err := Parse(devYAML, func(string) (string, bool) { return "", false })
	if err != nil {
		return nil
	}
	public := map[string]bool{}
	for _, s := range dev.Sources {
		for _, secret := range s.Secrets {
			public[secret] = true
		}
	}
	var names []string
	for _, s := range c.Sources {
		for _, secret := range s.Secrets {
			if public[secret] {
				names = append(names, s.Name)
				break
			}
		}
	}
	return names
}

// Loopback reports whether addr (host:port) listens on this machine only.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// PublicAdminToken reports whether c's admin token is the embedded
// development default (dev.yaml's, whatever the environment says): it is
// published with Inlet, so anyone who reaches the admin API can use it.
func PublicAdminToken(c Config) bool {
	dev, err := Parse(devYAML, func(string) (string, bool) { return "", false })
	return err == nil && c.Admin.Token != "" && c.Admin.Token == dev.Admin.Token
}

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

// WithDevDefaults gives c, read from the config file file, inlet dev's own
// defaults where the services' would leave it without what its
// documentation promises (a sealer, a quick silence check, the admin API
// and dashboard), for each of those keys the file leaves out:
// audit.seal_every and silence.check_every (10s), admin.listen
// (127.0.0.1:8084), with admin.token when the file sets neither (the public
// development token, which Validate keeps to a loopback listener). The
// values are dev.yaml's, whatever the environment says (its variables move
// the embedded defaults only). A key the file has keeps its value, 0 or ""
// (off) included. It returns the keys it set, for inlet dev to say so.
func WithDevDefaults(c Config, file []byte) (Config, []string, error) {
	set, err := keysSet(file, c.RenamedKeys())
	if err != nil {
		return c, nil, err
	}
	dev, err := Parse(devYAML, func(string) (string, bool) { return "", false })
	if err != nil {
		return c, nil, fmt.Errorf("embedded dev config: %w", err)
	}
	var applied []string
	if !set("audit.seal_every") {
		c.Audit.SealEvery = dev.Audit.SealEvery
		applied = append(applied, "audit.seal_every")
	}
	if !set("silence.check_every") {
		c.Silence.CheckEvery = dev.Silence.CheckEvery
		applied = append(applied, "silence.check_every")
	}
	if !set("admin.listen") {
		c.Admin.Listen = dev.Admin.Listen
		applied = append(applied, "admin.listen")
		if !set("admin.token") {
			c.Admin.Token = dev.Admin.Token
			applied = append(applied, "admin.token")
		}
	}
	return c, applied, nil
}

// keysSet reads the YAML document b (aliases and merge keys resolved, an
// old top-level name read as its new one) and reports whether it has a
// dotted key such as "audit.seal_every", whatever its value (null, 0 or
// "" included).
func keysSet(b []byte, renamed map[string]string) (func(key string) bool, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("read the keys of the config file: %w", err)
	}
	for old, key := range renamed {
		if v, ok := doc[old]; ok {
			if _, both := doc[key]; !both {
				doc[key] = v
			}
		}
	}
	return func(key string) bool {
		m := doc
		for {
			k, rest, nested := strings.Cut(key, ".")
			v, ok := m[k]
			if !ok || !nested {
				return ok
			}
			if m, ok = v.(map[string]any); !ok {
				return false
			}
			key = rest
		}
	}, nil
}
