package streamer

import (
	"sync"
	"time"
)

// How long a handler whose topic the bus refused is held out of the claims:
// from holdFirst, doubling with each refusal in a row, at most holdMost.
const (
	holdFirst = 100 * time.Millisecond
	holdMost  = 5 * time.Second
)

// publishHolds keeps out of the claims, for a while, each handler whose
// references the bus refused (its in-process topic full behind a stalled
// consumer, its stream unreachable). Their leases are given back due at
// once, so without a hold every round would lease and give back the same
// jobs; and a round with one refused topic is not a failure of the others:
// the claim loop goes on at the pace of its wake-ups for every handler not
// held (handler A's stalled consumer never delays handler B). A handler's
// hold ends with its next publish that the bus takes.
type publishHolds struct {
	mu sync.Mutex
	m  map[string]hold
}

type hold struct {
	until time.Time
	wait  time.Duration
}

func newPublishHolds() *publishHolds { return &publishHolds{m: map[string]hold{}} }

// refused holds h out of the claims until now plus its next wait.
func (p *publishHolds) refused(h string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	wait := holdFirst
	if last, ok := p.m[h]; ok {
		wait = min(2*last.wait, holdMost)
	}
	p.m[h] = hold{until: now.Add(wait), wait: wait}
}

// published ends h's hold: the bus took its references.
func (p *publishHolds) published(h string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, h)
}

// held returns the handlers held out of the claims at now. An expired hold
// is kept (its wait doubles if the next publish is refused too) until a
// publish of the handler succeeds.
func (p *publishHolds) held(now time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for h, x := range p.m {
		if now.Before(x.until) {
			out = append(out, h)
		}
	}
	return out
}

// isHeld reports whether h is held out of the claims at now.
func (p *publishHolds) isHeld(h string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	x, ok := p.m[h]
	return ok && now.Before(x.until)
}
