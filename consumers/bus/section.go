package bus

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// Section is the bus: section of inlet.yaml: the transport between
// streamer and consumers.
type Section struct {
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

// WithDefaults returns a copy with every unset field at its default.
func (s Section) WithDefaults() Section {
	s.Kind = cmp.Or(s.Kind, "gochannel")
	s.AckWait = cmp.Or(s.AckWait, 30*time.Second)
	s.Replicas = cmp.Or(s.Replicas, 1)
	s.Storage = cmp.Or(s.Storage, "file")
	return s
}

// Validate checks the section (after WithDefaults) and names the first bad
// key.
func (s Section) Validate() error {
	switch s.Kind {
	case "gochannel":
	case "nats":
		if s.URL == "" {
			return errors.New("bus.url: required for bus.kind nats (e.g. nats://127.0.0.1:4222)")
		}
	default:
		return fmt.Errorf("bus.kind: %q is not gochannel or nats", s.Kind)
	}
	if s.Storage != "file" && s.Storage != "memory" {
		return fmt.Errorf("bus.storage: %q is not file or memory", s.Storage)
	}
	if s.AckWait < 0 {
		return fmt.Errorf("bus.ack_wait: %s is negative (0 or unset: 30s)", s.AckWait)
	}
	if s.Replicas < 1 || s.Replicas > 5 {
		// JetStream keeps 1 to 5 copies of a stream.
		return fmt.Errorf("bus.replicas: %d is not between 1 and 5 (0 or unset: 1)", s.Replicas)
	}
	return nil
}
