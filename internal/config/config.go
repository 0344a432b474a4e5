package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// File is the struct a whole configuration file decodes into: one field per
// top-level section, each section the type its service owns. It fills in its
// own defaults and checks itself, naming the bad key (`streamer.wake: ...`).
type File[T any] interface {
	WithDefaults() T
	Validate() error
}

// Renamer is a File some of whose top-level keys were renamed: RenamedKeys
// maps each old key to its new one. A file with an old key is read as if it
// had the new one, and a warning says so once per process; one with both is
// an error.
type Renamer interface {
	RenamedKeys() map[string]string
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
	IngressService:  {"streamer", "consumer", "bus", "audit", "retention", "reporter", "control_plane", "relay", "reconcile"},
	StreamerService: {"ingress", "sources", "consumer", "admin", "retention", "control_plane", "relay"},
	ConsumerService: {"ingress", "sources", "streamer", "admin", "audit", "retention", "silence", "reporter", "control_plane", "relay", "reconcile"},
	// The relay stores nothing: no database, only its sources and itself.
	RelayService: {"database_url", "ingress", "streamer", "consumer", "bus", "audit", "admin", "retention", "silence", "tracing", "reporter", "control_plane", "reconcile"},
	// The control plane is another party's service: it reads only its own
	// section, never the data plane's database or secrets.
	ControlPlaneService: {"database_url", "ingress", "sources", "streamer", "consumer", "bus", "audit", "admin", "retention", "silence", "tracing", "reporter", "relay", "reconcile"},
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

// Load reads the file at path as service does (see Parse); errors name the
// file.
func Load[T File[T]](path string, service Service) (T, error) {
	var zero T
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator's own -config file
	if err != nil {
		return zero, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse[T](b, os.LookupEnv, service)
	if err != nil {
		return zero, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse reads the sections of b that service reads: it drops the others,
// expands ${VAR}, ${VAR:-default} and ${file:PATH} in every value (lookup
// resolves a VAR), decodes strictly into T (an unknown key is an error with
// its line), then applies T's defaults and validation.
func Parse[T File[T]](b []byte, lookup func(string) (string, bool), service Service) (T, error) {
	var c T
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return c, err
	}
	if r, ok := any(c).(Renamer); ok {
		if err := renameKeys(&root, r.RenamedKeys()); err != nil {
			return c, err
		}
	}
	dropSections(&root, droppedSections[service])
	if err := expandNode(&root, lookup); err != nil {
		return c, err
	}
	if len(root.Content) > 0 {
		// Re-encode the expanded tree and decode strictly, so unknown fields fail.
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		if err := enc.Encode(&root); err != nil {
			return c, err
		}
		dec := yaml.NewDecoder(&buf)
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil {
			return c, err
		}
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		var zero T
		return zero, err
	}
	return c, nil
}

// renameKeys gives each old top-level key of a document its new name.
func renameKeys(root *yaml.Node, renamed map[string]string) error {
	if len(renamed) == 0 || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		to, ok := renamed[k.Value]
		if !ok {
			continue
		}
		for j := 0; j+1 < len(m.Content); j += 2 {
			if m.Content[j].Value == to {
				return fmt.Errorf("line %d: %s is the old name of %s (line %d): keep only %s", k.Line, k.Value, to, m.Content[j].Line, to)
			}
		}
		warnRenamed(k.Value, to, k.Line)
		k.Value = to
	}
	return nil
}

var warned sync.Map // old key → struct{}: warned once per process

// warnRenamed logs, once per process and key, that an old key was read.
var warnRenamed = func(old, key string, line int) {
	if _, done := warned.LoadOrStore(old, struct{}{}); done {
		return
	}
	slog.Warn("config key renamed: read as the new key; rename it in the file, the old name will stop working",
		slog.String("old", old), slog.String("new", key), slog.Int("line", line))
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
