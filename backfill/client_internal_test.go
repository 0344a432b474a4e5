package backfill

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestRateLimitWait(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	c := &client{maxWait: 10 * time.Minute}
	for _, tc := range []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"retry-after seconds", http.Header{"Retry-After": {"7"}}, 7 * time.Second},
		{"retry-after date", http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second},
		{"github reset", http.Header{"X-Ratelimit-Reset": {strconv.FormatInt(now.Add(time.Minute).Unix(), 10)}}, 61 * time.Second},
		{"capped", http.Header{"Retry-After": {"86400"}}, 10 * time.Minute},
		{"past reset", http.Header{"X-Ratelimit-Reset": {"1"}}, time.Second},
		{"nothing said", http.Header{}, time.Second},
		{"garbage", http.Header{"Retry-After": {"soon"}}, time.Second},
	} {
		if got := c.rateLimitWait(tc.header, now); got != tc.want {
			t.Errorf("%s: wait %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestBackoffBounded(t *testing.T) {
	t.Parallel()
	c := &client{backoff: time.Second, maxBackoff: time.Minute}
	for attempt := range 70 {
		d := c.backoffFor(attempt)
		if d <= 0 || d > time.Minute {
			t.Fatalf("attempt %d: backoff %s", attempt, d)
		}
	}
}

func TestNextCursor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		links []string
		want  string
		err   bool
	}{
		{nil, "", false},
		{[]string{`<https://api.github.com/repos/a/b/hooks/1/deliveries?per_page=100&cursor=v1_12>; rel="next"`}, "v1_12", false},
		{[]string{`<https://x/d?per_page=100>; rel="first", <https://x/d?cursor=abc%3D&per_page=100>; rel="next"`}, "abc=", false},
		{[]string{`<https://x/d?per_page=100>; rel="prev"`}, "", false},
		{[]string{`<https://x/d?per_page=100>; rel="next"`}, "", true},
	} {
		got, err := nextCursor(tc.links)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("nextCursor(%q) = %q, %v; want %q (error %v)", tc.links, got, err, tc.want, tc.err)
		}
	}
}

func FuzzNextCursor(f *testing.F) {
	f.Add(`<https://x/d?cursor=v1_1>; rel="next", <https://x/d>; rel="first"`)
	f.Add(`<>; rel=next;;,,`)
	f.Fuzz(func(t *testing.T, link string) {
		_, _ = nextCursor([]string{link}) // must not panic
	})
}

func TestProgressLines(t *testing.T) {
	t.Parallel()
	var term bytes.Buffer
	p := &progress{w: &term, terminal: true, source: "stripe"}
	p.update(func(s *Stats) { s.Pages, s.Seen, s.Stored = 1, 100, 99 })
	p.finish()
	if out := term.String(); !strings.HasPrefix(out, "\rbackfill stripe: 1 pages, 100 seen, 99 stored") || !strings.HasSuffix(out, "\n") {
		t.Errorf("terminal progress %q", out)
	}

	var plain bytes.Buffer
	p = &progress{w: &plain, interval: time.Nanosecond, source: "github"}
	p.update(func(s *Stats) { s.Seen++ })
	time.Sleep(time.Millisecond) // past the progress interval (1ns): the next update prints
	p.update(func(s *Stats) { s.Seen++ })
	p.wait(true, 3*time.Second, nil)
	p.wait(false, time.Second, errors.New("GET /v1/events: dial tcp 127.0.0.1:1: connect: connection refused"))
	p.finish()
	out := plain.String()
	if strings.Contains(out, "\r") || !strings.Contains(out, "backfill github: 0 pages, 2 events seen") ||
		!strings.Contains(out, "rate limited, waiting 3s") ||
		!strings.Contains(out, "backfill github: request failed (GET /v1/events: dial tcp 127.0.0.1:1: connect: connection refused), waiting 1s\n") {
		t.Errorf("plain progress %q", out)
	}
}

// A request that never reached the provider says why in its wait line: the
// cause, not "provider error" (a refused connection is nobody's answer).
func TestWaitLineNamesTheCause(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	var out bytes.Buffer
	p := &progress{w: &out, interval: time.Hour, source: "stripe"}
	c := &client{http: &http.Client{}, auth: func(*http.Request) {}, maxRetries: 1, backoff: time.Millisecond, maxBackoff: time.Millisecond, onWait: p.wait}
	_, _, err = c.get(context.Background(), "http://"+addr+"/v1/events?limit=100")
	if err == nil || !strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "limit=100") {
		t.Fatalf("error %v: want the cause, without the query", err)
	}
	if s := out.String(); !strings.Contains(s, "backfill stripe: request failed (GET /v1/events: dial tcp "+addr+": connect: connection refused), waiting 0s") {
		t.Errorf("wait line %q", s)
	}
}
