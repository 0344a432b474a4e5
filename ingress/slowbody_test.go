package ingress_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// slowSenders keeps n connections open that each declare a 1 MiB body and
// send it one byte a second; a connection that ingress cuts off is replaced
// at once. It counts the answers they got by status.
type slowSenders struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	answers  map[string]int
	opened   atomic.Int64
	dialFail atomic.Int64
}

func startSlowSenders(t *testing.T, base string, n int) *slowSenders {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	s := &slowSenders{stop: make(chan struct{}), answers: map[string]int{}}
	body := []byte(`{"id":"evt_slow","type":"t"}`)
	sig := verify.SignStripe(stripeSecret, time.Now(), body).Get("Stripe-Signature")
	for range n {
		s.wg.Go(func() {
			for {
				select {
				case <-s.stop:
					return
				default:
				}
				s.one(u.Host, sig)
			}
		})
	}
	t.Cleanup(s.close)
	return s
}

// one sends one slow request until ingress answers or cuts it off.
func (s *slowSenders) one(host, sig string) {
	conn, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		s.dialFail.Add(1)
		time.Sleep(100 * time.Millisecond) // the attacker's pause before it dials again
		return
	}
	defer conn.Close()
	s.opened.Add(1)
	fmt.Fprintf(conn, "POST /webhooks/stripe HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nStripe-Signature: %s\r\nContent-Length: %d\r\n\r\n{",
		host, sig, 1<<20)
	answered := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- "cut"
			return
		}
		resp.Body.Close()
		answered <- resp.Status
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case a := <-answered:
			s.mu.Lock()
			s.answers[a]++
			s.mu.Unlock()
			return
		case <-tick.C:
			if _, err := conn.Write([]byte(" ")); err != nil {
				s.mu.Lock()
				s.answers["write failed"]++
				s.mu.Unlock()
				return
			}
		}
	}
}

func (s *slowSenders) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
}

// requestsReceived is inlet_ingress_requests_total of source.
func requestsReceived(t *testing.T, reg *prometheus.Registry, source string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "inlet_ingress_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == source {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no inlet_ingress_requests_total{source=%q}", source)
	return 0
}

// Slow uploads: 80 connections each declaring a 1 MiB body and sending one
// byte a second must not hold the body budget the fast senders need. While
// they keep at it (each one cut off is replaced), signed requests are stored
// as fast as without them: their p99 is logged and must stay far below the
// seconds the attack cost before (4.9 s, just under the store timeout, for
// every signed request); the target is under 100 ms. The bound asserted is
// on the p90, and generous, so a loaded CI machine does not fail it: in a
// full `go tool task test` run on 2 cores, 3 of 282 signed requests once took
// ~2.4 s (p50 14 ms; the cause was not found, alone the test never came near
// it), while the attack delayed every one of them. The slow senders get 408
// body_read_timeout.
func TestSlowSendersDoNotDelaySignedRequests(t *testing.T) {
	t.Parallel()
	b := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Section.MaxBodyBytes = 1 << 20
		c.Section.StoreTimeout = 5 * time.Second
	})
	const attackers, signed = 80, 200
	send := func(id string) (time.Duration, error) {
		req := stripeRequest(t, b.url, fmt.Appendf(nil, `{"id":%q,"type":"t"}`, id), time.Now())
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		took := time.Since(start)
		if err != nil {
			return took, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return took, fmt.Errorf("%s after %s", resp.Status, took)
		}
		return took, nil
	}
	// Warm: the pool's connections and the prepared statement, as in a
	// running service.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			if _, err := send(fmt.Sprintf("evt_warm_%d", i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()

	slow := startSlowSenders(t, b.url, attackers)
	// Every attacker is in and waiting on its body before the clock starts:
	// ingress has counted its request.
	testwait.Eventually(t, 10*time.Second, fmt.Sprintf("all %d slow senders' requests received", attackers), func() (bool, string) {
		got := requestsReceived(t, b.reg, "stripe") - 4 // the warm-up's
		return got >= attackers, fmt.Sprintf("%v received, %d connections opened", got, slow.opened.Load())
	})

	// At least 200 signed requests, and on until every slow sender has been
	// cut off once and replaced (or 30 s).
	cut := func() int {
		slow.mu.Lock()
		defer slow.mu.Unlock()
		n := 0
		for _, c := range slow.answers {
			n += c
		}
		return n
	}
	var latencies []time.Duration
	var mu sync.Mutex
	var next atomic.Int64
	stop := time.Now().Add(30 * time.Second)
	for range 4 { // a few providers at once
		wg.Go(func() {
			for {
				i := next.Add(1)
				if (i > signed && cut() >= 2*attackers) || time.Now().After(stop) {
					return
				}
				took, err := send(fmt.Sprintf("evt_fast_%d", i))
				if err != nil {
					t.Errorf("signed request %d: %v", i, err)
					continue
				}
				mu.Lock()
				latencies = append(latencies, took)
				mu.Unlock()
				time.Sleep(10 * time.Millisecond) // the senders' pace: a steady rate, not a flood
			}
		})
	}
	wg.Wait()
	slices.Sort(latencies)
	p50, p90, p99 := latencies[len(latencies)/2], latencies[len(latencies)*9/10], latencies[len(latencies)*99/100]
	slow.close()
	slow.mu.Lock()
	answers := fmt.Sprint(slow.answers)
	slow.mu.Unlock()
	t.Logf("%d signed requests beside %d slow senders: p50 %s, p90 %s, p99 %s, max %s; slow senders opened %d connections, answered %s",
		len(latencies), attackers, p50.Round(time.Microsecond), p90.Round(time.Microsecond), p99.Round(time.Microsecond),
		latencies[len(latencies)-1].Round(time.Microsecond), slow.opened.Load(), answers)
	if p90 > time.Second {
		t.Errorf("signed requests' p90 %s beside slow senders, want far under a second (target 100ms)", p90)
	}
	if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id LIKE 'evt_fast_%'`); n != len(latencies) {
		t.Errorf("%d signed events stored, want %d", n, len(latencies))
	}
	if !strings.Contains(answers, "408") {
		t.Errorf("the slow senders were never cut off with 408: %s", answers)
	}
}
