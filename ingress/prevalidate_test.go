package ingress_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// manyKeysObject is a JSON object of about size bytes made of as many
// distinct short keys as fit: `{"k0":0,"k1":0,…}`. It is valid JSON and
// carries no signature: any client on the internet can send it.
func manyKeysObject(size int) []byte {
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i := 0; len(b) < size-16; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = strconv.AppendInt(b, int64(i), 36)
		b = append(b, `":0`...)
	}
	return append(b, '}')
}

// allocPerRequest posts body n times, unsigned, to url and returns the bytes
// the process allocated per request (runtime.MemStats.TotalAlloc), and the
// answers' status codes.
func allocPerRequest(t *testing.T, url string, header http.Header, body []byte, n int) (uint64, []int) {
	t.Helper()
	post := func() int {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if header != nil {
			req.Header = header.Clone()
		}
		req.Header.Set("Content-Type", "application/json")
		code, _, _ := do(t, req)
		return code
	}
	post() // warm up the connection
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	codes := make([]int, 0, n)
	for range n {
		codes = append(codes, post())
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(n), codes
}

// TestUnsignedBodyIsParsedBeforeSignature proves that an unauthenticated
// POST makes ingress parse the whole body as JSON into a map, before (or
// without) any signature check, for several presets (review helper-199;
// this describes the code before the fix, on which the test failed: ~32
// MiB allocated per request, ~62 MiB for mailgun, 663 MiB of heap for 32
// at once):
//   - discord, zoom: no signature header at all; the handshake's match
//     (hsDiscordPing, hsZoom) runs lookupJSON on every POST first;
//   - linear: any well-formed (forged) Linear-Signature; the timestamp is
//     read from the body (TimestampJSON) before the MAC is compared;
//   - mailgun: the signature lives in the body (inherent), but it is looked
//     up by two full parses (signature path, then parent-signature path).
//
// lookupJSON (ingress/verify/identity.go:147) unmarshals the whole
// top-level object into map[string]json.RawMessage, copying every value:
// a 1 MiB body of many short keys allocates ~32 MiB per request (~62 MiB
// for mailgun), where the same body to a GitHub source costs ~2 MiB. With
// 32 of them in flight (what the default 32 MiB max_inflight_bytes admits)
// the heap grows by ~650 MiB, against the documented bound (Section: 256
// concurrent 1 MiB webhooks under 150 MiB resident; memory.go: bodies are
// nearly all of ingress's heap), all for requests answered 401.
//
// Expected: an unauthenticated request costs about its body (a small
// multiple, as for GitHub), and 32 at once stay within the documented
// memory bound.
//
// Root cause: ingress/verify/presets.go:281-283 (presetVerifier.Verify runs
// each handshake's match before checkSignature; hsZoom and hsDiscordPing in
// handshake.go match with lookupJSON); hmac.go hmacVerifier.timestamp and
// signatures (lookupJSON before the MAC); identity.go:156-157 (json.Unmarshal
// of the whole object into a map, once per path looked up).
//
// Fixed: lookupJSON scans the body in place (no map, no copies), Mailgun's
// body fields are looked up in one pass, and Zoom's and Twitch's signed
// handshakes check the signature before reading the body.
func TestUnsignedBodyIsParsedBeforeSignature(t *testing.T) {
	discordKey := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	b := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Section.MaxBodyBytes = 1 << 20
		c.Sources = append(c.Sources,
			sources.Source{Name: "discord", Config: verify.Config{Type: "discord",
				Secrets: []string{hex.EncodeToString(discordKey.Public().(ed25519.PublicKey))}}},
			sources.Source{Name: "zoom", Config: verify.Config{Type: "zoom", Secrets: []string{"zoom-secret-token"}}},
			sources.Source{Name: "linear", Config: verify.Config{Type: "linear", Secrets: []string{"linear-secret"}}},
			sources.Source{Name: "mailgun", Config: verify.Config{Type: "mailgun", Secrets: []string{"mailgun-key"}}})
	})
	body := manyKeysObject(1 << 20)
	const n = 8
	control, codes := allocPerRequest(t, b.url+"/webhooks/github", nil, body, n)
	t.Logf("github (control): %d KiB allocated per unsigned 1 MiB request, answers %v", control>>10, codes)
	forged := map[string]http.Header{
		// Any 64 hex digits: a well-formed but forged signature.
		"linear": {"Linear-Signature": {strings.Repeat("ab", 32)}},
	}
	for _, src := range []string{"discord", "zoom", "linear", "mailgun"} {
		got, codes := allocPerRequest(t, b.url+"/webhooks/"+src, forged[src], body, n)
		for _, c := range codes {
			if c != http.StatusUnauthorized {
				t.Fatalf("%s: unsigned request answered %d, want 401", src, c)
			}
		}
		t.Logf("%s: %d KiB allocated per unsigned 1 MiB request (401)", src, got>>10)
		if limit := 3 * max(control, uint64(len(body))); got > limit {
			t.Errorf("%s: an unsigned 1 MiB request allocated %d KiB, %.1f times the body (GitHub: %d KiB); want at most %d KiB",
				src, got>>10, float64(got)/float64(len(body)), control>>10, limit>>10)
		}
	}
	const conc = 32
	pc := peakHeapConcurrent(t, b.url+"/webhooks/github", body, conc)
	pd := peakHeapConcurrent(t, b.url+"/webhooks/discord", body, conc)
	t.Logf("%d unsigned 1 MiB requests at once: peak heap growth github %d MiB, discord %d MiB", conc, pc>>20, pd>>20)
	// Section's doc: with the default bounds, 256 concurrent 1 MiB
	// webhooks keep ingress under 150 MiB resident. 32 unsigned ones must
	// not take more heap than that.
	if pd > 150<<20 {
		t.Errorf("%d unsigned 1 MiB requests to a Discord source at once grew the heap by %d MiB (GitHub source: %d MiB); want under 150 MiB",
			conc, pd>>20, pc>>20)
	}
}

// peakHeapConcurrent posts body, unsigned, from conc clients at once, and
// returns the peak heap in use seen meanwhile.
func peakHeapConcurrent(t *testing.T, url string, body []byte, conc int) uint64 {
	t.Helper()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	done := make(chan struct{})
	peak := make(chan uint64)
	go func() {
		var m runtime.MemStats
		var p uint64
		for {
			select {
			case <-done:
				peak <- p
				return
			default:
			}
			runtime.ReadMemStats(&m)
			p = max(p, m.HeapInuse)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	close(done)
	p := <-peak
	if p < base.HeapInuse {
		return 0
	}
	return p - base.HeapInuse
}
