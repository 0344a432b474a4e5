package backfill_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/ingress"
)

// heapAtInsert298 is the real store, sampling the live heap (after a GC)
// as each event is stored: the payloads Run still holds then are live.
type heapAtInsert298 struct {
	ingress.Store
	mu   sync.Mutex
	peak uint64
}

func (h *heapAtInsert298) Insert(ctx context.Context, e *ingress.Event) (bool, error) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h.mu.Lock()
	h.peak = max(h.peak, m.HeapAlloc)
	h.mu.Unlock()
	return h.Store.Insert(ctx, e)
}

// TestSurvivor298_GitHubPayloadsAreNotHeldTogether (mutation run,
// helper-298).
// Guarantee: backfill.Run holds one GitHub delivery's payload at a time: a
// page of 100 deliveries of up to 25 MB each is never held whole (f8ccea6,
// review helper-282; backfill.go: each item is loaded just before its
// Insert and the page's copy is cleared, pg.Events[i] = item{}).
// Mutant: backfill/backfill.go:233 (at 2be9df6) keeps the loaded item in the page
// (pg.Events[i] = loaded after it = loaded): every payload fetched stays
// live until the page ends.
// Why missed: TestGitHubPageStoresEachPayloadAsFetched counts fetches
// against inserts (the fetch order), which the mutant keeps; what stays
// referenced after its Insert is not measured. Here the live heap is
// sampled after a GC at each insert of a 24-delivery page of 1 MiB
// payloads.
func TestSurvivor298_GitHubPayloadsAreNotHeldTogether(t *testing.T) {
	b := setup(t)
	const n, size = 24, 1 << 20
	fake := &fakeGitHub{t: t, pageSize: n}
	filler := strings.Repeat("x", size)
	for i := n; i >= 1; i-- {
		fake.deliveries = append(fake.deliveries, ghDelivery{id: int64(7000 + i), guid: fmt.Sprintf("guid-held-%d", i),
			event: "push", payload: fmt.Sprintf(`{"n":%d,"fill":%q}`, i, filler)})
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	l, err := backfill.NewGitHub(backfill.GitHubConfig{Token: "ghp_backfill", BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42})
	if err != nil {
		t.Fatal(err)
	}
	store := &heapAtInsert298{Store: b.store}
	cfg := b.config("github", "github")
	cfg.Store = store

	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	base := m.HeapAlloc
	stats, err := backfill.Run(context.Background(), cfg, l)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Stored != n {
		t.Fatalf("stats = %+v, want %d stored", stats, n)
	}
	store.mu.Lock()
	growth := int64(store.peak) - int64(base)
	store.mu.Unlock()
	t.Logf("live heap growth while storing %d payloads of %d KiB: %.1f MiB", n, size>>10, float64(growth)/(1<<20))
	if limit := int64(12 << 20); growth > limit {
		t.Errorf("backfill held %.1f MiB live while storing a page of %d GitHub payloads of 1 MiB: payloads stay referenced after they are stored "+
			"(GitHub's reach 25 MB, 100 a page); want at most %d MiB, about one payload at a time", float64(growth)/(1<<20), n, limit>>20)
	}
}
