package consumers

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestErrorTextIsStorable(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		in      string
		wantLen int
	}{
		"short":          {"boom", 4},
		"exactly max":    {strings.Repeat("a", maxErrorText), maxErrorText},
		"long ascii":     {strings.Repeat("a", 5000), maxErrorText},
		"long multibyte": {strings.Repeat("é", 3000), maxErrorText}, // 2 bytes each: cut on a boundary
		"rune at cut":    {strings.Repeat("a", maxErrorText-1) + "€€", maxErrorText - 1},
	}
	for name, c := range cases {
		got := errorText(errors.New(c.in))
		if len(got) != c.wantLen {
			t.Errorf("%s: %d bytes, want %d", name, len(got), c.wantLen)
		}
		if !utf8.ValidString(got) {
			t.Errorf("%s: not valid UTF-8", name)
		}
	}
	got := errorText(errors.New("a\x00b\xffc"))
	if strings.ContainsRune(got, 0) || !utf8.ValidString(got) || !strings.HasPrefix(got, "a") || !strings.HasSuffix(got, "c") {
		t.Errorf("NUL and invalid bytes not replaced: %q", got)
	}
}
