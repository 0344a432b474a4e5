package verify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// identity finds a verified request's event id and type: where the source's
// configuration says (a header or a JSON path), else where the scheme keeps
// them.
type identity struct {
	idHeader, typeHeader string   // canonical header names, "" if unset
	idPath, typePath     []string // dotted JSON paths split, nil if unset
}

func newIdentity(cfg Config) *identity {
	x := &identity{}
	if cfg.EventIDHeader != "" {
		x.idHeader = http.CanonicalHeaderKey(cfg.EventIDHeader)
	}
	if cfg.EventTypeHeader != "" {
		x.typeHeader = http.CanonicalHeaderKey(cfg.EventTypeHeader)
	}
	if cfg.EventIDJSON != "" {
		x.idPath = strings.Split(cfg.EventIDJSON, ".")
	}
	if cfg.EventTypeJSON != "" {
		x.typePath = strings.Split(cfg.EventTypeJSON, ".")
	}
	return x
}

func validateIdentity(c Config) error {
	if c.EventIDHeader != "" && c.EventIDJSON != "" {
		return fmt.Errorf("event_id_header and event_id_json: set at most one")
	}
	if c.EventTypeHeader != "" && c.EventTypeJSON != "" {
		return fmt.Errorf("event_type_header and event_type_json: set at most one")
	}
	for field, name := range map[string]string{"event_id_header": c.EventIDHeader, "event_type_header": c.EventTypeHeader} {
		if name != "" && !validHeaderName(name) {
			return fmt.Errorf("%s: %q is not a valid header name", field, name)
		}
	}
	for field, path := range map[string]string{"event_id_json": c.EventIDJSON, "event_type_json": c.EventTypeJSON} {
		if path == "" {
			continue
		}
		for _, seg := range strings.Split(path, ".") {
			if seg == "" {
				return fmt.Errorf("%s: %q has an empty segment (write a dotted path like data.id)", field, path)
			}
		}
	}
	return nil
}

// validHeaderName reports whether name is an RFC 9110 token.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// schemeEvent returns a scheme's own event id and type for a verified
// request. needID is false when the source configures the id itself, so a
// scheme that requires an id in the body must not fail for want of it.
type schemeEvent func(needID bool) (id, typ string, err error)

// resolve returns the event id and type of a verified request. form holds
// the parsed body when the scheme's body is form-encoded, nil for JSON.
func (x *identity) resolve(scheme string, req *Request, form url.Values, def schemeEvent) (id, typ string, err error) {
	customID := x.idHeader != "" || x.idPath != nil
	customType := x.typeHeader != "" || x.typePath != nil
	if !customID || !customType {
		if id, typ, err = def(!customID); err != nil {
			return "", "", err
		}
	}
	switch {
	case x.idHeader != "":
		id = req.Header.Get(x.idHeader)
		if id == "" {
			return "", "", fmt.Errorf("%s: %w: no %s header (event_id_header)", scheme, ErrMalformedPayload, x.idHeader)
		}
	case x.idPath != nil:
		var ok bool
		if id, ok = lookupBody(req.Body, form, x.idPath); !ok {
			return "", "", fmt.Errorf("%s: %w: body has no string or number at event_id_json", scheme, ErrMalformedPayload)
		}
	}
	if customID {
		if err := checkEventID(scheme, "configured event id", id); err != nil {
			return "", "", err
		}
	}
	switch {
	case x.typeHeader != "":
		typ = req.Header.Get(x.typeHeader)
	case x.typePath != nil:
		typ, _ = lookupBody(req.Body, form, x.typePath)
	}
	// The type is stored as text too; one that PostgreSQL cannot store would
	// fail every retry, so it is refused like a bad id.
	if !utf8.ValidString(typ) || strings.IndexByte(typ, 0) >= 0 {
		return "", "", fmt.Errorf("%s: %w: event type is not valid UTF-8 text", scheme, ErrMalformedPayload)
	}
	return id, typ, nil
}

// lookupBody reads path from a JSON body, or for a form body (form != nil)
// from the form field path[0], continuing into that field's value as JSON.
func lookupBody(body []byte, form url.Values, path []string) (string, bool) {
	if form == nil {
		return lookupJSON(body, path)
	}
	vals := form[path[0]]
	if len(vals) == 0 {
		return "", false
	}
	if len(path) == 1 {
		return vals[0], true
	}
	return lookupJSON([]byte(vals[0]), path[1:])
}

// jsonValue is what lookupJSONPaths found at one path.
type jsonValue struct {
	s  string
	ok bool
}

// lookupJSON follows path through objects (by key) and arrays (by decimal
// index) of doc and returns the string there, or a number's literal text.
// Anything else, or doc not being valid JSON, reports false. Where a key is
// repeated, its last value counts (as when decoding into a map).
//
// It runs on unauthenticated bodies, before (or in place of) a signature
// check: it keeps nothing but the value it returns (see lookupJSONPaths).
func lookupJSON(doc []byte, path []string) (string, bool) {
	var out [1]jsonValue
	lookupJSONPaths(doc, [][]string{path}, out[:])
	return out[0].s, out[0].ok
}

// lookupJSONPaths is lookupJSON for several paths in one pass over doc,
// which out receives in the order of paths. doc is validated once
// (json.Valid: no allocation), then scanned in place: each object or array
// on the paths is walked once, every other value skipped by its bounds,
// without a map or a copy of it. Decoding the top-level object into a
// map[string]json.RawMessage instead cost about 30 times the body for a body
// of many short keys, on every forged request (review helper-199).
func lookupJSONPaths(doc []byte, paths [][]string, out []jsonValue) {
	clear(out)
	if !json.Valid(doc) {
		return
	}
	start := skipJSONSpace(doc, 0)
	if start == len(doc) {
		return
	}
	idx := make([]int, len(paths))
	for i := range idx {
		idx[i] = i
	}
	val := doc[start:skipJSONValue(doc, start)]
	findJSON(val, paths, idx, 0, out)
}

// findJSON resolves, for each paths[i] with i in idx, the rest of the path
// from depth on within val, a valid JSON value, into out[i].
func findJSON(val []byte, paths [][]string, idx []int, depth int, out []jsonValue) {
	pending := idx[:0:0]
	for _, i := range idx {
		if len(paths[i]) == depth {
			out[i].s, out[i].ok = jsonScalar(val)
		} else {
			pending = append(pending, i)
		}
	}
	if len(pending) == 0 {
		return
	}
	// found[k] is the value at the next segment of paths[pending[k]].
	found := make([][]byte, len(pending))
	switch val[0] {
	case '{':
		jsonMembers(val, func(key, v []byte) {
			for k, i := range pending {
				if jsonKeyIs(key, paths[i][depth]) {
					found[k] = v // the last of a repeated key wins
				}
			}
		})
	case '[':
		want := make([]int, len(pending))
		for k, i := range pending {
			n, err := strconv.Atoi(paths[i][depth])
			if err != nil || n < 0 {
				n = -1
			}
			want[k] = n
		}
		jsonElements(val, func(n int, v []byte) {
			for k := range pending {
				if want[k] == n {
					found[k] = v
				}
			}
		})
	default:
		return
	}
	// Paths that go on through the same value walk it together.
	for k := range pending {
		if found[k] == nil {
			continue
		}
		group := []int{pending[k]}
		for j := k + 1; j < len(pending); j++ {
			if found[j] != nil && &found[j][0] == &found[k][0] {
				group = append(group, pending[j])
				found[j] = nil
			}
		}
		findJSON(found[k], paths, group, depth+1, out)
	}
}

// jsonScalar returns a JSON string's text or a number's literal text;
// anything else reports false.
func jsonScalar(raw []byte) (string, bool) {
	switch c := raw[0]; {
	case c == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	case c == '-' || ('0' <= c && c <= '9'):
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return "", false
		}
		return n.String(), true
	}
	return "", false
}

// jsonKeyIs reports whether key, a member name as it is written (quoted,
// escapes and all), decodes to name exactly as encoding/json decodes it
// (json.Unmarshal into a string): the escapes \" \\ \/ \b \f \n \r \t
// and \uXXXX, a UTF-16 surrogate pair as one rune, a lone surrogate and
// each byte of invalid UTF-8 as U+FFFD; a key that is no valid JSON string
// decodes to nothing. It runs once per member and path on unauthenticated
// bodies, so it decodes incrementally against name, without allocating,
// and stops at the first byte that differs: decoding each escaped key with
// json.Unmarshal cost a decoder and a string per key and path, 16-58 times
// a 1 MiB body of escaped keys (review helper-212). Each step consumes at
// least one byte of name, so a key costs at most len(name)+1 steps.
func jsonKeyIs(key []byte, name string) bool {
	if len(key) < 2 || key[0] != '"' || key[len(key)-1] != '"' {
		return false
	}
	text := key[1 : len(key)-1]
	w := 0 // bytes of name matched so far
	// rest reports whether name continues with rr's UTF-8 encoding, and
	// consumes it.
	rest := func(rr rune) bool {
		var buf [utf8.UTFMax]byte
		n := utf8.EncodeRune(buf[:], rr)
		if len(name)-w < n || name[w:w+n] != string(buf[:n]) {
			return false
		}
		w += n
		return true
	}
	for r := 0; r < len(text); {
		switch c := text[r]; {
		case c == '\\':
			if r+1 >= len(text) {
				return false
			}
			var b byte
			switch text[r+1] {
			case '"', '\\', '/':
				b = text[r+1]
			case 'b':
				b = '\b'
			case 'f':
				b = '\f'
			case 'n':
				b = '\n'
			case 'r':
				b = '\r'
			case 't':
				b = '\t'
			case 'u':
				rr := jsonHex4(text[r:])
				if rr < 0 {
					return false
				}
				r += 6
				if utf16.IsSurrogate(rr) {
					// A high surrogate followed by a low one is one rune;
					// anything else is U+FFFD and the next escape, if any,
					// is read on its own (as encoding/json does).
					if dec := utf16.DecodeRune(rr, jsonHex4(text[r:])); dec != unicode.ReplacementChar {
						rr = dec
						r += 6
					} else {
						rr = unicode.ReplacementChar
					}
				}
				if !rest(rr) {
					return false
				}
				continue
			default: // \' too: encoding/json's scanner refuses it
				return false
			}
			if w >= len(name) || name[w] != b {
				return false
			}
			r += 2
			w++
		case c == '"' || c < ' ':
			return false // invalid in a JSON string
		case c < utf8.RuneSelf:
			if w >= len(name) || name[w] != c {
				return false
			}
			r++
			w++
		default:
			rr, size := utf8.DecodeRune(text[r:])
			if rr == utf8.RuneError && size == 1 {
				// Invalid UTF-8 (a stray byte, an overlong or surrogate
				// encoding) decodes byte by byte to U+FFFD.
				if !rest(unicode.ReplacementChar) {
					return false
				}
			} else {
				// Valid UTF-8 decodes to itself.
				if len(name)-w < size || name[w:w+size] != string(text[r:r+size]) {
					return false
				}
				w += size
			}
			r += size
		}
	}
	return w == len(name)
}

// jsonHex4 returns the code unit of the \uXXXX escape at the start of s,
// or -1 if s does not start with one.
func jsonHex4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// The scanners below walk JSON that json.Valid accepted: they find bounds
// and never check syntax.

// jsonMembers calls fn with each member of obj, a valid JSON object, in
// order: its key as written (with its quotes) and its value.
func jsonMembers(obj []byte, fn func(key, val []byte)) {
	i := skipJSONSpace(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		keyEnd := skipJSONString(obj, i)
		key := obj[i:keyEnd]
		i = skipJSONSpace(obj, keyEnd) + 1 // ':'
		i = skipJSONSpace(obj, i)
		end := skipJSONValue(obj, i)
		fn(key, obj[i:end])
		i = skipJSONSpace(obj, end)
		if i < len(obj) && obj[i] == ',' {
			i = skipJSONSpace(obj, i+1)
		}
	}
}

// jsonElements calls fn with each element of arr, a valid JSON array, and
// its index.
func jsonElements(arr []byte, fn func(n int, val []byte)) {
	i := skipJSONSpace(arr, 1)
	for n := 0; i < len(arr) && arr[i] != ']'; n++ {
		end := skipJSONValue(arr, i)
		fn(n, arr[i:end])
		i = skipJSONSpace(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = skipJSONSpace(arr, i+1)
		}
	}
}

// skipJSONSpace returns the index of the first byte at or after i that is
// no JSON whitespace.
func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipJSONString returns the index just past the string starting at b[i].
func skipJSONString(b []byte, i int) int {
	for i++; i < len(b); {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return len(b)
		}
		i += q
		// A quote after an odd number of backslashes is escaped.
		bs := 0
		for j := i - 1; b[j] == '\\'; j-- {
			bs++
		}
		i++
		if bs%2 == 0 {
			return i
		}
	}
	return len(b)
}

// skipJSONValue returns the index just past the value starting at b[i].
func skipJSONValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipJSONString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipJSONString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	// A number, true, false or null: up to the next delimiter.
	for ; i < len(b); i++ {
		switch b[i] {
		case ',', ']', '}', ' ', '\t', '\r', '\n':
			return i
		}
	}
	return i
}

// jsonObject reports whether body starts, after whitespace, like a JSON
// object.
func jsonObject(body []byte) bool {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	return len(trimmed) > 0 && trimmed[0] == '{'
}

// jsonArray reports whether body starts, after whitespace, like a JSON
// array.
func jsonArray(body []byte) bool {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	return len(trimmed) > 0 && trimmed[0] == '['
}
