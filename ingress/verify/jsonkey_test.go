package verify

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// jsonKeyIsOracle is what jsonKeyIs must answer: whether encoding/json
// decodes key, as written, to name.
func jsonKeyIsOracle(key []byte, name string) bool {
	var s string
	return json.Unmarshal(key, &s) == nil && s == name
}

// jsonKeyCases are member names as written, between the quotes: every
// escape, surrogates paired, lone, reversed and truncated, \u0000, invalid
// and overlong UTF-8, encoded surrogates, and what a JSON string may not
// hold.
var jsonKeyCases = []string{
	``, `a`, `event`, `é`, "😀", "\uFFFD", "\xef\xbf\xbd",
	`\u0061`, `\u006b0`, `\u00e9`, `\u00E9`, `\u20ac`, `\uFFFD`, `\uffff`, `\u0000`, `a\u0000b`,
	`\"`, `\\`, `\/`, `/`, `\b`, `\f`, `\n`, `\r`, `\t`, `a\"b`, `a\\`, `\\\"`,
	`\'`, `\x41`, `\a`, `\`, `a\`, `\u`, `\u00`, `\u00g1`, `\U0061`,
	`\ud83d\ude00`, `\uD83D\uDE00`, `\ud83d`, `\ude00`, `\ude00\ud83d`, `\ud83d\ud83d`,
	`\ud83dx`, `\ud83d\n`, `\ud83d\u0061`, `\ud83d\ude0`, `\ud83d\`, `\ud83d\ude00\ude00`,
	`\udbff\udfff`, `\ud800\udc00`,
	"\xff", "a\xffb", "\xc3", "\xc3\x28", "\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xf0\x80\x80\x80",
	"\xed\xa0\x80", "\xed\xbf\xbf", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "\x80\x80",
	"\x00", "\x1f", "a\nb", "\x7f", `"`, `a"b`,
}

// jsonKeyNames returns names to compare key with: what encoding/json makes
// of it (if anything), that with a byte more or less or changed, and a few
// fixed names.
func jsonKeyNames(key []byte) []string {
	names := []string{"", "a", "\uFFFD", "\x00", `"`, `\`, "'", "😀"}
	var s string
	if json.Unmarshal(key, &s) == nil {
		names = append(names, s, s+"x", s+"\uFFFD", "x"+s)
		if s != "" {
			names = append(names, s[:len(s)-1], s[1:])
			last := []byte(s)
			last[len(last)-1] ^= 1
			names = append(names, string(last))
		}
	}
	// The key as written, unquoted: equal to what it decodes to only
	// where it holds no escape and no invalid UTF-8.
	names = append(names, string(key[1:len(key)-1]))
	return names
}

// checkJSONKeyIs compares jsonKeyIs with encoding/json for key and each of
// names.
func checkJSONKeyIs(t testing.TB, key []byte, names []string) {
	t.Helper()
	for _, name := range names {
		if got, want := jsonKeyIs(key, name), jsonKeyIsOracle(key, name); got != want {
			t.Errorf("jsonKeyIs(%q, %q) = %v, encoding/json says %v", key, name, got, want)
		}
	}
}

func quotedKey(raw string) []byte {
	return []byte(`"` + raw + `"`)
}

// TestJSONKeyIsAsUnmarshal checks that jsonKeyIs, which compares a member
// name as written with a path segment without decoding it, answers exactly
// as decoding the name with encoding/json and comparing: for every escape,
// surrogate pair and lone surrogate, invalid and overlong UTF-8, and names
// that are no valid JSON string.
func TestJSONKeyIsAsUnmarshal(t *testing.T) {
	t.Parallel()
	for _, raw := range jsonKeyCases {
		key := quotedKey(raw)
		checkJSONKeyIs(t, key, jsonKeyNames(key))
		// Each case after, before and between others: what follows an
		// escape or a surrogate changes how it decodes.
		for _, other := range jsonKeyCases {
			for _, key := range [][]byte{quotedKey(raw + other), quotedKey(other + raw + other)} {
				checkJSONKeyIs(t, key, jsonKeyNames(key))
			}
		}
	}
	// Not quoted as a whole: decodes to nothing.
	for _, key := range []string{`"`, `a`, `"a`, `a"`, `"a\"`} {
		checkJSONKeyIs(t, []byte(key), []string{"", "a", `a"`, `a\`})
	}
}

// FuzzJSONKeyIsAsUnmarshal checks jsonKeyIs against encoding/json for any
// member name (raw, between quotes) and any name to compare it with. In
// the test suite only the seeds run; go test -fuzz FuzzJSONKeyIsAsUnmarshal
// ./ingress/verify explores further.
func FuzzJSONKeyIsAsUnmarshal(f *testing.F) {
	for _, raw := range jsonKeyCases {
		var s string
		_ = json.Unmarshal(quotedKey(raw), &s)
		f.Add([]byte(raw), s)
		f.Add([]byte(raw), raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte, name string) {
		key := quotedKey(string(raw))
		checkJSONKeyIs(t, key, append(jsonKeyNames(key), name))
		if utf8.ValidString(name) {
			// The name written back as JSON (encoding/json escapes <, >, &
			// and U+2028/9 as \u) must match it.
			written, err := json.Marshal(name)
			if err != nil {
				t.Fatal(err)
			}
			if !jsonKeyIs(written, name) {
				t.Errorf("jsonKeyIs(%q, %q) = false for the name as encoding/json writes it", written, name)
			}
		}
	})
}

// TestJSONKeyIsAllocatesNothing checks that comparing an escaped member
// name allocates nothing: it runs once per member and path of an
// unauthenticated body (review helper-212).
func TestJSONKeyIsAllocatesNothing(t *testing.T) {
	keys := [][]byte{
		quotedKey(`\u006b0`), quotedKey(`\u0065vent`), quotedKey(`\ud83d\ude00`),
		quotedKey("\xff\xfe"), quotedKey(`\n\t\/`), quotedKey(`event`),
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, key := range keys {
			jsonKeyIs(key, "event")
			jsonKeyIs(key, "😀")
		}
	})
	if allocs != 0 {
		t.Errorf("jsonKeyIs allocated %v times per run, want 0", allocs)
	}
}
