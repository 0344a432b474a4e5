package logvalue

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestClipCutsAtACharacterAndSaysTheLength(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want string
	}{
		{"short", `"short"`},
		{strings.Repeat("a", Bytes), `"` + strings.Repeat("a", Bytes) + `"`},
		{strings.Repeat("a", 60<<10), `"` + strings.Repeat("a", Bytes) + `…" (61440 bytes)`},
		// 63 ASCII bytes then a 3-byte character across the cut: it is left out whole.
		{strings.Repeat("a", Bytes-1) + "€€", `"` + strings.Repeat("a", Bytes-1) + `…" (69 bytes)`},
	} {
		if got := Text(c.in); got != c.want {
			t.Errorf("Text(%.20q… %d bytes) = %q, want %q", c.in, len(c.in), got, c.want)
		}
	}
	attrs := Attrs("source", strings.Repeat("€", 1000))
	if len(attrs) != 2 {
		t.Fatalf("logAttrs of a long value: %v, want the cut value and its length", attrs)
	}
	if v := attrs[0].(interface{ String() string }).String(); !utf8.ValidString(v) || len(v) > Bytes+len("source=…") {
		t.Fatalf("cut value %q", v)
	}
}

func TestLogLimiterLetsOneLineThroughPerInterval(t *testing.T) {
	t.Parallel()
	l := NewLimiter(time.Second)
	t0 := time.Unix(1000, 0)
	if ok, n := l.Allow("a", t0); !ok || n != 0 {
		t.Fatalf("first line: %v %d", ok, n)
	}
	for i := range 9 {
		if ok, _ := l.Allow("a", t0.Add(time.Duration(i)*100*time.Millisecond)); ok {
			t.Fatalf("line %d within the interval let through", i+2)
		}
	}
	if ok, _ := l.Allow("b", t0); !ok {
		t.Fatal("another key is held back by the first")
	}
	if ok, n := l.Allow("a", t0.Add(time.Second)); !ok || n != 9 {
		t.Fatalf("after the interval: %v, suppressed %d, want true, 9", ok, n)
	}
	if ok, n := l.Allow("a", t0.Add(3*time.Second)); !ok || n != 0 {
		t.Fatalf("after a quiet interval: %v, suppressed %d, want true, 0", ok, n)
	}
}
