package streamer

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"
)

// The pace of a handler's leases: read over windows of at least paceWindow,
// up at once, down with paceDecay; the cap it gives is half a lease's worth,
// at least the floor, at most the limit; a handler with less room than a
// claim batch is claimed apart with that room.
func TestInFlightPacesAHandlersUnextendedLeases(t *testing.T) {
	t.Parallel()
	f := newInFlight(5000, time.Hour, 60*time.Second, 32, 100)
	if got := f.capOf("h"); got != 32 {
		t.Fatalf("cap before any pace: %d, want the floor 32", got)
	}
	now := time.Now()
	p := &handlerPace{}
	f.pace["h"] = p
	p.note(0, now)
	p.mine = 100 // leased 100 since
	p.note(0, now.Add(time.Second))
	if !p.measured || math.Abs(p.perSecond-100) > 1e-9 {
		t.Fatalf("pace after 100 ended in 1 s: %+v, want 100/s", p)
	}
	if got := f.capOf("h"); got != 3000 {
		t.Fatalf("cap at 100/s, lease 60 s: %d, want 3000 (half a lease's worth)", got)
	}
	p.note(0, now.Add(11*time.Second)) // nothing ended for 10 s
	if want := 100 * math.Exp(-1); math.Abs(p.perSecond-want) > 1e-6 {
		t.Fatalf("pace after 10 s idle: %g, want %g", p.perSecond, want)
	}
	p.mine = 50
	p.note(0, now.Add(11*time.Second+100*time.Millisecond)) // 500/s: up at once
	if math.Abs(p.perSecond-500) > 1e-6 {
		t.Fatalf("pace after 50 in 100 ms: %g, want 500", p.perSecond)
	}
	if got := f.capOf("h"); got != 5000 {
		t.Fatalf("cap at 500/s: %d, want the limit 5000", got)
	}

	// A slow handler: 1 job a second, 20 unextended leases (cap 32): it
	// has room for 12, claimed apart; at 32 it is full.
	slow := &handlerPace{measured: true, perSecond: 1}
	f.pace["slow"] = slow
	f.counts["slow"], f.unext["slow"] = 200, 20 // 180 of them running, extended
	f.counted = time.Now()
	full, apart, err := f.atLimit(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if room := apart.room["slow"]; room != 12 || !slices.Contains(apart.ordered, "slow") || !slices.Contains(full, "slow") {
		t.Fatalf("slow handler with 20 unextended leases: room %d, apart %v, excluded from ClaimJobs %v; want room 12, apart, excluded", room, apart.ordered, full)
	}
	f.unext["slow"] = 32
	full, apart, _ = f.atLimit(context.Background(), nil)
	if _, ok := apart.room["slow"]; ok || !slices.Contains(full, "slow") {
		t.Fatalf("slow handler at its cap: room %v, full %v; want full, not claimed apart", apart.room, full)
	}
}
