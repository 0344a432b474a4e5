package groupcommit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/groupcommit"
)

// recorder is a commit function that answers each request with its value
// doubled and remembers each batch's values.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	hold    chan struct{} // when set, a commit waits for it
	// commits counts commits begun; callers counts calls to size, which Do
	// makes just before it queues.
	commits, callers atomic.Int32
}

func (r *recorder) commit(batch []*groupcommit.Request[int, int]) {
	r.commits.Add(1)
	if r.hold != nil {
		<-r.hold
	}
	vals := make([]int, len(batch))
	for i, q := range batch {
		vals[i] = q.Value
	}
	r.mu.Lock() // before answering: a caller answered may read batches
	r.batches = append(r.batches, vals)
	r.mu.Unlock()
	for _, q := range batch {
		q.Answer(q.Value*2, nil)
	}
}

// size weighs a value as itself, counting the callers.
func (r *recorder) size(v int) int64 {
	r.callers.Add(1)
	return int64(v)
}

// waitFor waits until at least commits commits have begun and callers
// callers have reached their queue. (Not internal/testwait: this module
// depends on nothing, its tests included.)
func (r *recorder) waitFor(t *testing.T, commits, callers int32) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, q := r.commits.Load(), r.callers.Load()
		if c >= commits && q >= callers {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %d commits begun and %d callers at the queue; last saw %d and %d", commits, callers, c, q)
		}
		time.Sleep(time.Millisecond) // polling the counters
	}
}

func TestEachCallerGetsItsOwnAnswerAndBatchesAreShared(t *testing.T) {
	rec := &recorder{hold: make(chan struct{})}
	// Weighed (no MaxBytes: it bounds nothing) to count the callers.
	g := groupcommit.New(groupcommit.Config{MaxBatch: 8, Committers: 1, MaxWait: -1}, rec.size, rec.commit)
	defer g.Close()

	const n = 100
	var wg sync.WaitGroup
	got := make([]int, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { got[i], errs[i] = g.Do(context.Background(), i) })
	}
	// The first commit holds until every caller has queued (the queue holds
	// MaxBatch × Committers, the rest wait to queue); then all flow.
	rec.waitFor(t, 1, n)
	close(rec.hold)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || got[i] != 2*i {
			t.Fatalf("caller %d got (%d, %v), want (%d, nil)", i, got[i], errs[i], 2*i)
		}
	}
	seen := map[int]bool{}
	for _, b := range rec.batches {
		if len(b) > 8 {
			t.Fatalf("a batch of %d exceeds MaxBatch 8: %v", len(b), b)
		}
		for _, v := range b {
			if seen[v] {
				t.Fatalf("value %d committed twice", v)
			}
			seen[v] = true
		}
	}
	if len(seen) != n {
		t.Fatalf("%d values committed, want %d", len(seen), n)
	}
	if len(rec.batches) >= n/2 {
		t.Fatalf("%d commits for %d concurrent callers: batches were not shared", len(rec.batches), n)
	}
}

func TestALoneRequestDoesNotWaitForCompany(t *testing.T) {
	rec := &recorder{}
	g := groupcommit.New(groupcommit.Config{MaxWait: time.Hour}, nil, rec.commit)
	defer g.Close()
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(context.Background(), 1)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a lone request waited for MaxWait (1h)")
	}
}

func TestMaxBytesClosesABatchAndAnOversizedRequestGoesAlone(t *testing.T) {
	rec := &recorder{hold: make(chan struct{})}
	g := groupcommit.New(groupcommit.Config{MaxBatch: 100, MaxBytes: 100, Committers: 1, MaxWait: -1}, rec.size, rec.commit)
	defer g.Close()
	var wg sync.WaitGroup
	vals := []int{40, 40, 40, 250, 30, 30, 30, 30, 10}
	for _, v := range vals {
		wg.Go(func() {
			if got, err := g.Do(context.Background(), v); err != nil || got != 2*v {
				t.Errorf("Do(%d) = (%d, %v)", v, got, err)
			}
		})
	}
	rec.waitFor(t, 1, int32(len(vals)))
	close(rec.hold)
	wg.Wait()
	total := 0
	for _, b := range rec.batches {
		sum := 0
		for _, v := range b {
			sum += v
			total += v
		}
		if sum > 100 && len(b) > 1 {
			t.Fatalf("batch %v weighs %d > MaxBytes 100", b, sum)
		}
	}
	if want := 40*3 + 250 + 30*4 + 10; total != want {
		t.Fatalf("committed %d bytes in all, want %d (batches %v)", total, want, rec.batches)
	}
}

func TestCloseAnswersQueuedRequestsAndRefusesNewOnes(t *testing.T) {
	rec := &recorder{hold: make(chan struct{})}
	g := groupcommit.New(groupcommit.Config{MaxBatch: 1, Committers: 1}, rec.size, rec.commit)
	results := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := g.Do(context.Background(), i)
			results <- err
		}()
	}
	rec.waitFor(t, 1, 3) // one commits (held), two queue
	go func() {
		// Close has nothing to observe from outside while it waits for the
		// held commit: give it a moment to begin, then let the commit end.
		time.Sleep(50 * time.Millisecond)
		close(rec.hold)
	}()
	g.Close()
	var ok, closed int
	for range 3 {
		switch err := <-results; {
		case err == nil:
			ok++
		case errors.Is(err, groupcommit.ErrClosed):
			closed++
		default:
			t.Fatalf("unexpected error %v", err)
		}
	}
	if ok < 1 || ok+closed != 3 {
		t.Fatalf("%d committed and %d closed, want the one in flight committed and the rest closed", ok, closed)
	}
	if _, err := g.Do(context.Background(), 9); !errors.Is(err, groupcommit.ErrClosed) {
		t.Fatalf("Do after Close: %v, want ErrClosed", err)
	}
}

func TestACallerThatGivesUpGetsItsContextError(t *testing.T) {
	rec := &recorder{hold: make(chan struct{})}
	g := groupcommit.New(groupcommit.Config{Committers: 1}, nil, rec.commit)
	defer g.Close()
	defer close(rec.hold)
	go func() { _, _ = g.Do(context.Background(), 1) }() // holds the committer
	rec.waitFor(t, 1, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := g.Do(ctx, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do with an expiring context: %v, want DeadlineExceeded", err)
	}
}
