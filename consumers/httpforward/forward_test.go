package httpforward_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/httpforward"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// received is one request the internal service got.
type received struct {
	header http.Header
	body   []byte
	host   string
	length int64
	method string
}

// service is a stand-in internal service answering statuses in turn (the
// last one repeats).
type service struct {
	*httptest.Server
	mu       sync.Mutex
	got      []received
	statuses []int
	answer   string
}

func newService(t *testing.T, statuses ...int) *service {
	t.Helper()
	s := &service{statuses: statuses}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.got = append(s.got, received{header: r.Header.Clone(), body: body, host: r.Host, length: r.ContentLength, method: r.Method})
		status := s.statuses[min(len(s.got), len(s.statuses))-1]
		answer := s.answer
		s.mu.Unlock()
		if status >= 300 && status < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer) // the cases check what the forwarder made of the answer, not this write
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *service) requests() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func newForwarder(t *testing.T, cfg httpforward.Config) consumers.HandlerFunc {
	t.Helper()
	if cfg.Secret == "" {
		cfg.Secret = secret
	}
	f, err := httpforward.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestForwardThroughTheService(t *testing.T) {
	t.Parallel()
	b := consumertest.New(t)
	srv := newService(t, http.StatusInternalServerError, http.StatusNoContent)
	srv.answer = "upstream broke"
	svc, err := consumers.New(consumers.Config{
		Pool: b.Worker, Subscriber: b.Bus,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handlers: []consumers.Handler{{
			Name: "forward", Provider: "stripe",
			Backoff: func(int) time.Duration { return 0 },
			Func:    newForwarder(t, httpforward.Config{URL: srv.URL + "/hooks?token=abc"}),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	b.StartStreamer(t, consumertest.StreamerOptions{})

	body := []byte("{\"id\":\"evt_fw\",\"amount\":100}\n\x00\xff")
	eventID := b.InsertEvent(t, consumertest.EventParams{
		Provider: "stripe", ExternalID: "evt_fw", EventType: "invoice.paid", Body: body,
		Headers: map[string][]string{
			"Stripe-Signature": {"t=1700000000,v1=deadbeef"},
			"Content-Type":     {"application/json; charset=utf-8"},
			"User-Agent":       {"Stripe/1.0 (+https://stripe.com/docs/webhooks)"},
			"X-Multi":          {"one", "two"},
			"Connection":       {"keep-alive, X-Hop"},
			"X-Hop":            {"per-connection"},
			"Keep-Alive":       {"timeout=5"},
			"Upgrade":          {"h2c"},
			"Te":               {"trailers"},
			"Host":             {"hooks.example.com"},
			"Content-Length":   {"99999"},
			"Accept-Encoding":  {"br"},
			"Inlet-Provider":   {"spoofed"},
			"Inlet-Whatever":   {"spoofed"},
			"Idempotency-Key":  {"spoofed"},
		},
	})
	jobID := b.JobID(t, eventID, "forward")
	b.WaitJobStatus(t, jobID, "completed", 15*time.Second)

	as := b.Attempts(t, jobID)
	if len(as) != 2 || as[0].Outcome != "failed" || as[1].Outcome != "completed" {
		t.Fatalf("attempts: %+v", as)
	}
	if c := as[0].ErrorClass; c == nil || *c != "http_5xx" {
		t.Errorf("first attempt's class: %v", c)
	}
	if e := as[0].Error; e == nil || !strings.Contains(*e, "500") || !strings.Contains(*e, "upstream broke") || strings.Contains(*e, "token") {
		t.Errorf("first attempt's error: %v", e)
	}

	reqs := srv.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	for i, r := range reqs {
		if r.method != http.MethodPost || !bytes.Equal(r.body, body) || r.length != int64(len(body)) {
			t.Errorf("request %d: %s, %d bytes (%d declared) %q; want POST of %q", i, r.method, len(r.body), r.length, r.body, body)
		}
		if r.host != strings.TrimPrefix(srv.URL, "http://") {
			t.Errorf("request %d: Host %q", i, r.host)
		}
		for k, want := range map[string][]string{
			"Stripe-Signature": {"t=1700000000,v1=deadbeef"},
			"Content-Type":     {"application/json; charset=utf-8"},
			"User-Agent":       {"Stripe/1.0 (+https://stripe.com/docs/webhooks)"},
			"X-Multi":          {"one", "two"},
			"Inlet-Job-Id":     {strconv.FormatInt(jobID, 10)},
			"Inlet-Event-Id":   {strconv.FormatInt(eventID, 10)},
			"Inlet-Provider":   {"stripe"},
			"Inlet-Event-Type": {"invoice.paid"},
			"Inlet-Attempt":    {strconv.Itoa(i + 1)},
			"Idempotency-Key":  {"inlet-job-" + strconv.FormatInt(jobID, 10)},
		} {
			if got := r.header.Values(k); !slices.Equal(got, want) {
				t.Errorf("request %d: %s = %q, want %q", i, k, got, want)
			}
		}
		for _, k := range []string{"Connection", "X-Hop", "Keep-Alive", "Upgrade", "Te", "Accept-Encoding", "Inlet-Whatever"} {
			if v, ok := r.header[k]; ok {
				t.Errorf("request %d: %s forwarded: %q", i, k, v)
			}
		}

		now := time.Now()
		if err := httpforward.Verify(secret, r.header, r.body, time.Minute, now); err != nil {
			t.Errorf("request %d: Verify: %v", i, err)
		}
		for j := range r.body {
			changed := slices.Clone(r.body)
			changed[j] ^= 0x01
			if err := httpforward.Verify(secret, r.header, changed, time.Minute, now); !errors.Is(err, httpforward.ErrSignatureMismatch) {
				t.Errorf("request %d: body with byte %d changed: Verify = %v", i, j, err)
			}
		}
		if err := httpforward.Verify(secret, r.header, r.body[:len(r.body)-1], time.Minute, now); !errors.Is(err, httpforward.ErrSignatureMismatch) {
			t.Errorf("request %d: truncated body: Verify = %v", i, err)
		}
	}
}

func event() *consumers.Event {
	return &consumers.Event{JobID: 9, EventID: 4, Handler: "forward", Provider: "github", EventType: "push",
		Headers: http.Header{"X-Github-Event": {"push"}}, Body: []byte(`{"ref":"main"}`), Attempt: 1, MaxAttempts: 25}
}

func TestForwardOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		class  consumers.ErrorClass // "" = success
	}{
		{200, ""}, {201, ""}, {204, ""},
		{400, consumers.ClassHTTP4xx}, {404, consumers.ClassHTTP4xx}, {408, consumers.ClassHTTP4xx}, {429, consumers.ClassHTTP4xx},
		{500, consumers.ClassHTTP5xx}, {502, consumers.ClassHTTP5xx}, {503, consumers.ClassHTTP5xx},
		{302, consumers.ClassHandlerError}, {307, consumers.ClassHandlerError},
	}
	for _, c := range cases {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			t.Parallel()
			srv := newService(t, c.status)
			srv.answer = strings.Repeat("x", 1000)
			err := newForwarder(t, httpforward.Config{URL: srv.URL})(context.Background(), event())
			if got := consumers.ClassOf(err); got != c.class {
				t.Fatalf("status %d: class %q (%v), want %q", c.status, got, err, c.class)
			}
			if consumers.IsPermanent(err) {
				t.Errorf("status %d: permanent; every failure should be retried", c.status)
			}
			if err != nil {
				if n := strings.Count(err.Error(), "x"); n != 200 {
					t.Errorf("status %d: error carries %d answer bytes, want 200", c.status, n)
				}
				if !strings.Contains(err.Error(), strconv.Itoa(c.status)) {
					t.Errorf("status %d: error %q lacks the status", c.status, err)
				}
			}
			if n := len(srv.requests()); n != 1 {
				t.Errorf("status %d: %d requests, want 1 (redirects are not followed)", c.status, n)
			}
		})
	}
}

func TestForwardNetworkAndTimeout(t *testing.T) {
	t.Parallel()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	err := newForwarder(t, httpforward.Config{URL: gone.URL + "/?token=SECRETQ"})(context.Background(), event())
	if c := consumers.ClassOf(err); c != consumers.ClassNetwork {
		t.Errorf("closed port: class %q (%v)", c, err)
	}
	if err != nil && (strings.Contains(err.Error(), "SECRETQ") || strings.Contains(err.Error(), gone.URL)) {
		t.Errorf("error text carries the URL: %v", err)
	}

	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	start := time.Now()
	err = newForwarder(t, httpforward.Config{URL: slow.URL, Timeout: 100 * time.Millisecond})(context.Background(), event())
	if c := consumers.ClassOf(err); c != consumers.ClassTimeout {
		t.Errorf("slow service: class %q (%v)", c, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("timeout of 100ms took %s", d)
	}
}

func TestForwardUsesGivenClientWithoutRedirects(t *testing.T) {
	t.Parallel()
	target := newService(t, 200)
	redirect := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusTemporaryRedirect))
	defer redirect.Close()
	var used bool
	client := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		used = true
		return http.DefaultTransport.RoundTrip(r)
	})}
	err := newForwarder(t, httpforward.Config{URL: redirect.URL, Client: client})(context.Background(), event())
	if err == nil || !used {
		t.Fatalf("redirect: err %v, client used %v", err, used)
	}
	if n := len(target.requests()); n != 0 {
		t.Errorf("redirect followed: target got %d requests", n)
	}
	if client.CheckRedirect != nil {
		t.Error("New changed the caller's client")
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestNewValidates(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cfg  httpforward.Config
		want string
	}{
		{httpforward.Config{Secret: secret}, "url: required"},
		{httpforward.Config{URL: "ftp://x/y", Secret: secret}, "url: scheme"},
		{httpforward.Config{URL: "http://", Secret: secret}, "url: no host"},
		{httpforward.Config{URL: "http://user:pa ss@[::1", Secret: secret}, "url: not a valid URL"},
		{httpforward.Config{URL: "https://svc.internal/hooks"}, "secret:"},
		{httpforward.Config{URL: "https://svc.internal/hooks", Secret: "short"}, "secret: 5 bytes"},
		{httpforward.Config{URL: "https://svc.internal/hooks", Secret: secret, Timeout: -1}, "timeout:"},
	}
	for _, c := range cases {
		_, err := httpforward.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want %q", c.cfg, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "pa ss") {
			t.Errorf("error quotes the URL's password: %v", err)
		}
	}
	if _, err := httpforward.New(httpforward.Config{URL: "https://svc.internal/hooks", Secret: secret}); err != nil {
		t.Errorf("valid config: %v", err)
	}
}
