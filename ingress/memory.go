package ingress

import (
	"os"
	"runtime/debug"
)

// memoryLimitBase is what ingress needs beside its bodies: the runtime, a
// connection's buffers (about 10 KiB each), the driver's copies of the
// bodies being written (two per body, up to a batch per committer).
const memoryLimitBase = 48 << 20

// MemoryLimit is the Go runtime's soft memory limit for a process running
// ingress alone: twice ingress.max_inflight_bytes plus 48 MiB (112 MiB with
// the defaults).
//
// Bodies are nearly all of ingress's heap, and the budget caps the ones held
// at once (with their requests' headers); the requests waiting for room
// (their headers) and the bodies parsed for subscription filters are
// bounded by half the budget each more, the connections whose headers are
// still arriving by ingress.max_connections, so the live heap stays under
// the limit whatever the concurrency. But with the collector's default
// pacing (GOGC=100) the heap grows to twice what was live before each
// collection, and the pages it freed are returned to the system slowly. Measured with 1,000 connections posting
// 1 MiB bodies at once and a 32 MiB budget: about 55 MB live, 146-164 MiB
// resident without a limit, 118 MiB with a 100 MiB one (bench: memory,
// burst). Bodies are pointer-free, so collecting more often costs little
// CPU. The limit is soft: past it the collector works harder (at most half
// the CPU), it never fails an allocation.
func MemoryLimit(in Section) int64 {
	in = in.WithDefaults()
	return 2*in.MaxInflightBytes + memoryLimitBase
}

// ApplyMemoryLimit sets MemoryLimit(in) as the process's soft memory limit
// unless GOMEMLIMIT is set (an operator's limit, e.g. from the container's,
// wins). It returns the limit and whether it set it. Call it from a program
// that runs ingress alone; a library embedding ingress beside other work
// should choose its own limit.
func ApplyMemoryLimit(in Section) (int64, bool) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), false
	}
	limit := MemoryLimit(in)
	debug.SetMemoryLimit(limit)
	return limit, true
}
