package ingress_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
)

// TestReadyAnswersStoppingWhileDraining: once Stop begins, the ingress is
// not ready, while a request is still being stored and after. The metrics
// listener's /readyz serves Server.Ready (the probes of the shipped
// Kubernetes and compose units point there): before, it answered 200 for
// the whole drain, so a load balancer kept routing webhooks to an ingress
// whose webhook port had stopped accepting them.
func TestReadyAnswersStoppingWhileDraining(t *testing.T) {
	ls := startListening(t, func(c *ingress.Config, _ string) { c.Section.StoreTimeout = 30 * time.Second })
	ctx := context.Background()
	if err := ls.srv.Ready(ctx); err != nil {
		t.Fatalf("before Stop: Ready = %v, want ready", err)
	}
	waiting, release := lockEvents(t, ls)
	body := []byte(`{"id":"evt_stop_ready","type":"charge.succeeded","object":"event","created":1700000000,"data":{"object":{}}}`)
	answered := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+ls.host+"/webhooks/stripe", bytes.NewReader(body))
		req.Header.Set("Stripe-Signature", stripeSig(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	awaitLockWait(t, waiting, "the webhook's insert")
	stopped := make(chan error, 1)
	go func() { stopped <- ls.srv.Stop(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for err := ls.srv.Ready(ctx); !errors.Is(err, ingress.ErrStopping); err = ls.srv.Ready(ctx) {
		if time.Now().After(deadline) {
			t.Fatalf("Stop has begun and a request is draining: Ready = %v, want ErrStopping", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if waiting() == 0 {
		t.Fatal("the request's insert ended before Ready was checked: the drain was not observed")
	}
	release()
	if code := <-answered; code != http.StatusOK {
		t.Errorf("the request in flight when Stop began answered %d, want 200 (a drain finishes it)", code)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := ls.srv.Ready(ctx); !errors.Is(err, ingress.ErrStopping) {
		t.Fatalf("after Stop: Ready = %v, want ErrStopping", err)
	}
}
