package streamer

import "testing"

// The scopes' globs: '*' any run of characters, nothing else special (the
// database's LIKE forms escape '%', '_' and '\').
func TestGlobMatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"*", "anything", true},
		{"stripe", "stripe", true}, {"stripe", "stripe-eu", false}, {"stripe", "strip", false},
		{"stripe*", "stripe-eu", true}, {"*-eu", "stripe-eu", true}, {"*-eu", "stripe-us", false},
		{"invoice.*", "invoice.paid", true}, {"invoice.*", "invoice", false},
		{"a*a", "a", false}, {"a*a", "aa", true}, {"a*b*c", "abc", true}, {"a*b*c", "acb", false},
		{"a*b*c", "axxbyyc", true}, {"*b*", "abc", true}, {"*b*", "ac", false},
		{"_%", "_%", true}, {"_%", "ab", false}, {`a\*`, `a\x`, true},
		{"**", "x", true}, {"x**y", "xy", true},
	} {
		if got := globMatch(c.pattern, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}
