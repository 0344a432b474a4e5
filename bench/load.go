package main

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// load is one run of the load generator: what it sent and what was answered.
type load struct {
	// Target is how many webhooks the pacing asked for (rate × duration); 0
	// at saturation.
	Target int64
	Sent   int64
	Acked  int64
	Errors int64 // non-200 answers and failed requests
	// Elapsed is from the first post to the last answer.
	Elapsed time.Duration
}

// offerConfig says how one run of the load generator posts.
type offerConfig struct {
	url string
	// rate is webhooks per second; 0 posts back to back from every
	// connection (saturation).
	rate int
	d    time.Duration
	// conns is how many keep-alive connections post at once.
	conns int
	// prefix starts every event id; ids are prefix + a sequence number.
	prefix string
	// body builds the signed body of one event id. Defaults to stripeBody.
	body func(id string) []byte
	// onAck, if set, is called with each event id at its 200.
	onAck func(id string, at time.Time)
}

// offer posts Stripe-signed webhooks to cfg.url for cfg.d. Paced runs are
// open loop against a schedule (start + i/rate): a send that finds every
// connection busy waits, and whatever the schedule could not send by the end
// of d is not sent, so Sent below Target means the receiver did not keep up.
func offer(ctx context.Context, cfg offerConfig) load {
	if cfg.body == nil {
		cfg.body = stripeBody
	}
	transport := &http.Transport{MaxIdleConnsPerHost: cfg.conns, MaxConnsPerHost: cfg.conns}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	defer transport.CloseIdleConnections()
	var sent, acked, errs atomic.Int64
	send := func(id string) {
		sent.Add(1)
		if !post(client, cfg.url, cfg.body(id)) {
			errs.Add(1)
			return
		}
		acked.Add(1)
		if cfg.onAck != nil {
			cfg.onAck(id, time.Now())
		}
	}
	start := time.Now()
	stop := start.Add(cfg.d)
	var wg sync.WaitGroup
	var target int64
	if cfg.rate <= 0 {
		var seq atomic.Int64
		for range cfg.conns {
			wg.Go(func() {
				for time.Now().Before(stop) && ctx.Err() == nil {
					send(cfg.prefix + strconv.FormatInt(seq.Add(1), 10))
				}
			})
		}
	} else {
		target = int64(float64(cfg.rate) * cfg.d.Seconds())
		work := make(chan string, cfg.conns)
		for range cfg.conns {
			wg.Go(func() {
				for id := range work {
					send(id)
				}
			})
		}
		pace(ctx, work, cfg.prefix, cfg.rate, start, stop)
		close(work)
	}
	wg.Wait()
	return load{Target: target, Sent: sent.Load(), Acked: acked.Load(), Errors: errs.Load(), Elapsed: time.Since(start)}
}

// pace hands out event ids on the schedule start + i/rate until stop. It
// sleeps only when ahead of the schedule, so timer slack is caught up with
// a burst rather than lowering the rate.
func pace(ctx context.Context, work chan<- string, prefix string, rate int, start, stop time.Time) {
	interval := time.Second / time.Duration(rate)
	timeout := time.NewTimer(time.Until(stop))
	defer timeout.Stop()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if !at.Before(stop) {
			return
		}
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		}
		select {
		case work <- prefix + strconv.Itoa(i):
		case <-timeout.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// stripeBody is a Stripe invoice.paid event of about the size of the ingest
// measurement's (its padding included), so every measurement stores the
// same bytes per webhook.
func stripeBody(id string) []byte {
	return []byte(`{"id":"` + id + `","object":"event","type":"invoice.paid","data":{"object":{"id":"in_1","amount_due":2000,"currency":"usd","customer":"cus_bench"}}}` + strings.Repeat(" ", 160))
}

// minimalStripeBody is the end-to-end measurement's body: the smallest
// event Stripe's verifier accepts.
func minimalStripeBody(id string) []byte {
	return []byte(`{"id":"` + id + `","object":"event","type":"invoice.paid"}`)
}
