package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
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
	// NoSection reads no section: a check (inlet config check --allow-unset)
	// where any variable or secret file may be missing, and what depends on
	// one is not checked.
	NoSection
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
	return s != NoSection && !slices.Contains(droppedSections[s], section)
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

// Load reads the file at path as service does (see Parse). A relative
// ${file:PATH} in it is the file's: resolved against the directory of path,
// whatever the working directory. A file that is wrong gives *Problems
// naming it, each problem with its line and key path.
func Load[T File[T]](path string, service Service) (T, error) {
	var zero T
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator's own -config file
	if err != nil {
		return zero, fmt.Errorf("read config: %w", err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return zero, fmt.Errorf("config file %s: the directory of its ${file:...} paths: %w", path, err)
	}
	c, err := parse[T](b, os.LookupEnv, service, dir)
	if ps, ok := errors.AsType[*Problems](err); ok {
		ps.File = path
		return zero, ps
	}
	return c, err
}

// emptyDocument reports whether a decoded document holds nothing: no node,
// or one plain null scalar (what `---` followed by nothing decodes to).
func emptyDocument(n *yaml.Node) bool {
	if n.Kind != yaml.DocumentNode {
		return false
	}
	switch len(n.Content) {
	case 0:
		return true
	case 1:
		c := n.Content[0]
		return c.Kind == yaml.ScalarNode && c.ShortTag() == "!!null" && c.Value == "" && c.Anchor == "" && c.Style == 0
	}
	return false
}

// Parse checks the whole of b as every service does, then returns the
// sections service reads. It expands ${VAR}, ${VAR:-default} and
// ${file:PATH} in every value (lookup resolves a VAR), finds every key T
// does not know (with the known key it is likely a typo of) and every value
// that is not of its key's type, and validates the whole file with T's
// defaults applied, so that a file one service accepts, no other rejects.
// Only what depends on a variable (or secret file) this process does not
// have, in a section service does not read, goes unchecked: a streamer is
// not given the webhook secrets. The T returned holds only the sections
// service reads (the others zero, then defaulted). A wrong file gives
// *Problems listing everything found, not only the first. A relative
// ${file:PATH} is read from the working directory (Load reads it from the
// file's own).
func Parse[T File[T]](b []byte, lookup func(string) (string, bool), service Service) (T, error) {
	return parse[T](b, lookup, service, "")
}

// parse is Parse with a relative ${file:PATH} resolved against dir ("": the
// working directory).
func parse[T File[T]](b []byte, lookup func(string) (string, bool), service Service, dir string) (T, error) {
	var zero T
	ps := &Problems{}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		line, msg := splitLine(err.Error())
		ps.add(line, "", msg)
		return zero, ps
	}
	// One document only: a second (after `---`) would be dropped without a
	// word, its sources and settings with it. An empty one (a trailing
	// `---`, or one holding only comments) drops nothing.
	for {
		var more yaml.Node
		err := dec.Decode(&more)
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil && emptyDocument(&more) {
			continue
		}
		line := more.Line
		if err != nil {
			line, _ = splitLine(err.Error())
		}
		ps.add(line, "", "a second YAML document (after ---): put everything in one document")
		return zero, ps
	}
	if len(root.Content) == 0 { // an empty file: every default
		var c T
		c = c.WithDefaults()
		if err := c.Validate(); err != nil {
			for _, e := range flatten(err) {
				path, msg := problemOf(e)
				ps.add(0, path, msg)
			}
			return zero, ps
		}
		return c, nil
	}
	doc := root.Content[0]
	if r, ok := any(zero).(Renamer); ok {
		renameKeys(doc, r.RenamedKeys(), ps)
	}
	unset := expand(doc, lookup, dir, service, ps)
	skip := map[*yaml.Node]bool{}
	for _, u := range unset {
		skip[u.node] = true
	}
	ch := &checker{ps: ps, skip: skip, reported: map[string]bool{}, walked: map[walk]bool{}}
	ch.node(doc, reflect.TypeFor[T](), "")

	var all T
	if err := root.Decode(&all); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			line, msg := splitLine(err.Error())
			ps.add(line, pathAtLine(doc, line), msg)
		} else {
			for _, msg := range te.Errors {
				if !ch.reported[msg] {
					line, rest := splitLine(msg)
					ps.add(line, pathAtLine(doc, line), rest)
				}
			}
		}
	}
	all = all.WithDefaults()
	for _, e := range flatten(all.Validate()) {
		path, msg := problemOf(e)
		if slices.ContainsFunc(unset, func(u unsetRef) bool { return related(path, u.path) }) {
			continue // it may hold once the variable is set
		}
		ps.add(lineOf(doc, path), path, msg)
	}
	if len(ps.List) > 0 {
		ps.sort()
		return zero, ps
	}

	dropSections(doc, service)
	var c T
	if err := root.Decode(&c); err != nil {
		return zero, err // decoded above already: not reached
	}
	return c.WithDefaults(), nil
}

// renameKeys gives each old top-level key of a document its new name.
func renameKeys(m *yaml.Node, renamed map[string]string, ps *Problems) {
	if len(renamed) == 0 || m.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		to, ok := renamed[k.Value]
		if !ok {
			continue
		}
		if j := slices.IndexFunc(m.Content, func(n *yaml.Node) bool { return n.Value == to }); j >= 0 && j%2 == 0 {
			ps.add(k.Line, k.Value, fmt.Sprintf("the old name of %s (line %d): keep only %s", to, m.Content[j].Line, to))
			m.Content = slices.Delete(m.Content, i, i+2)
			i -= 2
			continue
		}
		warnRenamed(k.Value, to, k.Line)
		k.Value = to
	}
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

// namesKept are the list sections whose items' names a service that does not
// read them still gets, each item cut to its name: the streamer's silence
// detector watches the configured sources, without their secrets.
var namesKept = map[Service][]string{StreamerService: {"sources"}}

// dropSections removes the top-level keys of a document service does not
// read (of a namesKept section, all but its items' names).
func dropSections(m *yaml.Node, service Service) {
	if m.Kind != yaml.MappingNode {
		return
	}
	kept := m.Content[:0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		switch {
		case service.Reads(k.Value):
			kept = append(kept, k, v)
		case slices.Contains(namesKept[service], k.Value):
			if names := namesOf(v); names != nil {
				kept = append(kept, k, names)
			}
		}
	}
	m.Content = kept
}

// namesOf is a new list of mappings holding the names of the list v's
// items alone (aliases and merge keys resolved, as the full decode does);
// nil when v is not such a list or any name is missing, empty or an unset
// variable's: the service then gets no list at all, not a wrong one.
func namesOf(v *yaml.Node) *yaml.Node {
	var items []struct {
		Name *string `yaml:"name"`
	}
	if err := v.Decode(&items); err != nil {
		return nil
	}
	out := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Line: v.Line, Column: v.Column}
	for _, it := range items {
		if it.Name == nil || *it.Name == "" {
			return nil
		}
		out.Content = append(out.Content, &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: "name"},
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: *it.Name},
		}})
	}
	return out
}

// unsetRef is a value naming a variable (or secret file) this process does
// not have: left null, and what depends on it unchecked (a problem of its
// own in a section the service reads).
type unsetRef struct {
	node *yaml.Node
	path string
}

// expand expands every value of the document (expandValue, a relative
// ${file:PATH} against dir). A reference it cannot resolve is a problem in a
// section service reads; in one it does not, the value is made null and
// listed, so that what depends on it is not checked.
func expand(doc *yaml.Node, lookup func(string) (string, bool), dir string, service Service, ps *Problems) []unsetRef {
	var unset []unsetRef
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		if n.Kind == yaml.ScalarNode {
			err := expandValue(n, lookup, dir)
			if err == nil {
				return
			}
			if service.Reads(topSection(path)) {
				ps.add(n.Line, path, err.Error())
			}
			n.Tag, n.Value, n.Style = "!!null", "", 0
			unset = append(unset, unsetRef{node: n, path: path})
			return
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := childPath(path, n.Content[i].Value)
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, e := range n.Content {
				walk(e, indexPath(path, i))
			}
		default:
			for _, e := range n.Content {
				walk(e, path)
			}
		}
	}
	walk(doc, "")
	return unset
}

var (
	envRef  = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}`)
	fileRef = regexp.MustCompile(`\$\{file:([^}]+)\}`)
)

// expandValue replaces, in the scalar n, ${file:PATH} with the file's
// content (one trailing newline dropped: a mounted Kubernetes or Docker
// secret), and ${VAR} and ${VAR:-default} with the environment's. A relative
// PATH is resolved against dir, the config file's directory ("": the working
// directory). It works on parsed values, not the raw text, so a secret with
// YAML syntax in it stays one string, and a file's content is never expanded
// again. Errors name the variable or file (a relative one with the path it
// was resolved to), never a value.
func expandValue(n *yaml.Node, lookup func(string) (string, bool), dir string) error {
	if strings.Contains(n.Value, "${") {
		var missing string
		var missingEmpty bool // set, but to ""
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
			resolved, named := path, path
			if dir != "" && !filepath.IsAbs(path) {
				resolved = filepath.Join(dir, path)
				named = path + " (" + resolved + ")"
			}
			b, err := os.ReadFile(resolved) //nolint:gosec // G304: a ${file:...} reference in the operator's own config
			if err != nil && fileErr == nil {
				var pe *fs.PathError
				if errors.As(err, &pe) {
					err = pe.Err
				}
				fileErr = fmt.Errorf("secret file %s: %w", named, err)
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
				v, ok := lookup(m[1])
				if ok && v != "" {
					return v
				}
				if strings.Contains(ref, ":-") {
					return m[2]
				}
				if missing == "" {
					missing, missingEmpty = m[1], ok
				}
				return ""
			})
		}
		n.Value = strings.Join(parts, "")
		if missing != "" {
			state := "is not set"
			if missingEmpty {
				state = "is set but empty"
			}
			return fmt.Errorf("environment variable %s %s (write ${%s:-default} for a default)", missing, state, missing)
		}
		n.Tag = "" // let the decoder resolve the expanded text's type afresh
		if n.Value == "" {
			n.Tag = "!!str" // set but empty: an empty string, not a null
		}
		n.Style = 0
	}
	return nil
}
