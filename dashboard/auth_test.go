package dashboard

import (
	"encoding/base64"
	"testing"
	"time"
)

// TestSessionCookieHasOneSpelling: a 32-byte id is 43 base64 characters,
// the last carrying 4 bits of the id and 2 unused. The lenient decoder
// ignored the unused bits, so three other values were the same session
// (and the login test's "altered" cookie was, once in about a thousand
// runs, the session itself). Only the value the server set is a session.
func TestSessionCookieHasOneSpelling(t *testing.T) {
	ss, err := newSessions(time.Hour, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	s, value, err := ss.create()
	if err != nil {
		t.Fatal(err)
	}
	if got := ss.get(value); got != s {
		t.Fatalf("the cookie set is no session: %v", got)
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := value[len(value)-1]
	pos := -1
	for i := range alphabet {
		if alphabet[i] == last {
			pos = i
		}
	}
	if pos < 0 {
		t.Fatalf("last character %q not base64url", last)
	}
	others := 0
	for low := 0; low < 4; low++ {
		alt := alphabet[pos&^3|low]
		if alt == last {
			continue
		}
		others++
		spelled := value[:len(value)-1] + string(alt)
		if id, err := base64.RawURLEncoding.DecodeString(spelled); err != nil {
			t.Fatalf("lenient decode of %q: %v", spelled, err) // the premise: it is the same id
		} else if len(id) != 32 {
			t.Fatalf("lenient decode of %q: %d bytes", spelled, len(id))
		}
		if got := ss.get(spelled); got != nil {
			t.Errorf("another spelling %q of the cookie %q is the session", spelled, value)
		}
	}
	if others != 3 {
		t.Fatalf("%d other spellings, want 3", others)
	}
}
