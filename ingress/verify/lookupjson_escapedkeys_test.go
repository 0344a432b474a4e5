package verify

import (
	"runtime"
	"strconv"
	"testing"
)

// escapedKeys is manyKeys (lookupjson_test.go) with each key's first
// character written as a JSON escape: `{"\u006b0":0,"\u006b1":0,…,
// "event":"x"}`. Valid JSON; an unsigned request may carry it.
func escapedKeys(size int) []byte {
	b := []byte{'{'}
	for i := 0; len(b) < size-32; i++ {
		b = append(b, `"\u006b`...)
		b = strconv.AppendInt(b, int64(i), 36)
		b = append(b, `":0,`...)
	}
	return append(b, `"event":"x"}`...)
}

// TestLookupJSONEscapedKeysKeepNothing is
// TestLookupJSONKeepsNothingOfTheBody with the body's keys written with a
// \u escape (review helper-212; this describes the code before the fix, on
// which the test failed): one lookupJSONPaths over a 1 MiB body of escaped
// keys allocated ~14 MiB per path still looked for at the top level (~58
// MiB for Mailgun's four signature.* paths), where the same body with
// plain keys allocates nothing. The commit that introduced the scanner
// (6087039) promised a lookup over an unauthenticated body "keeps nothing
// of it" (docs/providers.md, CHANGELOG); escaping the keys restored the
// cost it removed, for every unsigned request to Discord, Linear, Mailgun
// (and any {json:} / signature_json / timestamp_json HMAC source).
//
// Expected: under 64 KiB per lookup, as for plain keys.
//
// Root cause: ingress/verify/identity.go jsonKeyIs decoded every key that
// holds a backslash (or invalid UTF-8) with json.Unmarshal(key, &s), which
// allocates a decoder and a string; findJSON calls it for each member x
// each pending path.
//
// Fixed: jsonKeyIs decodes an escaped key incrementally against the path
// segment, without allocating, and stops at the first difference
// (TestJSONKeyIsAsUnmarshal and FuzzJSONKeyIsAsUnmarshal hold it to
// encoding/json).
func TestLookupJSONEscapedKeysKeepNothing(t *testing.T) {
	body := escapedKeys(1 << 20)
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
		t.Errorf("a lookup in a 1 MiB body of escaped keys allocated %d KiB, want under 64 KiB (a body of plain keys: ~0)", per>>10)
	}
}
