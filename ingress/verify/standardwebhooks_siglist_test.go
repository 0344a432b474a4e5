package verify

import (
	"encoding/base64"
	"strings"
	"testing"
)

// TestStandardWebhooksSignatureListBounded checks that a signature list of
// more than maxStandardSignatures entries is refused as malformed, for v1
// and v1a, under webhook-* and svix-* names, even when its last entry is
// genuine, and that a list of exactly that many is verified as before.
// Without the bound each forged v1a entry cost an Ed25519 verify of the
// whole body (review helper-199).
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
	var cases []verifyCase
	for _, family := range []string{"webhook", "svix"} {
		for _, k := range []struct {
			version, secret, genuine string
		}{{"v1", standardSecret, v1}, {"v1a", whpk, v1a}} {
			name := family + " " + k.version
			cases = append(cases,
				verifyCase{name: name + " at the bound", secrets: []string{k.secret},
					header: standardHeadersOf(family, standardMsgID, ts, list(forged(k.genuine, maxStandardSignatures-1), k.genuine)), wantRes: ok},
				verifyCase{name: name + " over the bound", secrets: []string{k.secret},
					header:  standardHeadersOf(family, standardMsgID, ts, list(forged(k.genuine, maxStandardSignatures), k.genuine)),
					wantErr: ErrSignatureMalformed, wantInErr: "more than the 8 accepted"},
			)
		}
	}
	// Extra spaces are no entries.
	cases = append(cases, verifyCase{name: "spaces are no entries", secrets: []string{whpk},
		header: standardHeadersOf("webhook", standardMsgID, ts, strings.Join(append(forged(v1a, maxStandardSignatures-1), v1a), "   ")), wantRes: ok})
	runVerifyCases(t, Config{Type: "standard-webhooks", Secrets: []string{standardSecret}}, standardBody, cases)
}
