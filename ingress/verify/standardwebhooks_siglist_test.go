//go:build !fuzzonly

package verify

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
)

// TestStandardWebhooksSignatureListBounded checks that a signature list of
// more than maxStandardSignatures well-formed v1a (Ed25519) entries is
// refused as malformed, under webhook-* and svix-* names, even when its
// last entry is genuine, and that a list of exactly that many is verified
// as before. Without the bound each forged v1a entry cost an Ed25519 verify
// of the whole body (review helper-199). Entries that cost no verify are
// not counted (review helper-212): any number of v1 entries (one HMAC per
// secret, then a compare each), of other versions, or of malformed v1a
// entries is verified as before; the bound counted them all, so a genuine
// Svix sender listing many v1 entries across rotations was refused.
func TestStandardWebhooksSignatureListBounded(t *testing.T) {
	t.Parallel()
	priv, whpk := standardEdKeys(t)
	ts := unixString(testNow)
	v1 := standardOracle(t, standardSecret, standardMsgID, testNow, standardBody)
	v1a := standardEdOracle(priv, standardMsgID, ts, standardBody)
	// forged returns n well-formed entries of version like, none of them
	// genuine.
	forged := func(like string, n int) []string {
		version, sig, _ := strings.Cut(like, ",")
		raw, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			t.Fatal(err)
		}
		entries := make([]string, n)
		for i := range entries {
			raw[0]++
			entries[i] = version + "," + base64.StdEncoding.EncodeToString(raw)
		}
		return entries
	}
	list := func(forgedEntries []string, genuine string) string {
		return strings.Join(append(forgedEntries, genuine), " ")
	}
	ok := Result{EventID: standardMsgID, EventType: "invoice.paid"}
	many := 4 * maxStandardSignatures
	var cases []verifyCase
	for _, family := range []string{"webhook", "svix"} {
		cases = append(cases,
			verifyCase{name: family + " v1a at the bound", secrets: []string{whpk},
				header: standardHeadersOf(family, standardMsgID, ts, list(forged(v1a, maxStandardSignatures-1), v1a)), wantRes: ok},
			verifyCase{name: family + " v1a over the bound", secrets: []string{whpk},
				header:  standardHeadersOf(family, standardMsgID, ts, list(forged(v1a, maxStandardSignatures), v1a)),
				wantErr: ErrSignatureMalformed, wantInErr: "more than the 8 accepted"},
			verifyCase{name: family + " v1 entries are not counted", secrets: []string{standardSecret},
				header: standardHeadersOf(family, standardMsgID, ts, list(forged(v1, many), v1)), wantRes: ok},
		)
	}
	// A source with both kinds of key: v1a entries at the bound beside many
	// v1 entries pass; one v1a more is refused, whichever entry is genuine.
	both := []string{standardSecret, whpk}
	mixed := func(v1aEntries int, genuine string) http.Header {
		return standardHeadersOf("webhook", standardMsgID, ts,
			list(append(forged(v1, many), forged(v1a, v1aEntries)...), genuine))
	}
	cases = append(cases,
		verifyCase{name: "v1a at the bound beside many v1, v1 genuine", secrets: both,
			header: mixed(maxStandardSignatures, v1), wantRes: ok},
		verifyCase{name: "v1a at the bound beside many v1, v1a genuine", secrets: both,
			header: mixed(maxStandardSignatures-1, v1a), wantRes: Result{EventID: standardMsgID, EventType: "invoice.paid", SecretIndex: 1}},
		verifyCase{name: "v1a over the bound beside many v1, v1 genuine", secrets: both,
			header:  mixed(maxStandardSignatures+1, v1),
			wantErr: ErrSignatureMalformed, wantInErr: "more than the 8 accepted"},
	)
	// Entries of other versions and malformed v1a entries cost no verify.
	other := make([]string, many)
	short := make([]string, many)
	for i := range other {
		other[i] = "v2," + strings.TrimPrefix(v1a, "v1a,")
		short[i] = v1a[:len(v1a)-4]
	}
	cases = append(cases,
		verifyCase{name: "other versions are not counted", secrets: []string{whpk},
			header: standardHeadersOf("webhook", standardMsgID, ts, list(other, v1a)), wantRes: ok},
		verifyCase{name: "malformed v1a entries are not counted", secrets: []string{whpk},
			header: standardHeadersOf("webhook", standardMsgID, ts, list(short, v1a)), wantRes: ok},
	)
	// Extra spaces are no entries.
	cases = append(cases, verifyCase{name: "spaces are no entries", secrets: []string{whpk},
		header: standardHeadersOf("webhook", standardMsgID, ts, strings.Join(append(forged(v1a, maxStandardSignatures-1), v1a), "   ")), wantRes: ok})
	runVerifyCases(t, Config{Type: "standard-webhooks", Secrets: []string{standardSecret}}, standardBody, cases)
}
