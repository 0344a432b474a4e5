package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/audit"
)

// inlet audit verify names the events whose occurred_at was filled after
// they were sealed (not a problem: inlet backfill stored fills a NULL one),
// and says when it listed only some of them.
func TestVerifyReportNamesOccurredAtFilled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rep  audit.Report
		want string
	}{
		{audit.Report{OK: true, Events: 3, Checkpoints: 1, SealedThrough: 3, Head: "ab"},
			"intact: 3 events, 1 checkpoint through event id 3 sealed (0 not yet sealed); head ab\n"},
		{audit.Report{OK: true, Events: 3, Checkpoints: 1, SealedThrough: 3, Head: "ab", OccurredAtFilled: 2, OccurredAtFilledIDs: []int64{1, 2}},
			"intact: 3 events, 1 checkpoint through event id 3 sealed (0 not yet sealed); head ab; occurred_at filled after sealing: 2 events (ids 1, 2)\n"},
		{audit.Report{OK: true, Events: 3, Checkpoints: 1, SealedThrough: 3, Head: "ab", OccurredAtFilled: 3, OccurredAtFilledIDs: []int64{1}},
			"intact: 3 events, 1 checkpoint through event id 3 sealed (0 not yet sealed); head ab; occurred_at filled after sealing: 3 events (ids 1, …)\n"},
	} {
		var out bytes.Buffer
		printVerifyReport(&out, tc.rep)
		if got := out.String(); got != tc.want {
			t.Errorf("printVerifyReport:\n got %q\nwant %q", got, tc.want)
		}
	}
	var out bytes.Buffer
	printVerifyReport(&out, audit.Report{ProblemsFound: 1, Problems: []audit.Problem{{Kind: audit.AlteredEvent, EventID: 2, Reason: "event 2 altered"}},
		Events: 2, OccurredAtFilled: 1, OccurredAtFilledIDs: []int64{1}})
	if !strings.Contains(out.String(), "TAMPERED: 1 problem found; checked 2 events, 0 checkpoints through event id 0 sealed (0 not yet sealed); head -; occurred_at filled after sealing: 1 event (ids 1)\n") {
		t.Errorf("printVerifyReport of a failed verify:\n%s", out.String())
	}
}
