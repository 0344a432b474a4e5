package ingress_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// cpuTime is the process's user+system CPU time so far.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// forgedV1a is a webhook-signature list of n "v1a,<base64>" entries, each
// a well-formed but forged Ed25519 signature (its top three bits clear, so
// ed25519.Verify hashes the whole message before it finds it wrong).
func forgedV1a(n int) string {
	entries := make([]string, n)
	for i := range entries {
		sig := bytes.Repeat([]byte{byte(i + 1)}, ed25519.SignatureSize)
		sig[63] = 0x01
		entries[i] = "v1a," + base64.StdEncoding.EncodeToString(sig)
	}
	return strings.Join(entries, " ")
}

// TestForgedSignatureListCostsOneVerifyPerEntry proves that one
// unauthenticated request to a Standard Webhooks source with an Ed25519
// (whpk_) key makes ingress run ed25519.Verify over the whole signed
// message ("{id}.{ts}.{body}", up to max_body_bytes) once per v1a entry of
// its webhook-signature header, with no bound on the entries but the
// header limits: ~340 forged entries fit in the 32 KiB of headers ingress
// takes, so a 1 MiB request costs ~340 SHA-512 passes over 1 MiB (plus as
// many point multiplications), hundreds of milliseconds of CPU, where the
// same request with one entry costs about one. A few such requests a
// second hold both cores of the documented 2-core machine; every
// legitimate webhook waits behind them (review helper-199; this describes
// the code before the fix, on which the test failed: 1 entry ~14 ms of CPU,
// 340 entries ~620 ms).
//
// Expected: the CPU an unauthenticated request can cost does not grow with
// the signature entries it lists: a list longer than any sender uses
// (Standard Webhooks lists one entry per signing key, a rotation's two or
// three) is refused as signature_malformed before any verification, or
// only the first few entries are tried.
//
// Root cause: ingress/verify/standardwebhooks.go standardMatchesEd25519
// (the loop over every entry of the list, each ed25519.Verify hashing the
// whole signed content), called from standardVerifier.check for each
// whpk_ key; countStandard only requires one well-formed entry.
//
// Fixed: a list of more than maxStandardSignatures (8) entries is refused
// as signature_malformed before any MAC or verify.
func TestForgedSignatureListCostsOneVerifyPerEntry(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Section.MaxBodyBytes = 1 << 20
		c.Sources = append(c.Sources, sources.Source{Name: "acme", Config: verify.Config{Type: "standard-webhooks",
			Secrets: []string{"whpk_" + base64.StdEncoding.EncodeToString(pub)}}})
	})
	body := bytes.Repeat([]byte("x"), 1<<20)
	send := func(sigs string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, b.url+"/webhooks/acme", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("webhook-id", "msg_forged")
		req.Header.Set("webhook-timestamp", strconv.FormatInt(time.Now().Unix(), 10))
		req.Header.Set("webhook-signature", sigs)
		code, answer, _ := do(t, req)
		return code, answer
	}
	// CPU per request, over n requests.
	measure := func(sigs string, n int) time.Duration {
		send(sigs) // warm up
		start := cpuTime(t)
		for range n {
			if code, answer := send(sigs); code != http.StatusUnauthorized {
				t.Fatalf("forged request answered %d %s, want 401", code, answer)
			}
		}
		return (cpuTime(t) - start) / time.Duration(n)
	}
	const entries = 340 // 340 × 93 bytes: under MaxHeaderBytes (32 KiB)
	list := forgedV1a(entries)
	if len(list) > ingress.MaxHeaderBytes-200 {
		t.Fatalf("list of %d bytes would be refused 431", len(list))
	}
	one := measure(forgedV1a(1), 5)
	many := measure(list, 3)
	t.Logf("CPU per unsigned 1 MiB request: 1 forged v1a entry %s, %d entries %s (%.0fx)", one, entries, many, float64(many)/float64(one))
	if many > 5*one+50*time.Millisecond {
		t.Errorf("an unauthenticated request with %d forged v1a entries cost %s of CPU, one with a single entry %s: the cost grows with the entries (one Ed25519 verify of the 1 MiB body each)",
			entries, many, one)
	}
}
