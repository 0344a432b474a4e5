package main

import (
	"bytes"
	"testing"

	"github.com/inlet-dev/inlet/audit"
)

// inlet audit verify names the events whose payload was filled after they
// were sealed (not a problem: inlet backfill stored fills a NULL one, and
// verify checks it against the body), after those whose occurred_at was.
func TestVerifyReportNamesPayloadFilled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rep  audit.Report
		want string
	}{
		{audit.Report{OK: true, Events: 3, Checkpoints: 1, SealedThrough: 3, Head: "ab", PayloadFilled: 2, PayloadFilledIDs: []int64{1, 2}},
			"intact: 3 events, 1 checkpoint through event id 3 sealed (0 not yet sealed); head ab; payload filled after sealing: 2 events (ids 1, 2)\n"},
		{audit.Report{OK: true, Events: 3, Checkpoints: 1, SealedThrough: 3, Head: "ab", OccurredAtFilled: 1, OccurredAtFilledIDs: []int64{2},
			PayloadFilled: 3, PayloadFilledIDs: []int64{1}},
			"intact: 3 events, 1 checkpoint through event id 3 sealed (0 not yet sealed); head ab; occurred_at filled after sealing: 1 event (ids 2); payload filled after sealing: 3 events (ids 1, …)\n"},
	} {
		var out bytes.Buffer
		printVerifyReport(&out, tc.rep)
		if got := out.String(); got != tc.want {
			t.Errorf("printVerifyReport:\n got %q\nwant %q", got, tc.want)
		}
	}
}
