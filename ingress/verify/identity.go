package verify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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

// lookupJSON follows path through objects (by key) and arrays (by decimal
// index) of doc and returns the string there, or a number's literal text.
// Anything else, or invalid JSON on the way, reports false. Only the
// objects on the path are decoded, one level at a time.
func lookupJSON(doc []byte, path []string) (string, bool) {
	raw := json.RawMessage(doc)
	for _, seg := range path {
		raw = bytes.TrimLeft(raw, " \t\r\n")
		if len(raw) == 0 {
			return "", false
		}
		switch raw[0] {
		case '{':
			var obj map[string]json.RawMessage
			if json.Unmarshal(raw, &obj) != nil {
				return "", false
			}
			next, ok := obj[seg]
			if !ok {
				return "", false
			}
			raw = next
		case '[':
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 {
				return "", false
			}
			var arr []json.RawMessage
			if json.Unmarshal(raw, &arr) != nil || i >= len(arr) {
				return "", false
			}
			raw = arr[i]
		default:
			return "", false
		}
	}
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "", false
	}
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
