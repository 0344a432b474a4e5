package verify

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// lookupJSONMap is lookupJSON as it was before review helper-199: it
// decoded every object on the path into a map[string]json.RawMessage (and
// every array into a []json.RawMessage), copying all of its values. Kept
// as the oracle of the streaming lookupJSON, which must answer exactly as
// it did for every input.
func lookupJSONMap(doc []byte, path []string) (string, bool) {
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

// lookupJSONCases are bodies and paths where a streaming scan could part
// from decoding into maps: repeated keys, escapes, invalid JSON anywhere
// (also after the value looked up), nesting, arrays, whitespace.
var lookupJSONCases = []struct {
	doc  string
	path string // dotted; "" is the empty path
}{
	{`{"a":"x"}`, "a"},
	{`{"a":"x"}`, "b"},
	{`{"a":1.50e3}`, "a"},
	{`{"a":-0}`, "a"},
	{`{"a":true}`, "a"},
	{`{"a":null}`, "a"},
	{`{"a":null}`, "a.b"},
	{`{"a":{"b":"c"}}`, "a.b"},
	{`{"a":{"b":"c"}}`, "a"},
	{`{"a":"x","a":"y"}`, "a"},               // the last of a repeated key wins
	{`{"a":{"b":"1"},"a":{"c":"2"}}`, "a.b"}, // … and hides the first's members
	{`{"a":{"b":"1"},"a":{"c":"2"}}`, "a.c"}, //
	{`{"a":{"b":"1","b":"2"},"a":{"b":3}}`, "a.b"},
	{`{"a":"x"} `, "a"},
	{`{"a":"x"} x`, "a"},       // trailing garbage: invalid
	{`{"a":"x"}{}`, "a"},       // two values: invalid
	{`{"a":"x","b":[1,}`, "a"}, // invalid after the value
	{`{"a":"x",}`, "a"},        // trailing comma
	{`{"a":"x" "b":1}`, "a"},   // missing comma
	{` 	` + "\r\n" + `{ "a" : "x" }`, "a"},
	{"{\"a\":\"x\"}\n", "a"},
	{`{"\u0061":"x"}`, "a"}, // escaped key
	{`{"a\"b":"x"}`, `a"b`},
	{`{"a\\":"x"}`, `a\`},
	{`{"a\\\"":"x","b":"y"}`, "b"},
	{`{"é":"x"}`, "é"},
	{"{\"\xff\":\"x\"}", "\uFFFD"}, // invalid UTF-8 in a key becomes U+FFFD
	{"{\"\xff\":\"x\"}", "\xff"},
	{`{"a":"\ud83d\ude00"}`, "a"},
	{`{"a":"\ud83d"}`, "a"},
	{"{\"a\":\"\xff\"}", "a"},
	{`{"a":"x\\"}`, "a"},
	{`{"":"x"}`, ""},
	{`{"a":{"":"x"}}`, "a."},
	{`[1,"two",{"a":"x"}]`, "0"},
	{`[1,"two",{"a":"x"}]`, "1"},
	{`[1,"two",{"a":"x"}]`, "2.a"},
	{`[1,"two",{"a":"x"}]`, "3"},
	{`[1,"two"]`, "-1"},
	{`[1,"two"]`, "+1"},
	{`[1,"two"]`, "01"},
	{`[1,"two"]`, "-0"},
	{`[1,"two"]`, "x"},
	{`[]`, "0"},
	{`[ ]`, "0"},
	{`{}`, "a"},
	{`{ }`, "a"},
	{`{"a":[{"b":["c"]}]}`, "a.0.b.0"},
	{`{"a":[[],{},"x"]}`, "a.2"},
	{`{"0":"x"}`, "0"},
	{`"x"`, ""},
	{`"x" `, ""},
	{`"x" y`, ""},
	{`12`, ""},
	{`12`, "a"},
	{`-`, ""},
	{``, ""},
	{``, "a"},
	{` `, "a"},
	{`{"a":"x"`, "a"},
	{`{"a":{"b":"x"}}`, "a.b.c"},
	{`{"a":"x"}`, "a.b"},
	{`{"a":1e400}`, "a"},
	{`{"a":"}]{[\""}`, "a"},
	{`{"b":"}","a":"x"}`, "a"},
	// Escaped keys, compared as they decode without decoding them (review
	// helper-212): pairs, lone surrogates, \u0000, an escaped slash.
	{`{"\u0065vent":"x","event":"y"}`, "event"},
	{`{"event":"y","\u0065vent":"x"}`, "event"},
	{`{"\ud83d\ude00":"x"}`, "😀"},
	{`{"\ud83d":"x"}`, "\uFFFD"},
	{`{"\ude00\ud83d":"x"}`, "\uFFFD\uFFFD"},
	{`{"\ud83dx":"x"}`, "\uFFFDx"},
	{`{"a\u0000":"x"}`, "a\x00"},
	{`{"a\/b":"x"}`, "a/b"},
	{`{"\u0073ignature":{"t\u006fken":"t"}}`, "signature.token"},
	{"{\"\xc0\x80\":\"x\"}", "\uFFFD\uFFFD"}, // an overlong NUL: two bytes of invalid UTF-8
	{"{\"\xed\xa0\x80\":\"x\"}", "\uFFFD\uFFFD\uFFFD"},
}

func splitPath(p string) []string {
	if p == "" {
		return nil
	}
	return strings.Split(p, ".")
}

// TestLookupJSONAsMapDecoding checks that the streaming lookupJSON answers
// exactly as decoding into maps did (lookupJSONMap) for each case, alone
// and with the other paths of its body in one lookupJSONPaths call.
func TestLookupJSONAsMapDecoding(t *testing.T) {
	t.Parallel()
	for _, c := range lookupJSONCases {
		checkLookupJSON(t, []byte(c.doc), []string{c.path})
	}
	byDoc := map[string][]string{}
	for _, c := range lookupJSONCases {
		byDoc[c.doc] = append(byDoc[c.doc], c.path)
	}
	for doc, paths := range byDoc {
		checkLookupJSON(t, []byte(doc), paths)
	}
}

// checkLookupJSON compares lookupJSON and lookupJSONPaths with the oracle
// for each of paths (dotted) in doc.
func checkLookupJSON(t testing.TB, doc []byte, paths []string) {
	t.Helper()
	split := make([][]string, len(paths))
	for i, p := range paths {
		split[i] = splitPath(p)
	}
	together := make([]jsonValue, len(paths))
	lookupJSONPaths(doc, split, together)
	for i, path := range split {
		want, wantOK := lookupJSONMap(doc, path)
		got, gotOK := lookupJSON(doc, path)
		if got != want || gotOK != wantOK {
			t.Errorf("lookupJSON(%q, %q) = %q, %v; decoding into maps gives %q, %v", doc, paths[i], got, gotOK, want, wantOK)
		}
		if together[i].s != want || together[i].ok != wantOK {
			t.Errorf("lookupJSONPaths(%q, %q)[%d] = %q, %v; decoding into maps gives %q, %v", doc, paths, i, together[i].s, together[i].ok, want, wantOK)
		}
	}
}

// FuzzLookupJSONAsMapDecoding checks lookupJSON against decoding into maps (the code
// before review helper-199) on any body and paths: paths is a list of
// dotted paths separated by '|'. In the test suite only the seeds run;
// go test -fuzz FuzzLookupJSONAsMapDecoding ./ingress/verify explores further.
func FuzzLookupJSONAsMapDecoding(f *testing.F) {
	for _, c := range lookupJSONCases {
		f.Add([]byte(c.doc), c.path)
	}
	f.Add([]byte(`{"signature":{"token":"t","timestamp":"1","signature":"s"},"event-data":{"event":"delivered"},"signature":{"token":"u"}}`),
		"signature.signature|signature.parent-signature|signature.timestamp|signature.token|event-data.event")
	f.Fuzz(func(t *testing.T, doc []byte, paths string) {
		list := strings.Split(paths, "|")
		if len(list) > 8 {
			list = list[:8]
		}
		checkLookupJSON(t, doc, list)
	})
}

// manyKeys is a JSON object of about size bytes made of as many distinct
// short keys as fit, with the key "event" last.
func manyKeys(size int) []byte {
	b := []byte{'{'}
	for i := 0; len(b) < size-32; i++ {
		b = append(b, '"')
		b = strconv.AppendInt(b, int64(i), 36)
		b = append(b, `":0,`...)
	}
	return append(b, `"event":"x"}`...)
}

// TestLookupJSONKeepsNothingOfTheBody checks that a lookup in a 1 MiB body
// of many short keys allocates next to nothing: the body may be anyone's,
// before any signature check. Decoding it into a map allocated ~32 MiB
// (review helper-199).
func TestLookupJSONKeepsNothingOfTheBody(t *testing.T) {
	body := manyKeys(1 << 20)
	paths := [][]string{{"event"}, {"signature", "signature"}, {"signature", "timestamp"}}
	out := make([]jsonValue, len(paths))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 4
	for range n {
		lookupJSONPaths(body, paths, out)
	}
	runtime.ReadMemStats(&after)
	if !out[0].ok || out[0].s != "x" || out[1].ok || out[2].ok {
		t.Fatalf("lookup = %+v, want event x and no signature", out)
	}
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 64<<10 {
		t.Errorf("a lookup in a 1 MiB body of many keys allocated %d KiB, want under 64 KiB", per>>10)
	}
}
