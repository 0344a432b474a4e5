// Package logvalue bounds what a request can put in a log line: a value the
// sender chose (a source name from the path, an event id or type, an error
// text quoting one) is cut to a few dozen bytes, and a line repeated per
// request (a rejection) is rate-limited per key. Ingress and the relay, the
// two services a sender reaches, log through it.
package logvalue

import (
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Bytes is the most of a request-derived value (a source name from
// the path, an event id or type, an error text that quotes one) written to a
// log line or an error: a sender must not be able to grow the log by the
// size of what it sends.
const Bytes = 64

// Clip returns s cut to at most n bytes (at a character boundary) followed by
// "…", and whether it was cut.
func Clip(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…", true
}

// Text is s quoted, cut to Bytes and followed by its full length
// when cut: for error texts, which name an id but must not carry a large one.
func Text(s string) string {
	c, cut := Clip(s, Bytes)
	if !cut {
		return strconv.Quote(s)
	}
	return strconv.Quote(c) + " (" + strconv.Itoa(len(s)) + " bytes)"
}

// Attrs is the attribute key=s for a value a request chose, cut to
// Bytes, and when cut a second attribute key_bytes with its length.
func Attrs(key, s string) []any {
	c, cut := Clip(s, Bytes)
	if !cut {
		return []any{slog.String(key, s)}
	}
	return []any{slog.String(key, c), slog.Int(key+"_bytes", len(s))}
}

// ErrorBytes bounds an error's text in a log line. Errors carry no
// payload (ids in them are clipped), but a driver's message may quote more.
const ErrorBytes = 512

// ErrorAttr is the attribute error=err's text, cut to ErrorBytes.
func ErrorAttr(err error) slog.Attr {
	s, _ := Clip(err.Error(), ErrorBytes)
	return slog.String("error", s)
}

// Limiter lets through one line per key every interval and counts the
// lines it held back, so a sender repeating a rejected request (an unknown
// source, a bad signature) cannot fill the log: metrics still count each.
type Limiter struct {
	every time.Duration
	mu    sync.Mutex
	keys  map[string]*limitedKey
}

type limitedKey struct {
	last       time.Time
	suppressed int
}

// maxLimitedKeys bounds the limiter's memory; keys are configured source
// names and fixed reasons, so this is never reached unless misused.
const maxLimitedKeys = 4096

// NewLimiter lets one line per key through every interval.
func NewLimiter(every time.Duration) *Limiter {
	return &Limiter{every: every, keys: map[string]*limitedKey{}}
}

// Allow reports whether a line for key may be written now, and how many were
// held back since the last one written.
func (l *Limiter) Allow(key string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[key]
	if k == nil {
		if len(l.keys) >= maxLimitedKeys {
			clear(l.keys)
		}
		k = &limitedKey{}
		l.keys[key] = k
	} else if now.Sub(k.last) < l.every {
		k.suppressed++
		return false, 0
	}
	n := k.suppressed
	k.last, k.suppressed = now, 0
	return true, n
}
