package filter

import (
	"strings"
	"testing"
)

// Knuth-Morris-Pratt agrees with strings.Contains on every haystack of up
// to 10 bytes and needle of up to 6 over a two-letter alphabet (a search's
// hard cases are repetitions).
func TestContainsKMPAgreesWithStrings(t *testing.T) {
	words := func(max int) []string {
		ws := []string{""}
		for l := 1; l <= max; l++ {
			for m := range 1 << l {
				b := make([]byte, l)
				for i := range b {
					b[i] = 'a' + byte(m>>i&1)
				}
				ws = append(ws, string(b))
			}
		}
		return ws
	}
	needles := words(6)
	for _, s := range words(10) {
		for _, sub := range needles {
			if got, want := containsKMP(s, sub), strings.Contains(s, sub); got != want {
				t.Fatalf("containsKMP(%q, %q) = %v, want %v", s, sub, got, want)
			}
		}
	}
}

// contains agrees with strings.Contains, its needle repeated past the 64
// bytes from which it searches by Knuth-Morris-Pratt.
func FuzzContains(f *testing.F) {
	f.Add("ab", "ab", uint8(40), uint8(33))
	f.Add("abaababaab", "abaab", uint8(20), uint8(30))
	f.Add("xabcdefghijklmno", "xabcdefghijklmno", uint8(5), uint8(4))
	f.Add("b", "b", uint8(100), uint8(99))
	f.Add("aaaaaaaab", "aaaa", uint8(30), uint8(17))
	f.Fuzz(func(t *testing.T, s, sub string, sn, subn uint8) {
		hay := strings.Repeat(s, int(sn))
		needle := strings.Repeat(sub, int(subn)) + sub[:len(sub)/2]
		if got, want := contains(hay, needle), strings.Contains(hay, needle); got != want {
			t.Fatalf("contains(%q, %q) = %v, want %v", hay, needle, got, want)
		}
		if got, want := contains(hay+needle+s, needle), true; got != want {
			t.Fatalf("contains(%q, %q) = %v, want %v", hay+needle+s, needle, got, want)
		}
	})
}
