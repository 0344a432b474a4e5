package config

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a configuration file, where a person can
// find it: the line (1-based; 0 when no line of the file holds it, as for a
// required key left out of a section that is not there either) and the key
// path in YAML terms (streamer.poll_interval, sources[0].secrets[1]).
type Problem struct {
	Line    int
	Path    string
	Message string
}

// Problems is every problem found in one file: the error Load and Parse
// return for a file that is wrong. Its text is one problem a line,
// `FILE:LINE: key.path: message` (`line LINE: ...` when there is no file).
type Problems struct {
	// File is the path of the file; "" for bytes handed to Parse.
	File string
	List []Problem
}

func (ps *Problems) Error() string {
	lines := make([]string, len(ps.List))
	for i, p := range ps.List {
		lines[i] = ps.format(p)
	}
	return strings.Join(lines, "\n")
}

func (ps *Problems) format(p Problem) string {
	var b strings.Builder
	switch {
	case ps.File != "" && p.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", ps.File, p.Line)
	case ps.File != "":
		b.WriteString(ps.File + ": ")
	case p.Line > 0:
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Path != "" {
		b.WriteString(p.Path + ": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

func (ps *Problems) add(line int, path, msg string) {
	p := Problem{Line: line, Path: path, Message: msg}
	if !slices.Contains(ps.List, p) {
		ps.List = append(ps.List, p)
	}
}

// sort orders the problems by line, those without one last.
func (ps *Problems) sort() {
	slices.SortStableFunc(ps.List, func(a, b Problem) int {
		switch {
		case a.Line == b.Line:
			return 0
		case a.Line == 0:
			return 1
		case b.Line == 0:
			return -1
		}
		return a.Line - b.Line
	})
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// splitLine takes the leading "line N: " (yaml.v3's form) off msg.
func splitLine(msg string) (int, string) {
	m := yamlLine.FindStringSubmatch(msg)
	if m == nil {
		return 0, strings.TrimPrefix(msg, "yaml: ")
	}
	n, _ := strconv.Atoi(m[1])
	return n, msg[len(m[0]):]
}

// KeyError is a validation error that carries the key path it is about
// (silence.max_silence.stripe-eu), so the path is not read back out of its
// text: a map key is the operator's own (a source name may hold '-'). Its
// text is `path: message`, as every section's errors. A section returns
// it itself (not wrapped) for a problem whose path holds a map key.
type KeyError struct {
	Path    string
	Message string
}

func (e *KeyError) Error() string { return e.Path + ": " + e.Message }

// KeyErrorf returns a *KeyError at path with the message format and args
// make.
func KeyErrorf(path, format string, args ...any) error {
	return &KeyError{Path: path, Message: fmt.Sprintf(format, args...)}
}

// leadingPath is the key path a validation message starts with
// (`streamer.wake: ...`, `sources[1].name: ...`), and the rest of it. A
// top-level key is lower-case; a key below it may be a map key, which
// may hold '-' and capitals (a source name: silence.max_silence.stripe-eu).
var leadingPath = regexp.MustCompile(`^[a-z_][a-z0-9_]*(?:\.[A-Za-z0-9_][A-Za-z0-9_-]*|\[\d+\])*`)

// problemOf is the key path a validation error names, and the rest of its
// text: a *KeyError's own, else read from the start of its text.
func problemOf(err error) (path, rest string) {
	if ke, ok := err.(*KeyError); ok { //nolint:errorlint // only an unwrapped one: a wrapper's text may name another path
		return ke.Path, ke.Message
	}
	return splitPath(err.Error())
}

func splitPath(msg string) (path, rest string) {
	path = leadingPath.FindString(msg)
	if path == "" {
		return "", msg
	}
	rest = strings.TrimPrefix(strings.TrimPrefix(msg[len(path):], ":"), " ")
	return path, rest
}

// related reports whether one of two key paths is the other or inside it.
func related(a, b string) bool {
	inside := func(x, y string) bool {
		return x == y || strings.HasPrefix(x, y+".") || strings.HasPrefix(x, y+"[")
	}
	return inside(a, b) || inside(b, a)
}

// topSection is the top-level key of a key path.
func topSection(path string) string {
	if i := strings.IndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return path
}

// flatten lists the errors joined in err (errors.Join), depth first.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok { //nolint:errorlint // a join's own list, not a wrapped error's
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// suggest is the known key closest to key, if one is close enough to be a
// typo of it ("sourcs" → "sources").
func suggest(key string, known []string) (string, bool) {
	best, bestD := "", -1
	for _, k := range known {
		d := distance(strings.ToLower(key), k)
		if bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	if bestD < 0 || bestD > max(2, len(key)/3) || bestD >= len(key) {
		return "", false
	}
	return best, true
}

// distance is the edit distance of a and b (insertions, deletions,
// substitutions and swaps of two neighbours each count one).
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range rb {
		d[0][j+1] = j + 1
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
