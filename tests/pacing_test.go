package tests

import (
	"testing"
	"time"

	"github.com/inlet-dev/inlet/streamer"
)

// TestSlowHandlerBacklogWithDefaultBatch: the slow backlog of
// TestSlowHandlerLeasesFollowItsPace with the default batch settings.
//
// Regression test (review helper-117; fixed by beyondFloor and by not
// counting reaped leases in the pace: the text describes the behaviour
// before the fix). The pacing of 1ab5cfb only holds in tests/queuedlease_test.go
// because that test lowers streamer.batch_size to 20. With the default
// batch_size (100) and refs_per_message (32, so min_leased_per_handler 32),
// the same scenario (300 jobs of a healthy 20 ms handler at concurrency 1,
// lease 1 s) still dead-letters/burns attempts: the first claim of a handler
// with no pace reading leases a whole batch (100 = 2 s of work for a 1 s
// lease) through ClaimJobs, since atLimit only paces handlers whose pace is
// measured (streamer/inflight.go atLimit, `!p.measured` skip). The expired
// references count as attempts (lease_expired) although the handler never
// ran them.
//
// Expected: every job completed, no lease_expired attempt (32 unextended
// references = 640 ms of work, within the lease). Actual: lease_expired
// attempts (and dead letters with max_attempts 2).
//
// Scaled since: 150 jobs of 80 ms, lease 4 s, so that a first claim of a
// whole batch (100 = 8 s of work) still expires while the floor and the pace
// leave two seconds of margin (a loaded CI lost 1 s of a 2 s lease now and
// then; with MinLeasedPerHandler 100, as before the fix, this fails).
func TestSlowHandlerBacklogWithDefaultBatch(t *testing.T) {
	slowBacklog(t, 150, 80*time.Millisecond, 4*time.Second, streamer.Config{})
}
