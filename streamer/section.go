package streamer

import (
	"cmp"
	"fmt"
	"time"

	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/schema"
)

// Section is the streamer: section of inlet.yaml: how inlet streamer (and
// inlet dev) claims and publishes. Section.Config turns it into the
// streamer's Config.
type Section struct {
	// Wake is what wakes the streamer besides its poll tick: "notify"
	// (LISTEN/NOTIFY), "replication" (logical replication of the jobs table:
	// needs wal_level=logical and a role with REPLICATION) or "poll" (the
	// tick alone). Defaults to "notify".
	Wake string `yaml:"wake"`
	// SlotName is the replication slot of streamer.wake replication. A slot
	// has one reader: every streamer replica needs its own stable name. With
	// wake notify or poll, the streamer drops the slot of this name that an
	// earlier wake replication left, once nothing reads it (see
	// Config.SlotName). Defaults to "inlet_streamer".
	SlotName string `yaml:"slot_name"`
	// BatchSize is the most jobs one claim leases. Defaults to 100.
	BatchSize int `yaml:"batch_size"`
	// RefsPerMessage is the most job references one bus message carries (a
	// claim's jobs of one handler go out in messages of up to this many).
	// 1 sends one per message, as earlier streamers did: needed while
	// consumers from before several per message (see CHANGELOG) still run
	// (a rolling upgrade), since they drop a message of several as
	// malformed. Defaults to 32.
	RefsPerMessage int `yaml:"refs_per_message"`
	// LeaseDuration is how long a consumer has to report or extend before
	// the job is taken back. Defaults to 60s.
	LeaseDuration time.Duration `yaml:"lease_duration"`
	// MaxLeasedPerHandler stops leasing for a handler that already has this
	// many jobs leased, so a lagging handler's backlog does not sit leased in
	// the bus until the leases expire. Defaults to 5000.
	MaxLeasedPerHandler int `yaml:"max_leased_per_handler"`
	// MinLeasedPerHandler is how many leases of a handler waiting in the bus
	// (not yet extended by a consumer) the streamer takes whatever the
	// handler's pace; beyond it, what its consumers start in half a lease
	// (see Config.MinLeasedPerHandler). Defaults to 4.
	MinLeasedPerHandler int `yaml:"min_leased_per_handler"`
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

// WithDefaults returns a copy with every unset field at its default.
func (s Section) WithDefaults() Section {
	s.Wake = cmp.Or(s.Wake, "notify")
	s.SlotName = cmp.Or(s.SlotName, DefaultSlotName)
	s.BatchSize = cmp.Or(s.BatchSize, 100)
	s.RefsPerMessage = cmp.Or(s.RefsPerMessage, 32)
	s.MaxLeasedPerHandler = cmp.Or(s.MaxLeasedPerHandler, 5000)
	s.LeaseDuration = cmp.Or(s.LeaseDuration, 60*time.Second)
	s.PollInterval = cmp.Or(s.PollInterval, time.Second)
	s.ReapInterval = cmp.Or(s.ReapInterval, 5*time.Second)
	if s.DBRole == nil {
		r := schema.StreamerRole
		s.DBRole = &r
	}
	s.HealthListen = cmp.Or(s.HealthListen, "127.0.0.1:8081")
	return s
}

// Validate checks the section (after WithDefaults) and names the first bad
// key.
func (s Section) Validate() error {
	if err := config.CheckListen("streamer.health_listen", s.HealthListen, "", "off"); err != nil {
		return err
	}
	switch s.Wake {
	case "notify", "poll", "replication":
	default:
		return fmt.Errorf("streamer.wake: %q is not notify, replication or poll", s.Wake)
	}
	if s.BatchSize < 1 || s.BatchSize > 10000 {
		return fmt.Errorf("streamer.batch_size: %d must be between 1 and 10000", s.BatchSize)
	}
	if s.RefsPerMessage < 1 || s.RefsPerMessage > 1000 {
		return fmt.Errorf("streamer.refs_per_message: %d must be between 1 and 1000", s.RefsPerMessage)
	}
	if s.MinLeasedPerHandler < 0 || s.MinLeasedPerHandler > s.MaxLeasedPerHandler {
		return fmt.Errorf("streamer.min_leased_per_handler: %d must be between 1 and streamer.max_leased_per_handler (%d), or 0 for the default (4)", s.MinLeasedPerHandler, s.MaxLeasedPerHandler)
	}
	if s.MaxLeasedPerHandler < s.BatchSize {
		return fmt.Errorf("streamer.max_leased_per_handler: %d must be at least streamer.batch_size (%d)", s.MaxLeasedPerHandler, s.BatchSize)
	}
	if s.LeaseDuration < time.Second {
		return fmt.Errorf("streamer.lease_duration: %s must be at least 1s", s.LeaseDuration)
	}
	if s.PollInterval <= 0 {
		return fmt.Errorf("streamer.poll_interval: %s must be positive", s.PollInterval)
	}
	if s.ReapInterval <= 0 {
		return fmt.Errorf("streamer.reap_interval: %s must be positive", s.ReapInterval)
	}
	if !slotNameRE.MatchString(s.SlotName) {
		return fmt.Errorf("streamer.slot_name: %q must be 1 to 63 of a-z, 0-9 and _ (a replication slot's name)", s.SlotName)
	}
	return nil
}

// Config is the streamer's Config with the section's settings; the caller
// adds the pool, the publisher, the wake connection (per Wake) and the
// logger. SlotName is set whatever Wake is: replication reads the slot, the
// others drop it if replication left it behind.
func (s Section) Config() Config {
	return Config{
		BatchSize:           s.BatchSize,
		RefsPerMessage:      s.RefsPerMessage,
		MaxLeasedPerHandler: s.MaxLeasedPerHandler,
		MinLeasedPerHandler: s.MinLeasedPerHandler,
		LeaseDuration:       s.LeaseDuration,
		PollInterval:        s.PollInterval,
		ReapInterval:        s.ReapInterval,
		SlotName:            s.SlotName,
	}
}
