package ingress

import (
	"context"

	"golang.org/x/sync/semaphore"

	"github.com/inlet-dev/inlet/filter"
)

// parseFactor is the memory a body's parse for the subscription filters
// (filter.ParsePayload: Go maps, slices and boxed values) may take per byte
// of the body, an upper bound measured on the shapes that cost most: a body
// of one-key objects ([{"":0},{"":0},…]) parses to 50 times its size live
// (68 times allocated), empty objects to 21 times, numbers to 8; webhooks as
// providers send them (ids, amounts, nested objects of a few fields) to 4-5
// times.
const parseFactor = 64

// parseRoom bounds the memory of the payloads parsed for the subscription
// filters at once: the parse of a body of n bytes reserves parseFactor × n
// (at most the whole room) until its filters are evaluated, and waits in
// line while the room is spent. It is apart from the body budget, which the
// bodies waiting to be parsed hold (one budget for both would let them
// wait for each other for good), and sized from it: half of
// ingress.max_inflight_bytes. A body whose parse needs more than the whole
// room parses alone.
type parseRoom struct {
	size int64
	sem  *semaphore.Weighted
}

func newParseRoom(inflight int64) *parseRoom {
	size := max(inflight/2, 1)
	return &parseRoom{size: size, sem: semaphore.NewWeighted(size)}
}

// acquire reserves the room to parse body, waiting in line until it is free
// or ctx ends. It returns what it reserved, for release: nothing for a body
// the filters see as null unparsed (over filter.MaxPayload).
func (p *parseRoom) acquire(ctx context.Context, body []byte) (int64, error) {
	if len(body) > filter.MaxPayload {
		return 0, nil
	}
	n := min(int64(len(body))*parseFactor, p.size)
	// Free room is taken whatever ctx says: only a wait for it ends with
	// ctx (a request out of time for another reason is not overloaded).
	if p.sem.TryAcquire(n) {
		return n, nil
	}
	if err := p.sem.Acquire(ctx, n); err != nil {
		return 0, err
	}
	return n, nil
}

// release gives back n reserved bytes.
func (p *parseRoom) release(n int64) {
	if n > 0 {
		p.sem.Release(n)
	}
}
