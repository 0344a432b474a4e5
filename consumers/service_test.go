package consumers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
)

const wait = 15 * time.Second

func TestHandlerGetsTheStoredEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &recorder{}
	var n atomic.Int32
	b.start(t, b.config(consumers.Handler{
		Name: "capture", Provider: "stripe", Backoff: noBackoff,
		Func: rec.wrap(func(context.Context, *consumers.Event) error {
			if n.Add(1) == 1 {
				return errors.New("first attempt fails")
			}
			return nil
		}),
	}))
	b.StartStreamer(t, consumertest.StreamerOptions{})

	body := []byte("{\"id\":\"evt_1\"}\r\n\x00\xff\xfe not utf-8 \x80")
	occurredAt := time.Date(2026, 3, 3, 9, 0, 0, 0, time.UTC)
	headers := map[string][]string{
		"Stripe-Signature": {"t=1700000000,v1=abc"},
		"X-Multi":          {"a", "b"},
		"Content-Type":     {"application/json; charset=utf-8"},
	}
	eventID := b.InsertEvent(t, consumertest.EventParams{
		Provider: "stripe", ExternalID: "evt_exact", EventType: "invoice.paid", Headers: headers, Body: body,
		OccurredAt: occurredAt,
	})
	jobID := b.JobID(t, eventID, "capture")
	b.WaitJobStatus(t, jobID, "completed", wait)

	var receivedAt time.Time
	if err := b.Admin.QueryRow(context.Background(), `SELECT received_at FROM webhook_ingress.events WHERE id = $1`, eventID).Scan(&receivedAt); err != nil {
		t.Fatal(err)
	}
	calls := rec.Calls()
	if len(calls) != 2 {
		t.Fatalf("%d calls, want 2", len(calls))
	}
	for i, c := range calls {
		e := c.ev
		want := consumers.Event{
			JobID: jobID, EventID: eventID, Handler: "capture", Provider: "stripe", Scheme: "stripe",
			ExternalID: "evt_exact", EventType: "invoice.paid", ReceivedAt: receivedAt, OccurredAt: occurredAt,
			Headers: http.Header(headers), Body: body, Attempt: i + 1, MaxAttempts: 25,
		}
		if !e.ReceivedAt.Equal(receivedAt) {
			t.Errorf("call %d: ReceivedAt %v, want %v", i, e.ReceivedAt, receivedAt)
		}
		e.ReceivedAt = receivedAt
		if !e.OccurredAt.Equal(occurredAt) {
			t.Errorf("call %d: OccurredAt %v, want %v", i, e.OccurredAt, occurredAt)
		}
		e.OccurredAt = occurredAt
		if !bytes.Equal(e.Body, body) {
			t.Errorf("call %d: body %q, want %q", i, e.Body, body)
		}
		if !reflect.DeepEqual(e, want) {
			t.Errorf("call %d: event\n%+v\nwant\n%+v", i, e, want)
		}
		if key := e.IdempotencyKey(); key != fmt.Sprintf("inlet-job-%d", jobID) {
			t.Errorf("call %d: idempotency key %q", i, key)
		}
	}
	if k0, k1 := calls[0].ev.IdempotencyKey(), calls[1].ev.IdempotencyKey(); k0 != k1 {
		t.Errorf("idempotency key changed between attempts: %q, %q", k0, k1)
	}
}

func TestRetriesArePerHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const backoff = 300 * time.Millisecond
	recA, recB := &recorder{}, &recorder{}
	var nA atomic.Int32
	b.start(t, b.config(
		consumers.Handler{
			Name:    "a",
			Backoff: func(int) time.Duration { return backoff },
			Func: recA.wrap(func(context.Context, *consumers.Event) error {
				if n := nA.Add(1); n <= 2 {
					return fmt.Errorf("a fails, try %d", n)
				}
				return nil
			}),
		},
		consumers.Handler{Name: "b", Func: recB.wrap(ok)},
	))
	b.StartStreamer(t, consumertest.StreamerOptions{})

	eventID := b.InsertEvent(t, consumertest.EventParams{EventType: "invoice.paid"})
	jobA, jobB := b.JobID(t, eventID, "a"), b.JobID(t, eventID, "b")
	b.WaitJobStatus(t, jobA, "completed", wait)
	b.WaitJobStatus(t, jobB, "completed", wait)

	if n := len(recB.Calls()); n != 1 {
		t.Errorf("b called %d times, want 1", n)
	}
	callsA := recA.Calls()
	if len(callsA) != 3 {
		t.Fatalf("a called %d times, want 3", len(callsA))
	}
	for i := 1; i < len(callsA); i++ {
		if gap := callsA[i].start.Sub(callsA[i-1].end); gap < backoff {
			t.Errorf("attempt %d of a started %s after attempt %d ended, before its %s backoff", i+1, gap, i, backoff)
		}
	}
	if got := b.Outcomes(t, jobA); !slices.Equal(got, []string{"failed", "failed", "completed"}) {
		t.Errorf("a's attempts: %v", got)
	}
	if got := b.Outcomes(t, jobB); !slices.Equal(got, []string{"completed"}) {
		t.Errorf("b's attempts: %v", got)
	}
	for i, a := range b.Attempts(t, jobA) {
		if a.Attempt != i+1 || deref(a.WorkerID) != "test-worker" {
			t.Errorf("a attempt row %d: attempt %d worker %s", i, a.Attempt, deref(a.WorkerID))
		}
		if i < 2 && (deref(a.ErrorClass) != "handler_error" || deref(a.Error) != fmt.Sprintf("a fails, try %d", i+1)) {
			t.Errorf("a attempt %d: class %s error %s", i+1, deref(a.ErrorClass), deref(a.Error))
		}
		if i == 2 && (a.ErrorClass != nil || a.Error != nil) {
			t.Errorf("a's completed attempt has an error: %s %s", deref(a.ErrorClass), deref(a.Error))
		}
		if a.FinishedAt.Before(a.StartedAt) {
			t.Errorf("a attempt %d finished %v before it started %v", i+1, a.FinishedAt, a.StartedAt)
		}
	}
	if j := b.Job(t, jobA); j.AttemptCount != 3 || j.LastError != nil || j.LastErrorClass != nil || j.LeaseExpiresAt != nil {
		t.Errorf("a's job after success: %+v", j)
	}
}

func TestDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	always, perm, fine := &recorder{}, &recorder{}, &recorder{}
	b.start(t, b.config(
		consumers.Handler{Name: "always", MaxAttempts: 3, Backoff: noBackoff,
			Func: always.wrap(func(context.Context, *consumers.Event) error { return errors.New("never works") })},
		consumers.Handler{Name: "perm", Backoff: noBackoff,
			Func: perm.wrap(func(context.Context, *consumers.Event) error {
				return fmt.Errorf("validate: %w", consumers.Permanent(errors.New("unknown customer")))
			})},
		consumers.Handler{Name: "fine", Func: fine.wrap(ok)},
	))
	b.StartStreamer(t, consumertest.StreamerOptions{})

	eventID := b.InsertEvent(t, consumertest.EventParams{})
	jobAlways, jobPerm, jobFine := b.JobID(t, eventID, "always"), b.JobID(t, eventID, "perm"), b.JobID(t, eventID, "fine")
	ja := b.WaitJobStatus(t, jobAlways, "dead_letter", wait)
	jp := b.WaitJobStatus(t, jobPerm, "dead_letter", wait)
	b.WaitJobStatus(t, jobFine, "completed", wait)
	// A dead letter must stay put: no further call, no status change.
	testwait.Consistently(t, 200*time.Millisecond, "the dead letters stay put", func() (bool, string) {
		na, np := len(always.Calls()), len(perm.Calls())
		sa, sp := b.Job(t, jobAlways).Status, b.Job(t, jobPerm).Status
		return na == 3 && np == 1 && sa == "dead_letter" && sp == "dead_letter",
			fmt.Sprintf("always %s after %d calls, perm %s after %d", sa, na, sp, np)
	})

	if n := len(always.Calls()); n != 3 || ja.AttemptCount != 3 || ja.MaxAttempts != 3 {
		t.Errorf("always: %d calls, job %+v; want 3 attempts of max 3", n, ja)
	}
	if got := b.Outcomes(t, jobAlways); !slices.Equal(got, []string{"failed", "failed", "dead_letter"}) {
		t.Errorf("always's attempts: %v", got)
	}
	if deref(ja.LastError) != "never works" || deref(ja.LastErrorClass) != "handler_error" {
		t.Errorf("always's last error: %s (%s)", deref(ja.LastError), deref(ja.LastErrorClass))
	}

	if n := len(perm.Calls()); n != 1 || jp.AttemptCount != 1 {
		t.Errorf("perm: %d calls, %d attempts; want 1", n, jp.AttemptCount)
	}
	as := b.Attempts(t, jobPerm)
	if len(as) != 1 || as[0].Outcome != "dead_letter" || deref(as[0].ErrorClass) != "permanent" ||
		deref(as[0].Error) != "validate: unknown customer" {
		t.Errorf("perm's attempts: %+v", as)
	}
	if deref(jp.LastErrorClass) != "permanent" {
		t.Errorf("perm's job class %s", deref(jp.LastErrorClass))
	}

	if n := len(fine.Calls()); n != 1 {
		t.Errorf("fine called %d times, want 1", n)
	}
	if got := b.Outcomes(t, jobFine); !slices.Equal(got, []string{"completed"}) {
		t.Errorf("fine's attempts: %v", got)
	}
}

func TestPanicIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var n atomic.Int32
	b.start(t, b.config(consumers.Handler{Name: "flaky", Backoff: noBackoff,
		Func: func(context.Context, *consumers.Event) error {
			if n.Add(1) == 1 {
				panic("boom in handler")
			}
			return nil
		}}))
	b.StartStreamer(t, consumertest.StreamerOptions{})

	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "flaky")
	b.WaitJobStatus(t, jobID, "completed", wait)
	as := b.Attempts(t, jobID)
	if len(as) != 2 || as[0].Outcome != "failed" || deref(as[0].ErrorClass) != "panic" || as[1].Outcome != "completed" {
		t.Fatalf("attempts: %+v", as)
	}
	if e := deref(as[0].Error); !strings.HasPrefix(e, "panic: boom in handler") || len(e) > 2000 {
		t.Errorf("panic's stored error (%d bytes): %.200s", len(e), e)
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var n atomic.Int32
	b.start(t, b.config(consumers.Handler{Name: "slow", Backoff: noBackoff, Timeout: 100 * time.Millisecond,
		Func: func(ctx context.Context, _ *consumers.Event) error {
			switch n.Add(1) {
			case 1: // respects its context
				<-ctx.Done()
				return fmt.Errorf("call crm: %w", ctx.Err())
			case 2: // ignores it, then returns an unrelated error
				time.Sleep(150 * time.Millisecond) // past its 100ms timeout: the handler under test is slow
				return errors.New("gave up")
			}
			return nil
		}}))
	b.StartStreamer(t, consumertest.StreamerOptions{})

	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "slow")
	b.WaitJobStatus(t, jobID, "completed", wait)
	as := b.Attempts(t, jobID)
	if len(as) != 3 {
		t.Fatalf("attempts: %+v", as)
	}
	for i := range 2 {
		if as[i].Outcome != "failed" || deref(as[i].ErrorClass) != "timeout" {
			t.Errorf("attempt %d: %s class %s, want failed timeout", i+1, as[i].Outcome, deref(as[i].ErrorClass))
		}
	}
}

// A handler running for several leases keeps its job: the lease extension
// pushes the lease out while the reaper runs every 10ms. The lease is 1s,
// extended every 333ms: a 300ms lease (extended every 100ms) lost the job on
// a loaded machine, where a round trip to Postgres can take longer than 200ms.
func TestLeaseExtensionKeepsTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const lease = time.Second
	rec := &recorder{}
	running := make(chan struct{}, 1)
	// The handler runs until the test has seen its lease pushed well out.
	release := make(chan struct{})
	letGo := sync.OnceFunc(func() { close(release) })
	t.Cleanup(letGo)
	cfg := b.config(consumers.Handler{Name: "long", Func: rec.wrap(func(ctx context.Context, _ *consumers.Event) error {
		running <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})})
	cfg.LeaseExtend = lease
	b.start(t, cfg)
	// The streamer's own lease is as short as the extension's, and its reaper
	// runs every tick: without lease extension the job would be re-leased.
	st := b.StartStreamer(t, consumertest.StreamerOptions{Lease: lease})

	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "long")
	<-running
	claims := st.ClaimsOf(jobID)
	if len(claims) != 1 {
		t.Fatalf("claims: %+v", claims)
	}
	firstExpiry := claims[0].At.Add(lease)
	var statuses []string
	job := func() consumertest.Job {
		j := b.Job(t, jobID)
		if !slices.Contains(statuses, j.Status) {
			statuses = append(statuses, j.Status)
		}
		return j
	}
	// Two leases past the claim's expiry: the heartbeat extended it at least
	// a whole lease after the claim's own lease ran out.
	testwait.Eventually(t, wait, "the lease pushed two leases past the claim's expiry", func() (bool, string) {
		j := job()
		if j.LeaseExpiresAt == nil {
			return false, "job " + j.Status + " without a lease"
		}
		moved := j.LeaseExpiresAt.Sub(firstExpiry)
		return moved >= 2*lease, fmt.Sprintf("job %s, attempt %d, lease moved %s", j.Status, j.AttemptCount, moved)
	})
	letGo()
	testwait.Eventually(t, wait, "the job completed", func() (bool, string) {
		j := job()
		return j.Status == "completed", "job " + j.Status
	})
	if !slices.Equal(statuses, []string{"leased", "completed"}) {
		t.Errorf("job went through %v, want leased then completed", statuses)
	}
	if n := len(rec.Calls()); n != 1 {
		t.Errorf("handler called %d times, want 1", n)
	}
	if got := b.Outcomes(t, jobID); !slices.Equal(got, []string{"completed"}) {
		t.Errorf("attempts: %v", got)
	}
	if j := b.Job(t, jobID); j.AttemptCount != 1 {
		t.Errorf("attempt count %d, want 1", j.AttemptCount)
	}
}

func TestStaleReferencesAreSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &recorder{}
	b.start(t, b.config(consumers.Handler{Name: "h", Func: rec.wrap(ok)}))

	eventID := b.InsertEvent(t, consumertest.EventParams{EventType: "x"})
	refs := b.ClaimOnce(t, 10*time.Second)
	if len(refs) != 1 {
		t.Fatalf("claimed %+v", refs)
	}
	ref := refs[0]
	if ref.EventID != eventID || ref.Attempt != 1 {
		t.Fatalf("claimed %+v", ref)
	}
	future, past, missing, otherEvent := ref, ref, ref, ref
	future.Attempt = 2
	past.Attempt = 0 // ParseMessage rejects it: malformed
	missing.JobID = ref.JobID + 1000
	otherEvent.EventID = ref.EventID + 1
	for _, r := range []bus.Ref{future, past, missing, otherEvent} {
		if err := b.Publish(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Bus.Publish(bus.Topic("h"), message.NewMessage("junk", []byte("not json"))); err != nil {
		t.Fatal(err)
	}
	// Each reference has come to its end once its skip or drop is logged.
	b.waitLogged(t, "dropped malformed job reference", 2)         // past, junk
	b.waitLogged(t, "skipped job reference: not this attempt", 3) // future, missing, otherEvent
	if n := len(rec.Calls()); n != 0 {
		t.Fatalf("handler ran %d times on stale references", n)
	}
	if j := b.Job(t, ref.JobID); j.Status != "leased" {
		t.Fatalf("job is %s after stale references, want leased", j.Status)
	}

	// The right reference runs; a duplicate of it afterwards does not.
	if err := b.Publish(ref); err != nil {
		t.Fatal(err)
	}
	b.WaitJobStatus(t, ref.JobID, "completed", wait)
	if err := b.Publish(ref); err != nil {
		t.Fatal(err)
	}
	// Skipped either as finished (not this attempt's to take) or, when it
	// arrives in the moment between the outcome's commit and the attempt
	// letting go of its running-attempt fence, as already running here.
	b.waitLogged(t, "skipped job reference: ", 4)
	if n := len(rec.Calls()); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if got := b.Outcomes(t, ref.JobID); !slices.Equal(got, []string{"completed"}) {
		t.Errorf("attempts: %v", got)
	}
}

func TestLostLeaseIsFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rec := &recorder{}
	started := make(chan int, 2)
	release := make(chan struct{})
	b.start(t, b.config(consumers.Handler{Name: "h", Func: rec.wrap(func(_ context.Context, e *consumers.Event) error {
		started <- e.Attempt
		if e.Attempt == 1 {
			<-release
		}
		return nil
	})}))

	b.InsertEvent(t, consumertest.EventParams{})
	refs := b.ClaimOnce(t, 10*time.Second)
	if len(refs) != 1 {
		t.Fatalf("claimed %+v", refs)
	}
	if err := b.Publish(refs[0]); err != nil {
		t.Fatal(err)
	}
	if a := <-started; a != 1 {
		t.Fatalf("started attempt %d", a)
	}

	// While attempt 1 runs, its lease expires, the reaper closes it and a
	// streamer leases attempt 2.
	jobID := refs[0].JobID
	if _, err := b.Admin.Exec(ctx, `UPDATE webhook_ingress.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, jobID); err != nil {
		t.Fatal(err)
	}
	err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		_, err := queries.New(tx).ReapExpiredLeases(ctx, 10)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	again := b.ClaimOnce(t, 10*time.Second)
	if len(again) != 1 || again[0].Attempt != 2 {
		t.Fatalf("re-claimed %+v", again)
	}

	// Attempt 1 finishes: it must not touch attempt 2's job state or history.
	close(release)
	consumertest.WaitFor(t, wait, "attempt 1 to finish", func() bool { return len(rec.Calls()) == 1 })
	consumertest.WaitFor(t, wait, "the lost-lease log line", func() bool {
		return strings.Contains(b.logs.String(), "lease was lost")
	})
	if j := b.Job(t, jobID); j.Status != "leased" || j.AttemptCount != 2 {
		t.Fatalf("stale attempt changed the job: %+v", j)
	}
	if got := b.Outcomes(t, jobID); !slices.Equal(got, []string{"lease_expired"}) {
		t.Fatalf("attempts after the stale outcome: %v", got)
	}

	if err := b.Publish(again[0]); err != nil {
		t.Fatal(err)
	}
	b.WaitJobStatus(t, jobID, "completed", wait)
	if got := b.Outcomes(t, jobID); !slices.Equal(got, []string{"lease_expired", "completed"}) {
		t.Fatalf("attempts: %v", got)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var cur, peak atomic.Int32
	b.start(t, b.config(consumers.Handler{Name: "h", Concurrency: 2, Func: func(context.Context, *consumers.Event) error {
		n := cur.Add(1)
		defer cur.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(100 * time.Millisecond) // busy long enough for the others to pile up against the limit
		return nil
	}}))
	b.StartStreamer(t, consumertest.StreamerOptions{})

	var jobs []int64
	for range 6 {
		jobs = append(jobs, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h"))
	}
	for _, id := range jobs {
		b.WaitJobStatus(t, id, "completed", wait)
	}
	if p := peak.Load(); p != 2 {
		t.Errorf("peak concurrency %d, want 2", p)
	}
}

func TestStopDrainsInFlightAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &recorder{}
	started := make(chan struct{}, 10)
	svc, err := consumers.New(b.config(consumers.Handler{Name: "h", Func: rec.wrap(func(ctx context.Context, _ *consumers.Event) error {
		started <- struct{}{}
		select {
		case <-time.After(500 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})}))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := b.StartStreamer(t, consumertest.StreamerOptions{})

	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h")
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svc.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	// Recorded by the time Stop returns, not some time after.
	if j := b.Job(t, jobID); j.Status != "completed" {
		t.Fatalf("job is %s right after Stop, want completed", j.Status)
	}
	if got := b.Outcomes(t, jobID); !slices.Equal(got, []string{"completed"}) {
		t.Fatalf("attempts: %v", got)
	}

	// A stopped service takes no more work: once the streamer has handed
	// the next job out, nothing runs it.
	later := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h")
	testwait.Eventually(t, wait, "the next job claimed", func() (bool, string) {
		n := len(st.ClaimsOf(later))
		return n > 0, fmt.Sprintf("%d claims", n)
	})
	testwait.Consistently(t, 300*time.Millisecond, "nothing runs after Stop", func() (bool, string) {
		n, j := len(rec.Calls()), b.Job(t, later)
		return n == 1 && j.Status != "completed", fmt.Sprintf("handler ran %d times, the next job is %s", n, j.Status)
	})
	if err := svc.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := svc.Start(context.Background()); err == nil {
		t.Error("Start after Stop succeeded")
	} else if !strings.Contains(err.Error(), "was stopped") {
		t.Errorf("Start after Stop: %v; want it to say the service was stopped (it said \"already started\")", err)
	}
}

func TestStopDeadlineAbandonsAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	returned := make(chan error, 1)
	started := make(chan struct{}, 1)
	svc, err := consumers.New(b.config(consumers.Handler{Name: "h", Func: func(ctx context.Context, _ *consumers.Event) error {
		started <- struct{}{}
		<-ctx.Done()
		returned <- ctx.Err()
		return ctx.Err()
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.StartStreamer(t, consumertest.StreamerOptions{})
	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h")
	<-started

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = svc.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop past its deadline: %v", err)
	}
	if herr := <-returned; !errors.Is(herr, context.Canceled) {
		t.Fatalf("handler's context ended with %v, want canceled", herr)
	}
	// Not counted as a failure, now or a little later: its lease was given
	// back, and the streamer leases the job again (attempt 1 again).
	testwait.Consistently(t, 200*time.Millisecond, "the abandoned job without an error or a spent attempt", func() (bool, string) {
		j := b.Job(t, jobID)
		return j.LastErrorClass == nil && j.AttemptCount <= 1, fmt.Sprintf("%+v", j)
	})
	if got := b.Outcomes(t, jobID); len(got) != 0 {
		t.Errorf("abandoned attempt recorded: %v", got)
	}
}

// An attempt cut short by Stop's deadline records no failure and gives its
// lease back: the job is pending again at once with the attempt not counted,
// so a job on its last attempt is not dead-lettered by a forced stop (as in
// a deploy), though its consumer extended the lease, which the reaper would
// count. The next consumer runs it as attempt 1 again.
func TestForcedStopGivesTheAttemptBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	started := make(chan struct{}, 1)
	cfg := b.config(consumers.Handler{Name: "h", MaxAttempts: 1, Func: func(ctx context.Context, _ *consumers.Event) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}})
	cfg.LeaseExtend = 150 * time.Millisecond
	svc, err := consumers.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h")
	refs := b.ClaimOnce(t, 10*time.Second)
	if len(refs) != 1 {
		t.Fatalf("claimed %+v", refs)
	}
	if err := b.Publish(refs[0]); err != nil {
		t.Fatal(err)
	}
	<-started
	testwait.Eventually(t, wait, "the running attempt's lease to be extended", func() (bool, string) {
		var worker *string
		if err := b.Admin.QueryRow(ctx, `SELECT worker_id FROM webhook_ingress.jobs WHERE id = $1`, jobID).Scan(&worker); err != nil {
			t.Fatal(err)
		}
		return worker != nil, "worker_id " + deref(worker)
	})

	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := svc.Stop(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop past its deadline: %v", err)
	}
	// Stop waited for the cancelled attempt to give its lease back.
	var worker, holder *string
	if err := b.Admin.QueryRow(ctx, `SELECT worker_id, lease_holder_id FROM webhook_ingress.jobs WHERE id = $1`, jobID).Scan(&worker, &holder); err != nil {
		t.Fatal(err)
	}
	if j := b.Job(t, jobID); j.Status != "pending" || j.AttemptCount != 0 || j.LeaseExpiresAt != nil || j.LastErrorClass != nil ||
		worker != nil || holder != nil || j.NextAttemptAt.After(time.Now().Add(time.Second)) {
		t.Fatalf("job after a forced stop: %+v (worker %s, holder %s), want pending at once, attempt 0, no lease, no error",
			j, deref(worker), deref(holder))
	}
	if got := b.Outcomes(t, jobID); len(got) != 0 {
		t.Fatalf("attempts after a forced stop: %v, want none", got)
	}
	b.waitLogged(t, "its lease was given back and the attempt does not count", 1)

	// Nothing for the reaper to count, and the next consumer completes the
	// job on its first (and only) attempt.
	err = consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		_, err := queries.New(tx).ReapExpiredLeases(ctx, 10)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	b.start(t, b.config(consumers.Handler{Name: "h", MaxAttempts: 1, Func: func(context.Context, *consumers.Event) error { return nil }}))
	refs = b.ClaimOnce(t, 10*time.Second)
	if len(refs) != 1 || refs[0].Attempt != 1 {
		t.Fatalf("claimed after the forced stop: %+v, want the job's attempt 1", refs)
	}
	if err := b.Publish(refs[0]); err != nil {
		t.Fatal(err)
	}
	if j := b.WaitJobStatus(t, jobID, "completed", wait); j.AttemptCount != 1 {
		t.Fatalf("completed on attempt %d, want 1", j.AttemptCount)
	}
	if got := b.Outcomes(t, jobID); !slices.Equal(got, []string{"completed"}) {
		t.Fatalf("attempts: %v, want the one completed", got)
	}
}

func TestLogsCarryMetadataOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const (
		bodyMark   = "BODY-MARK-7f3a"
		headerMark = "HEADER-MARK-91cd"
		errMark    = "ERROR-MARK-c0de"
		extMark    = "EXT-MARK-5eed"
	)
	var n atomic.Int32
	var mu sync.Mutex
	b.start(t, b.config(consumers.Handler{Name: "leaky", MaxAttempts: 3, Backoff: noBackoff,
		Func: func(context.Context, *consumers.Event) error {
			mu.Lock()
			defer mu.Unlock()
			switch n.Add(1) {
			case 1:
				return errors.New("customer said " + errMark)
			case 2:
				panic("panic with " + errMark)
			}
			return consumers.Permanent(errors.New(errMark))
		}}))
	b.StartStreamer(t, consumertest.StreamerOptions{})

	eventID := b.InsertEvent(t, consumertest.EventParams{ExternalID: extMark, EventType: "invoice.paid",
		Headers: map[string][]string{"X-Secret": {headerMark}}, Body: []byte(bodyMark)})
	jobID := b.JobID(t, eventID, "leaky")
	b.WaitJobStatus(t, jobID, "dead_letter", wait)
	consumertest.WaitFor(t, wait, "the dead-letter log line", func() bool { return strings.Contains(b.logs.String(), `"outcome":"dead_letter"`) })

	logs := b.logs.String()
	for _, mark := range []string{bodyMark, headerMark, errMark, extMark} {
		if strings.Contains(logs, mark) {
			t.Errorf("logs contain %s:\n%s", mark, logs)
		}
	}
	for _, want := range []string{fmt.Sprintf(`"job_id":%d`, jobID), fmt.Sprintf(`"event_id":%d`, eventID),
		`"handler":"leaky"`, `"provider":"stripe"`, `"event_type":"invoice.paid"`, `"error_class":"handler_error"`,
		`"error_class":"panic"`, `"error_class":"permanent"`, `"outcome":"failed"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s", want)
		}
	}
	// The text is kept where it belongs.
	if j := b.Job(t, jobID); deref(j.LastError) != errMark {
		t.Errorf("last_error %q", deref(j.LastError))
	}
}

// Two consumer services on one bus share each handler's topic like a queue
// group: each reference goes to one of them, so the handler runs once per
// attempt.
func TestTwoConsumersOneBusRunEachAttemptOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls sync.Map
	var n atomic.Int64
	h := func(ctx context.Context, e *consumers.Event) error {
		if _, dup := calls.LoadOrStore(e.JobID, true); dup {
			t.Errorf("job %d handled twice", e.JobID)
		}
		n.Add(1)
		return nil
	}
	for i := 0; i < 2; i++ {
		cfg := b.config(consumers.Handler{Name: "h", Func: h})
		cfg.WorkerID = fmt.Sprintf("w%d", i)
		b.start(t, cfg)
	}
	b.StartStreamer(t, consumertest.StreamerOptions{})
	var jobs []int64
	for i := 0; i < 50; i++ {
		jobs = append(jobs, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{EventType: "x"}), "h"))
	}
	for _, id := range jobs {
		b.WaitJobStatus(t, id, "completed", wait)
	}
	if n.Load() != int64(len(jobs)) {
		t.Fatalf("handler ran %d times for %d jobs", n.Load(), len(jobs))
	}
}

// Attempt numbers repeat after a replay. A consumer that hung on attempt 1,
// while the job was re-queued and leased again as a new attempt 1, must not
// record its outcome on the new lease: updates are fenced on the lease time.
func TestStaleConsumerCannotFinishTheNextLeaseWithTheSameAttemptNumber(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	b.start(t, b.config(consumers.Handler{Name: "h", Func: func(context.Context, *consumers.Event) error {
		if calls.Add(1) == 1 {
			close(started)
			<-release
		}
		return nil
	}}))
	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{EventType: "x"}), "h")
	refs := b.ClaimOnce(t, 10*time.Second)
	if len(refs) != 1 {
		t.Fatalf("claimed %d", len(refs))
	}
	if err := b.Publish(refs[0]); err != nil {
		t.Fatal(err)
	}
	<-started
	// Meanwhile: the lease is taken back and the job replayed (attempts reset),
	// and leased again as attempt 1.
	if _, err := b.Admin.Exec(ctx, `UPDATE webhook_ingress.jobs SET status = 'pending', attempt_count = 0,
		lease_holder_id = NULL, lease_expires_at = NULL, worker_id = NULL WHERE id = $1`, jobID); err != nil {
		t.Fatal(err)
	}
	again := b.ClaimOnce(t, 10*time.Second)
	if len(again) != 1 || again[0].Attempt != 1 {
		t.Fatalf("re-lease: %+v", again)
	}
	close(release)
	consumertest.WaitFor(t, wait, "the stale attempt to finish", func() bool {
		return strings.Contains(b.logs.String(), "attempt outcome not recorded")
	})
	if j := b.Job(t, jobID); j.Status != "leased" || j.AttemptCount != 1 {
		t.Fatalf("job %+v: the stale consumer finished the new lease", j)
	}
}

// Can a handler run twice for one attempt? Yes: taking an attempt writes
// nothing, so when the bus delivers one reference to two consumer processes
// at once, both run the handler. Only one outcome is recorded; the second is
// fenced out (the lease it was read under is no longer current). A reference
// delivered again after the outcome is recorded does not run the handler.
func TestDuplicateDeliveryOfOneAttemptIsFenced(t *testing.T) {
	t.Parallel()
	// Both message forms: one reference (NewMessage) and a list of them
	// (NewBatchMessage, the streamer's default).
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "batch"}[batch], func(t *testing.T) {
			t.Parallel()
			duplicateDelivery(t, batch)
		})
	}
}

func duplicateDelivery(t *testing.T, batch bool) {
	b := setup(t)
	publish := func(ref bus.Ref) error {
		if batch {
			return b.PublishBatch([]bus.Ref{ref})
		}
		return b.Publish(ref)
	}
	var calls atomic.Int32
	both := make(chan struct{})
	h := consumers.Handler{Name: "h", Func: func(ctx context.Context, _ *consumers.Event) error {
		if calls.Add(1) == 2 {
			close(both)
		}
		select { // both runs overlap: neither outcome is recorded before the other ran
		case <-both:
		case <-time.After(wait):
		}
		return nil
	}}
	// Two consumer processes, each with its own bus delivery of the reference.
	other := bus.NewGoChannel(slog.New(slog.DiscardHandler))
	t.Cleanup(func() { other.Close() })
	first := b.start(t, b.config(h))
	cfg := b.config(h)
	cfg.Subscriber, cfg.WorkerID = other, "test-worker-2"
	b.start(t, cfg)

	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{EventType: "x"}), "h")
	refs := b.ClaimOnce(t, time.Minute)
	if len(refs) != 1 {
		t.Fatalf("claimed %d", len(refs))
	}
	msg, err := bus.NewMessage(refs[0])
	if batch {
		msg, err = bus.NewBatchMessage(refs)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := publish(refs[0]); err != nil {
		t.Fatal(err)
	}
	if err := other.Publish(bus.Topic("h"), msg); err != nil {
		t.Fatal(err)
	}
	b.WaitJobStatus(t, jobID, "completed", wait)
	consumertest.WaitFor(t, wait, "the second outcome to be fenced out", func() bool {
		return strings.Contains(b.logs.String(), "attempt outcome not recorded: the job's lease was lost")
	})
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times for the doubly delivered attempt, want 2 (both deliveries read a current lease)", n)
	}
	as := b.Attempts(t, jobID)
	if len(as) != 1 || as[0].Outcome != "completed" || as[0].Attempt != 1 {
		t.Fatalf("history %+v, want one successful attempt 1", as)
	}
	// Delivered once more after the outcome: read, found finished, not run.
	reads := first.Stats().ReadStatements
	if err := publish(refs[0]); err != nil {
		t.Fatal(err)
	}
	consumertest.WaitFor(t, wait, "the late reference to be read", func() bool { return first.Stats().ReadStatements > reads })
	if n := calls.Load(); n != 2 {
		t.Fatalf("a reference delivered after its outcome ran the handler again (%d runs)", n)
	}
	if j := b.Job(t, jobID); j.Status != "completed" {
		t.Fatalf("job %+v", j)
	}
}

// unhealthyBus is a subscriber that reports its own health, as natsbus does
// while a subscription is not consuming.
type unhealthyBus struct {
	message.Subscriber
	err atomic.Pointer[error]
}

func (u *unhealthyBus) Healthy() error {
	if err := u.err.Load(); err != nil {
		return *err
	}
	return nil
}

// A transport that is not delivering although its subscriptions are open
// (natsbus resuming a recreated durable) makes the service unhealthy until
// it delivers again.
func TestHealthyReportsTheBusHealth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := &unhealthyBus{Subscriber: b.Bus}
	cfg := b.config(consumers.Handler{Name: "h", Func: ok})
	cfg.Subscriber = sub
	svc := b.start(t, cfg)
	if err := svc.Healthy(); err != nil {
		t.Fatalf("healthy at start: %v", err)
	}
	stalled := errors.New("consume recreated JetStream consumer inlet_h: no responders")
	sub.err.Store(&stalled)
	if err := svc.Healthy(); !errors.Is(err, stalled) {
		t.Fatalf("Healthy() = %v, want the bus's %v", err, stalled)
	}
	sub.err.Store(nil)
	if err := svc.Healthy(); err != nil {
		t.Fatalf("healthy once the bus is: %v", err)
	}
}

// When the transport closes a subscription under a running service, it stops
// reporting healthy (inlet consumer's /readyz then fails).
func TestHealthyTurnsFalseWhenTheBusClosesTheSubscription(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc := b.start(t, b.config(consumers.Handler{Name: "h", Func: func(context.Context, *consumers.Event) error { return nil }}))
	if err := svc.Healthy(); err != nil {
		t.Fatalf("healthy at start: %v", err)
	}
	if err := b.Bus.Close(); err != nil {
		t.Fatal(err)
	}
	consumertest.WaitFor(t, wait, "Healthy to report the lost subscription", func() bool {
		err := svc.Healthy()
		return err != nil && strings.Contains(err.Error(), `"h"`)
	})
}
