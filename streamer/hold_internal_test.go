package streamer

import (
	"slices"
	"testing"
	"time"
)

func TestPublishHolds(t *testing.T) {
	t.Parallel()
	p := newPublishHolds()
	now := time.Unix(1_800_000_000, 0)
	if p.isHeld("a", now) || len(p.held(now)) != 0 {
		t.Fatal("held before any refusal")
	}
	// Each refusal in a row doubles the hold, up to holdMost.
	want := holdFirst
	for range 10 {
		p.refused("a", now)
		if !p.isHeld("a", now.Add(want-time.Nanosecond)) || p.isHeld("a", now.Add(want)) {
			t.Fatalf("hold after a refusal: want %s", want)
		}
		want = min(2*want, holdMost)
	}
	if got := p.m["a"].wait; got != holdMost {
		t.Fatalf("wait after 10 refusals %s, want %s", got, holdMost)
	}
	// Another handler is not held by a's refusals.
	if p.isHeld("b", now) || !slices.Equal(p.held(now), []string{"a"}) {
		t.Fatalf("held %v, want [a]", p.held(now))
	}
	// A publish that succeeds ends the hold and starts the next one over.
	p.published("a")
	if p.isHeld("a", now) {
		t.Fatal("held after a publish succeeded")
	}
	p.refused("a", now)
	if p.isHeld("a", now.Add(holdFirst)) {
		t.Fatal("the hold after a success did not start over")
	}
}
