package ingress_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// escapedKeysObject is manyKeysObject with each key's first character
// written as a JSON escape: `{"\u006b0":0,"\u006b1":0,…}`. Valid JSON, no
// signature: anyone can send it.
func escapedKeysObject(size int) []byte {
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i := 0; len(b) < size-16; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `"\u006b`...)
		b = strconv.AppendInt(b, int64(i), 36)
		b = append(b, `":0`...)
	}
	return append(b, '}')
}

// TestEscapedKeysCostManyTimesTheBodyBeforeSignature proves that the fix of
// review helper-199 (commit 6087039, "JSON paths read from a body in one
// scan that keeps nothing but the value") was undone by writing the body's
// keys with a JSON escape (\u006b for k) (review helper-212; this describes
// the code before the fix, on which the test failed). An unsigned 1 MiB
// body of such keys, answered 401, still made ingress allocate tens of MiB
// before any signature check: ~16 MiB for a Discord or Linear source, ~58
// MiB for Mailgun (of the order of the ~32/~62 MiB the commit set out to
// remove), because every escaped key was decoded with json.Unmarshal, once
// per path still being looked for at that level (Mailgun looks for 4 paths
// under "signature" in one pass).
//
// Expected (what TestUnsignedBodyIsParsedBeforeSignature asserts for plain
// keys, and docs/providers.md promises: reading a field of an
// unauthenticated body "scans it in place and keeps nothing of it"): an
// unsigned request costs about its body, at most 3x a GitHub source's cost.
//
// Root cause: ingress/verify/identity.go jsonKeyIs fell back to
// json.Unmarshal(key, &s) for every key holding a backslash or invalid
// UTF-8, an allocation of a decodeState and a string per key, called from
// findJSON for each key x each pending path.
//
// Fixed: jsonKeyIs compares an escaped key with the path segment as it
// decodes it, without allocating.
func TestEscapedKeysCostManyTimesTheBodyBeforeSignature(t *testing.T) {
	discordKey := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	b := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Section.MaxBodyBytes = 1 << 20
		c.Sources = append(c.Sources,
			sources.Source{Name: "discord", Config: verify.Config{Type: "discord",
				Secrets: []string{hex.EncodeToString(discordKey.Public().(ed25519.PublicKey))}}},
			sources.Source{Name: "linear", Config: verify.Config{Type: "linear", Secrets: []string{"linear-secret"}}},
			sources.Source{Name: "mailgun", Config: verify.Config{Type: "mailgun", Secrets: []string{"mailgun-key"}}})
	})
	body := escapedKeysObject(1 << 20)
	const n = 8
	control, codes := allocPerRequest(t, b.url+"/webhooks/github", nil, body, n)
	t.Logf("github (control): %d KiB allocated per unsigned 1 MiB request, answers %v", control>>10, codes)
	forged := map[string]http.Header{
		"linear": {"Linear-Signature": {strings.Repeat("ab", 32)}},
	}
	for _, src := range []string{"discord", "linear", "mailgun"} {
		got, codes := allocPerRequest(t, b.url+"/webhooks/"+src, forged[src], body, n)
		for _, c := range codes {
			if c != http.StatusUnauthorized {
				t.Fatalf("%s: unsigned request answered %d, want 401", src, c)
			}
		}
		t.Logf("%s: %d KiB allocated per unsigned 1 MiB request (401)", src, got>>10)
		if limit := 3 * max(control, uint64(len(body))); got > limit {
			t.Errorf("%s: an unsigned 1 MiB body of escaped keys allocated %d KiB, %.1f times the body (GitHub: %d KiB); want at most %d KiB",
				src, got>>10, float64(got)/float64(len(body)), control>>10, limit>>10)
		}
	}
}
