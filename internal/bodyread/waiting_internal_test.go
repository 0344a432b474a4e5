package bodyread

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// A request's reservation holds its headers beside its body (requestCost),
// until the caller releases it, whatever path the read took: a body whole in
// its head, one grown past it, a chunked one.
func TestReadHoldsTheRequestsHeadersWithItsBody(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		size    int
		chunked bool
	}{
		{"within the head", 3 << 10, false},
		{"past the head", 200 << 10, false},
		{"chunked within the head", 3 << 10, true},
		{"chunked past the head", 200 << 10, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rd := &Reader{Budget: NewBudget(4<<20, 256<<10), WaitTimeout: time.Second}
			want := bytes.Repeat([]byte("b"), c.size)
			var body io.Reader = bytes.NewReader(want)
			if c.chunked {
				body = io.MultiReader(body) // no length: read as chunked
			}
			r := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", body)
			if c.chunked {
				r.ContentLength = -1
			}
			r.Header.Set("X-Pad", strings.Repeat("p", 10<<10))
			cost := requestCost(r)
			if cost < 10<<10+connBytes {
				t.Fatalf("requestCost %d: less than the 10 KiB header and connBytes", cost)
			}
			got, held, fault := rd.Read(context.Background(), httptest.NewRecorder(), r, 256<<10)
			if fault != OK || !bytes.Equal(got, want) {
				t.Fatalf("Read: fault %v, %d bytes, want OK and the %d sent", fault, len(got), len(want))
			}
			if room := held - cost; room < int64(len(got)) || room > int64(cap(got)) || rd.Budget.InUse() != held {
				t.Errorf("held %d, in use %d; want the body's room (%d-%d) plus the request's cost %d", held, rd.Budget.InUse(), len(got), cap(got), cost)
			}
			if rd.Budget.headsUsed.Load() != 0 || rd.Budget.growUsed.Load() != 0 {
				t.Errorf("after the read: %d in heads, %d growing; want 0", rd.Budget.headsUsed.Load(), rd.Budget.growUsed.Load())
			}
			rd.Budget.Release(held)
			if n := rd.Budget.InUse(); n != 0 {
				t.Errorf("%d in use after the release", n)
			}
		})
	}
}

// Requests that find no room for their head wait, each holding a place of
// its cost in the waiting share (half the budget); one that finds no place
// there is refused at once (errNoRoomToWait), not queued. Those that waited
// get their room once it frees up. A request costing more than the whole
// share still waits when it is alone.
func TestRequestsWaitingForAHeadAreBounded(t *testing.T) {
	t.Parallel()
	const size, cost = 1 << 20, 100 << 10 // a waiting share of 512 KiB: 5 waiters of 100 KiB
	b := NewBudget(size, 256<<10)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all, _, err := b.acquire(ctx, size) // the budget spent
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make(chan error, 5)
	for range 5 {
		wg.Go(func() {
			head, extra, err := b.acquireHead(ctx, 100, cost)
			if err == nil && (head != 100 || extra != cost) {
				err = errors.New("reserved the wrong room")
			}
			got <- err
			b.releaseHead(head + extra)
			b.Release(head + extra)
		})
	}
	// The five wait: the sixth finds no place and is refused at once.
	deadline := time.Now().Add(10 * time.Second)
	for b.waitSize-cost*5 != availableWaiting(b) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if _, _, err := b.acquireHead(ctx, 100, cost); !errors.Is(err, errNoRoomToWait) {
		t.Fatalf("a sixth waiter: %v, want errNoRoomToWait", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the sixth waiter was refused after %s, want at once", d)
	}
	b.Release(all)
	wg.Wait()
	close(got)
	for err := range got {
		if err != nil {
			t.Errorf("a waiter: %v", err)
		}
	}
	if b.InUse() != 0 || b.headsUsed.Load() != 0 || availableWaiting(b) != b.waitSize {
		t.Errorf("%d in use, %d in heads, %d of the waiting share free (of %d)", b.InUse(), b.headsUsed.Load(), availableWaiting(b), b.waitSize)
	}

	// Alone, a waiter costing more than the share waits all the same.
	all, _, _ = b.acquire(ctx, size)
	done := make(chan error, 1)
	go func() {
		head, extra, err := b.acquireHead(ctx, 100, 2*size)
		b.releaseHead(head + extra)
		b.Release(head + extra)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	b.Release(all)
	if err := <-done; err != nil {
		t.Errorf("a lone waiter costing more than the waiting share: %v", err)
	}
}

// availableWaiting is the waiting share's free bytes (probed: taken and
// given back at once).
func availableWaiting(b *Budget) int64 {
	lo, hi := int64(0), b.waitSize
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if b.waiting.TryAcquire(mid) {
			b.waiting.Release(mid)
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}
