package ingress

import (
	"encoding/json"
	"unicode/utf8"
)

// The limits past which a JSON body is not copied to events.payload although
// it is valid JSON: PostgreSQL's jsonb refuses what Go's encoding/json
// accepts in a few places (\u0000, unpaired surrogates, numbers beyond
// numeric's range, nesting deep enough to exhaust its stack), and a refused
// copy would fail the insert of a webhook whose bytes are fine. These bounds
// are far inside what jsonb takes, and far beyond any provider's payload.
const (
	maxJSONDepth  = 256
	maxJSONDigits = 1000 // digits of one number, and its exponent's value
)

// JSONCopyable reports whether body, stored as raw_body, may also be stored
// as its parsed copy events.payload: at most maxBytes, valid UTF-8, valid
// JSON, and inside the bounds above. It never fails a webhook: a body it
// declines is stored and delivered with payload NULL.
func JSONCopyable(body []byte, maxBytes int) bool {
	if len(body) == 0 || len(body) > maxBytes || !utf8.Valid(body) || !json.Valid(body) {
		return false
	}
	depth := 0
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case c == '"':
			end, ok := scanString(body, i+1)
			if !ok {
				return false
			}
			i = end
		case c == '[' || c == '{':
			if depth++; depth > maxJSONDepth {
				return false
			}
		case c == ']' || c == '}':
			depth--
		case c == '-' || ('0' <= c && c <= '9'):
			end, ok := scanNumber(body, i)
			if !ok {
				return false
			}
			i = end - 1
		}
	}
	return true
}

// scanString checks the escapes of the (valid) string starting at i and
// returns the index of its closing quote.
func scanString(b []byte, i int) (int, bool) {
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i, true
		case '\\':
			i++
			if b[i] != 'u' {
				continue
			}
			r := hex4(b[i+1 : i+5])
			i += 4
			switch {
			case r == 0:
				return 0, false // jsonb: unsupported Unicode escape sequence
			case 0xD800 <= r && r <= 0xDBFF:
				// A high surrogate must be followed by a low one.
				if i+6 >= len(b) || b[i+1] != '\\' || b[i+2] != 'u' {
					return 0, false
				}
				if lo := hex4(b[i+3 : i+7]); lo < 0xDC00 || lo > 0xDFFF {
					return 0, false
				}
				i += 6
			case 0xDC00 <= r && r <= 0xDFFF:
				return 0, false
			}
		}
	}
	return 0, false
}

func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c-'a') + 10
		case 'A' <= c && c <= 'F':
			r |= rune(c-'A') + 10
		}
	}
	return r
}

// scanNumber bounds the (valid) number starting at i and returns the index
// after it.
func scanNumber(b []byte, i int) (int, bool) {
	digits, exp, inExp := 0, 0, false
	for ; i < len(b); i++ {
		switch c := b[i]; {
		case '0' <= c && c <= '9':
			if inExp {
				exp = exp*10 + int(c-'0')
				if exp > maxJSONDigits {
					return 0, false
				}
			} else if digits++; digits > maxJSONDigits {
				return 0, false
			}
		case c == 'e' || c == 'E':
			inExp = true
		case c == '-' || c == '+' || c == '.':
		default:
			return i, true
		}
	}
	return i, true
}
