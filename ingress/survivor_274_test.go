package ingress_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestSurvivor274_ParseRoomIsGivenBackAfterEachFilteredWebhook guards that
// the parse room (half of ingress.max_inflight_bytes) a webhook reserves to
// parse its body for a subscription filter is given back once its filters
// ran: one webhook after another, each needing the whole room, is each
// stored (200), and none waits out store_timeout for room nobody holds
// (503 overloaded).
//
// Mutant (survivor 274): ingress/filters.go:191, filters.match's
// `defer func() { room.release(held) }()` changed to
// `room.release(held * 0)` (the reservation never released). Existing
// tests missed it: TestFilterParsesStayWithinTheMemoryBounds and
// TestRequestsWaitingForRoomStayWithinTheMemoryBounds run at the default
// 32 MiB budget, where a burst's reservations (1 MiB bodies, 16 MiB room)
// fit, and assert on peak heap and that some job was made, not that every
// later webhook still gets room.
func TestSurvivor274_ParseRoomIsGivenBackAfterEachFilteredWebhook(t *testing.T) {
	const inflight = 64 << 10 // a 32 KiB parse room
	b := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Section.MaxBodyBytes = 16 << 10
		c.Section.MaxInflightBytes = inflight
		c.Section.StoreTimeout = 10 * time.Second
		c.Section.WriteTimeout = 40 * time.Second
		c.Section.ReadTimeout = 20 * time.Second
	})
	ctx := context.Background()
	if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, filter)
		VALUES ('filtered', 'stripe', '*', 'payload.data.n >= 0')`); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: time.Minute}
	const webhooks = 4
	for i := range webhooks {
		// 2 KiB: its parse reserves 64 × 2 KiB, capped at the whole room.
		body := fmt.Appendf(nil, `{"id":"evt_room_%d","type":"charge.succeeded","data":{"n":%d,"pad":"`, i, i)
		for len(body) < 2<<10 {
			body = append(body, 'x')
		}
		body = append(body, `"}}`...)
		resp, err := client.Do(stripeRequest(t, b.url, body, time.Now()))
		if err != nil {
			t.Fatalf("webhook %d: %v", i, err)
		}
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("webhook %d of %d, one at a time, each needing the whole parse room: %d %s; want 200 "+
				"(the room an earlier webhook's filter parse reserved was not given back)", i+1, webhooks, resp.StatusCode, text)
		}
	}
	if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'filtered'`); n != webhooks {
		t.Fatalf("%d jobs of the filtered handler, want %d (the filter did not run on every webhook)", n, webhooks)
	}
}
