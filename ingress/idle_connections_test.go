package ingress_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestSilentConnectionsDoNotKeepWebhooksOut (review helper-265, fixed).
//
// Defect: since d1581aa ingress accepts at most ingress.max_connections
// (default 512) connections; the rest wait in the kernel's accept queue, in
// arrival order (internal/httpserve/limit.go: limitListener.Accept). A
// connection holds its slot until net/http closes it, and one that never
// sends a byte is closed only by ReadHeaderTimeout (min(5 s,
// read_timeout)) or, while full, by SetKeepAlivesEnabled(false) ->
// closeIdleConns, which treats a StateNew connection as idle only after 5 s
// too. So anyone on the internet can, without sending a single byte (no
// signature, no request, nothing counted in max_inflight_bytes or any
// metric), keep every provider's webhook waiting in the accept queue: each
// 512 idle TCP connections queued ahead of a provider's add 5 s before it is
// even read. Before d1581aa the same connections cost ~8 KiB each and
// webhooks were answered at once. The docs' promise (docs/configuration.md
// ingress.max_connections, docs/operations.md "Capacity and overload":
// "while it is full keep-alive is off, so idle connections do not keep new
// ones out") is false for connections idle from their first moment; and the
// shipped Kubernetes probes (deployments/kubernetes/ingress-deployment.yaml:
// /healthz and /readyz on port http, timeoutSeconds 2 and 3) wait in the
// same queue, so the kubelet restarts a pod that is merely full.
// Root cause: internal/httpserve/limit.go limitListener (a slot per
// connection until Close, with nothing shedding connections that have not
// sent a request) with httpserve.Start's ReadHeaderTimeout as the only
// bound on a slot held by a silent client.
//
// Setup: a real ingress (PGStore as the ingress role on real PostgreSQL,
// every ingress.* setting at its default, so max_connections 512 and
// ReadHeaderTimeout 5 s), listening on TCP. One signed Stripe webhook first
// (200). Then 1,536 TCP connections are opened that send nothing (three
// times the cap; the kernel's accept queue, 4096 here, holds the rest), and
// then one signed Stripe webhook on a new connection, with GET /healthz on
// another.
//
// Expected: the signed webhook answered 200 within 5 s (Shopify's timeout;
// GitHub's is 10 s), as before the cap, and /healthz within the liveness
// probe's 2 s.
//
// Observed: the webhook is answered (200 stored) only after 14.8 s: it
// waits for three rounds of 512 silent connections to time out; GET
// /healthz on the webhook port likewise took 14.8 s.
//
// Fixed: while the listener is full, internal/httpserve's limitListener
// closes the connections that have not sent a request's headers whole
// within 1 s (tracked through http.Server.ConnState: StateNew until the
// first request's headers are read), counted from their accept, or from
// their handshake when the kernel says they sent nothing meanwhile (Linux
// TCP_INFO), so those that waited in the accept queue past it are closed as
// soon as they are accepted: the webhook here waits about 1 s, whatever the
// number of silent connections. The Kubernetes probes moved to the metrics
// port (ingress.metrics_listen), which has no connection cap.
func TestSilentConnectionsDoNotKeepWebhooksOut(t *testing.T) {
	const silent = 3 * ingress.DefaultMaxConnections
	var cfg ingress.Config
	setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Section.StoreTimeout = 0 // the defaults of inlet ingress
		cfg = *c
	})
	addr := startSecondServer(t, cfg)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 90 * time.Second}
	post := func(id string) (int, string, time.Duration) {
		body := fmt.Appendf(nil, `{"id":%q,"type":"invoice.paid"}`, id)
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/stripe", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Stripe-Signature", stripeSig(body))
		req.Header.Set("Content-Type", "application/json")
		began := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error(), time.Since(began)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b), time.Since(began)
	}
	// Premise: a signed webhook is stored at once.
	if code, answer, took := post("evt_silent_before"); code != http.StatusOK {
		t.Fatalf("premise: a signed webhook before any idle connection: %d %s (%s)", code, answer, took)
	}

	// Connections that send nothing at all, held open.
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
		gate  = make(chan struct{}, 64)
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range silent {
		wg.Go(func() {
			gate <- struct{}{}
			defer func() { <-gate }()
			c, err := net.DialTimeout("tcp", addr, 20*time.Second)
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		})
	}
	wg.Wait()
	mu.Lock()
	dialed := len(conns)
	mu.Unlock()
	if dialed < silent {
		t.Fatalf("premise: only %d of %d silent connections were made", dialed, silent)
	}

	// A provider's delivery, and a liveness probe on the webhook port, now.
	type probe struct {
		code int
		took time.Duration
		err  error
	}
	health := make(chan probe, 1)
	go func() {
		began := time.Now()
		resp, err := client.Get("http://" + addr + "/healthz")
		p := probe{took: time.Since(began), err: err}
		if err == nil {
			p.code = resp.StatusCode
			resp.Body.Close()
		}
		health <- p
	}()
	code, answer, took := post("evt_silent_during")
	h := <-health
	t.Logf("%d silent connections open: signed webhook %d in %s; GET /healthz %d in %s (%v)", dialed, code, took.Round(time.Millisecond), h.code, h.took.Round(time.Millisecond), h.err)
	if code != http.StatusOK || took > 5*time.Second {
		t.Errorf("a signed Stripe webhook was answered %d after %s (%q) while %d connections that sent nothing were open; want 200 within 5 s: "+
			"connections idle from their first moment hold ingress.max_connections slots for ReadHeaderTimeout (5 s) each, so they keep new ones out",
			code, took.Round(time.Millisecond), answer, dialed)
	}
	if h.err != nil || h.code != http.StatusOK || h.took > 2*time.Second {
		t.Errorf("GET /healthz on the webhook port (a liveness probe's timeout is 2 s) answered %d after %s (%v); want 200 within 2 s",
			h.code, h.took.Round(time.Millisecond), h.err)
	}
}
