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

// panickyError's Error method panics even on a non-nil receiver.
type panickyError struct{}

func (panickyError) Error() string { panic("no text today") }

// nilPtrError's Error method needs a non-nil receiver.
type nilPtrError struct{ msg string }

func (e *nilPtrError) Error() string { return e.msg }

// A handler's error type is the handler's code: an Error method that panics
// gives a stored note instead of a crash, and a typed nil becomes an error
// saying so.
func TestHandlerErrorsThatCannotSayWhatTheyAre(t *testing.T) {
	t.Parallel()
	if got := errorText(panickyError{}); !strings.Contains(got, "Error method") || !strings.Contains(got, "no text today") {
		t.Errorf("errorText of a panicking Error method: %q", got)
	}
	var typed *nilPtrError
	err := notTypedNil(typed)
	if err == nil || !strings.Contains(errorText(err), "typed nil") || !strings.Contains(errorText(err), "nilPtrError") {
		t.Errorf("notTypedNil(typed nil) = %v", err)
	}
	if err := notTypedNil(&nilPtrError{msg: "real"}); err == nil || err.Error() != "real" {
		t.Errorf("notTypedNil(a real error) = %v", err)
	}
	if err := notTypedNil(nil); err != nil {
		t.Errorf("notTypedNil(nil) = %v", err)
	}
}
