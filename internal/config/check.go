package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// childPath is the key path of key inside parent.
func childPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func indexPath(parent string, i int) string { return parent + "[" + strconv.Itoa(i) + "]" }

var (
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	durationType    = reflect.TypeFor[time.Duration]()
)

// checker walks a document beside the Go type it decodes into and reports,
// with the line and key path of each, every key the type does not know (with
// the known key it is most likely a typo of) and every value that does not
// decode into its field's type; the decoder itself stops at neither, and
// names neither the key path nor, after re-encoding, the right line.
type checker struct {
	ps       *Problems
	skip     map[*yaml.Node]bool // values not checked (an unset ${VAR} of a section the service does not read)
	reported map[string]bool     // the decoder's own texts of problems already reported here
	// walked holds the mappings and lists already checked as a type: an
	// anchor aliased or merged many times is walked once (a chain of
	// anchors each merging the previous twice is 2^n walks otherwise).
	walked map[walk]bool
}

type walk struct {
	n *yaml.Node
	t reflect.Type
}

func (c *checker) node(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if c.skip[n] || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null") {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		if c.walked[walk{n, t}] {
			return
		}
		c.walked[walk{n, t}] = true
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		c.decode(n, t, path)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			c.decode(n, t, path)
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" { // a merge key: its mapping (or list of them) is read as if written here
				c.merge(v, t, path)
				continue
			}
			ft, ok := fields[k.Value]
			if !ok {
				c.ps.add(k.Line, childPath(path, k.Value), unknownKey(k.Value, fields))
				continue
			}
			c.node(v, ft, childPath(path, k.Value))
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			c.decode(n, t, path)
			return
		}
		for i, e := range n.Content {
			c.node(e, t.Elem(), indexPath(path, i))
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.decode(n, t, path)
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			c.decode(k, t.Key(), childPath(path, k.Value))
			c.node(v, t.Elem(), childPath(path, k.Value))
		}
	case reflect.Interface:
	default:
		c.decode(n, t, path)
	}
}

// merge checks the value of a merge key of a t: one mapping, or a list of
// mappings merged in turn.
func (c *checker) merge(v *yaml.Node, t reflect.Type, path string) {
	if v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	if v.Kind != yaml.SequenceNode {
		c.node(v, t, path)
		return
	}
	for _, e := range v.Content {
		c.node(e, t, path)
	}
}

// decode reports what decoding n into a t says is wrong.
func (c *checker) decode(n *yaml.Node, t reflect.Type, path string) {
	err := n.Decode(reflect.New(t).Interface())
	if err == nil {
		return
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		c.ps.add(n.Line, path, strings.TrimPrefix(err.Error(), "yaml: "))
		return
	}
	for _, msg := range te.Errors {
		c.reported[msg] = true
		line, rest := splitLine(msg)
		if m := wrongType(n, t); m != "" {
			rest = m
		}
		c.ps.add(cmpLine(line, n.Line), path, rest)
	}
}

// wrongType says in the file's terms why n is not a t ("" when it cannot).
func wrongType(n *yaml.Node, t reflect.Type) string {
	switch {
	case t.Kind() == reflect.Struct || t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			return "must be a mapping (indented key: value lines, or {key: value})"
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return "must be a list (- item lines, or [a, b])"
		}
	case n.Kind != yaml.ScalarNode:
		return fmt.Sprintf("must be a single value (a %s), not a list or mapping", t)
	case t == durationType:
		return fmt.Sprintf("%q is not a duration (write it like 500ms, 10s, 5m or 1h)", n.Value)
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return fmt.Sprintf("%q is not a whole number", n.Value)
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return fmt.Sprintf("%q is not a number", n.Value)
	case t.Kind() == reflect.Bool:
		return fmt.Sprintf("%q is not true or false", n.Value)
	}
	return ""
}

func cmpLine(a, b int) int {
	if a > 0 {
		return a
	}
	return b
}

func unknownKey(key string, fields map[string]reflect.Type) string {
	known := make([]string, 0, len(fields))
	for k := range fields {
		known = append(known, k)
	}
	slices.Sort(known)
	if s, ok := suggest(key, known); ok {
		return fmt.Sprintf("unknown key; did you mean `%s`?", s)
	}
	return "unknown key (known here: " + strings.Join(known, ", ") + ")"
}

// yamlFields maps the YAML keys of struct type t to their types, as yaml.v3
// names them (the tag's name, else the lower-cased field name; ,inline
// structs contribute their own keys).
func yamlFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if slices.Contains(strings.Split(opts, ","), "inline") && ft.Kind() == reflect.Struct {
			for k, v := range yamlFields(ft) {
				fields[k] = v
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = f.Type
	}
	return fields
}

// lineOf is the line of the key at path in doc, or of its deepest ancestor
// the file has (0: not even the top-level key).
func lineOf(doc *yaml.Node, path string) int {
	line := 0
	n := doc
	for _, seg := range segments(path) {
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		switch {
		case seg.index >= 0 && n.Kind == yaml.SequenceNode && seg.index < len(n.Content):
			n = n.Content[seg.index]
			line = n.Line
		case seg.index < 0 && n.Kind == yaml.MappingNode:
			found := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == seg.key {
					line, n, found = n.Content[i].Line, n.Content[i+1], true
					break
				}
			}
			if !found {
				return line
			}
		default:
			return line
		}
	}
	return line
}

// pathAtLine is the key path of the last key on line in doc ("" if none).
func pathAtLine(doc *yaml.Node, line int) string {
	var found string
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := childPath(path, n.Content[i].Value)
				if n.Content[i].Line == line {
					found = p
				}
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, e := range n.Content {
				p := indexPath(path, i)
				if e.Line == line && found == "" {
					found = p
				}
				walk(e, p)
			}
		}
	}
	walk(doc, "")
	return found
}

type segment struct {
	key   string
	index int // -1 for a key
}

// segments splits a key path (a.b[2].c) into its keys and indexes.
func segments(path string) []segment {
	var out []segment
	for part := range strings.SplitSeq(path, ".") {
		key, rest, _ := strings.Cut(part, "[")
		if key != "" {
			out = append(out, segment{key: key, index: -1})
		}
		for rest != "" {
			num, after, _ := strings.Cut(rest, "]")
			i, err := strconv.Atoi(num)
			if err != nil {
				break
			}
			out = append(out, segment{index: i})
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return out
}

// KeyPaths lists every key path a file decoding into T can have, a list's
// elements as [] (sources[].name) and a map's keys not at all (its own key
// path stands for them), sorted.
func KeyPaths[T any]() []string {
	var out []string
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case reflect.PointerTo(t).Implements(unmarshalerType):
		case t.Kind() == reflect.Struct:
			for k, ft := range yamlFields(t) {
				p := childPath(path, k)
				out = append(out, p)
				walk(ft, p)
			}
		case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
			walk(t.Elem(), path+"[]")
		}
	}
	walk(reflect.TypeFor[T](), "")
	slices.Sort(out)
	return out
}
