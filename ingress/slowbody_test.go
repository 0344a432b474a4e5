package ingress_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
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

// slowSenders keeps n connections open that each declare a 1 MiB body, send
// the first bytes of it at once, then one byte a second (or, stalled, none);
// a connection that ingress cuts off is replaced at once. It counts the
// answers they got by status.
type slowSenders struct {
	first    []byte // sent at once after the headers
	trickle  bool   // then a byte a second
	stop     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	answers  map[string]int
	opened   atomic.Int64
	dialFail atomic.Int64
}

// startSlowSenders starts n senders that send "{" and then a byte a second.
func startSlowSenders(t *testing.T, base string, n int) *slowSenders {
	t.Helper()
	return startSenders(t, base, n, &slowSenders{first: []byte("{"), trickle: true})
}

// startStalledSenders starts n senders that send a body's head and one byte
// more at once, then nothing: ingress has begun on the body's rest.
func startStalledSenders(t *testing.T, base string, n int) *slowSenders {
	t.Helper()
	return startSenders(t, base, n, &slowSenders{first: bytes.Repeat([]byte("x"), 16<<10+1)})
}

func startSenders(t *testing.T, base string, n int, s *slowSenders) *slowSenders {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	s.stop, s.answers = make(chan struct{}), map[string]int{}
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
	fmt.Fprintf(conn, "POST /webhooks/stripe HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nStripe-Signature: %s\r\nContent-Length: %d\r\n\r\n%s",
		host, sig, 1<<20, s.first)
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
	if !s.trickle {
		tick.Stop()
	}
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

// inflightBytes is inlet_ingress_inflight_bytes.
func inflightBytes(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "inlet_ingress_inflight_bytes" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no inlet_ingress_inflight_bytes")
	return 0
}

// Senders that declare 1 MiB, send their head and a byte more at once and
// then stall hold what they sent and one step of the body budget, not their
// whole body's room: 40 of them (each replaced once cut off) beside 60
// signed requests, with the default 32 MiB budget, leave every signed
// request its room, and each is stored (before: 40 MiB declared held the
// whole budget for the read timeout, and a third of the signed requests got
// 503 overloaded). The stalled senders are cut off with 408.
func TestStalledSendersAfterTheHeadDoNotHoldTheBudget(t *testing.T) {
	t.Parallel()
	b := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Section.MaxBodyBytes = 1 << 20
		c.Section.StoreTimeout = 5 * time.Second
	})
	const stalled, signed = 40, 60
	stall := startStalledSenders(t, b.url, stalled)
	testwait.Eventually(t, 10*time.Second, fmt.Sprintf("all %d stalled senders past their heads", stalled), func() (bool, string) {
		got := inflightBytes(t, b.reg)
		return got >= stalled*(16<<10+64<<10), fmt.Sprintf("inflight_bytes %v, %d connections opened", got, stall.opened.Load())
	})
	t.Logf("%d stalled senders hold %v bytes", stalled, inflightBytes(t, b.reg))

	codes := make([]int, signed)
	var wg sync.WaitGroup
	for i := range signed {
		wg.Go(func() {
			resp, err := http.DefaultClient.Do(stripeRequest(t, b.url, fmt.Appendf(nil, `{"id":"evt_signed_%d","type":"t"}`, i), time.Now()))
			if err != nil {
				t.Errorf("signed request %d: %v", i, err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	byCode := map[int]int{}
	for _, c := range codes {
		byCode[c]++
	}
	if byCode[http.StatusOK] != signed {
		t.Errorf("signed requests beside %d stalled senders answered %v, want all %d 200", stalled, byCode, signed)
	}
	testwait.Eventually(t, 20*time.Second, "a stalled sender cut off with 408", func() (bool, string) {
		stall.mu.Lock()
		defer stall.mu.Unlock()
		return stall.answers["408 Request Timeout"] > 0, fmt.Sprint(stall.answers)
	})
	stall.close()
	if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events`); n != signed {
		t.Errorf("%d events stored, want the %d signed", n, signed)
	}
}

// Bodies past the head are read whole while their room grows: of known
// length or chunked, up to max_body_bytes exactly (one byte more is 413),
// and one sent in steps slower than the head's timeout overall but each
// step well within it.
func TestBodiesPastTheHeadAreReadWhole(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	b := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) { c.Section.MaxBodyBytes = limit })
	body := func(id string, size int) []byte {
		p := fmt.Appendf(nil, `{"id":%q,"type":"t","pad":"`, id)
		p = append(p, bytes.Repeat([]byte("p"), size-len(p)-2)...)
		return append(p, `"}`...)
	}
	t.Run("bodies", func(t *testing.T) { testBodiesPastTheHead(t, b, body) })
	testwait.Eventually(t, 10*time.Second, "every body's room given back", func() (bool, string) {
		got := inflightBytes(t, b.reg)
		return got == 0, fmt.Sprintf("inflight_bytes %v", got)
	})
}

func testBodiesPastTheHead(t *testing.T, b *testBundle, body func(id string, size int) []byte) {
	const limit = 1 << 20
	for _, c := range []struct {
		name    string
		size    int
		chunked bool
		paced   time.Duration // between 64 KiB pieces
		want    int
	}{
		{"head and a byte", 16<<10 + 1, false, 0, 200},
		{"200 KiB", 200 << 10, false, 0, 200},
		{"the limit", limit, false, 0, 200},
		{"chunked, 200 KiB", 200 << 10, true, 0, 200},
		{"chunked, the limit", limit, true, 0, 200},
		{"chunked, over the limit", limit + 1, true, 0, 413},
		{"paced, 320 KiB in 2.4s", 320 << 10, false, 600 * time.Millisecond, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			id := "evt_" + strings.NewReplacer(" ", "_", ",", "").Replace(c.name)
			sent := body(id, c.size)
			req := stripeRequest(t, b.url, sent, time.Now())
			switch {
			case c.paced > 0:
				pr, pw := io.Pipe()
				go func() {
					for rest := sent; len(rest) > 0; {
						n := min(len(rest), 64<<10)
						if _, err := pw.Write(rest[:n]); err != nil {
							return
						}
						rest = rest[n:]
						if len(rest) > 0 {
							time.Sleep(c.paced) // the sender's pace, not a wait for ingress
						}
					}
					pw.Close()
				}()
				req.Body = pr
				req.ContentLength = int64(len(sent))
			case c.chunked:
				req.Body = io.NopCloser(bytes.NewReader(sent))
				req.ContentLength = -1
			}
			code, answer, _ := do(t, req)
			if code != c.want {
				t.Fatalf("%d %s, want %d", code, answer, c.want)
			}
			if c.want != 200 {
				return
			}
			var raw []byte
			if err := b.admin.QueryRow(context.Background(), `SELECT raw_body FROM webhook_ingress.events WHERE external_event_id = $1`, id).Scan(&raw); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(raw, sent) {
				t.Fatalf("stored %d bytes differ from the %d sent", len(raw), len(sent))
			}
		})
	}
}
