package bodyread

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"time"
)

// headTimeout is how long a sender has to deliver the head of its body (its
// first headBytes, or all of a smaller body) once ingress has room for it:
// 16 KiB in 2 s is far below any provider's rate, and a sender trickling
// bytes holds a head's room for 2 s at most.
const headTimeout = 2 * time.Second

// Fault is why a body was not read.
type Fault int

const (
	// OK is a body read whole.
	OK Fault = iota
	// Overloaded is no room in the budget within Reader.WaitTimeout, or
	// no place to wait for it: 503 overloaded, the rest of the body left
	// unread.
	Overloaded
	// Gone is a sender that left while waiting: nobody to answer.
	Gone
	// TooLarge is a body over the limit: 413 body_too_large.
	TooLarge
	// Timeout is a body that did not arrive in time (headTimeout for the
	// head and for each restStep after it, Reader.ReadTimeout for the
	// rest): 408 body_read_timeout.
	Timeout
	// Broken is a body that ended early or a connection that failed: 400
	// body_unreadable.
	Broken
)

// connBytes is what net/http holds for a request beside its headers: its
// connection's read and write buffers (4 KiB each, as a request's first
// bytes arrive), the request, response and connection structures, and the
// handler's own (its span, logger, contexts).
const connBytes = 8 << 10

// headerEntryBytes is what net/http holds for each header value beside its
// bytes: the map's slot, the name's and value's string headers, the values'
// slice. With connBytes, requestCost is a little above the live heap
// measured per request waiting in a handler: 44.5 KiB for 30 KiB of
// headers in 100 lines, 84.6 KiB for 60 KiB in 200.
const headerEntryBytes = 80

// requestCost is the memory a request holds from the moment its headers are
// read until it is answered, its body aside: its headers (their bytes, and
// the map holding them) and connBytes.
func requestCost(r *http.Request) int64 {
	n := int64(connBytes + len(r.RequestURI) + len(r.Host))
	for k, vs := range r.Header {
		n += int64(len(k))
		for _, v := range vs {
			n += int64(len(v)) + headerEntryBytes
		}
	}
	return n
}

// Reader reads request bodies within a Budget.
type Reader struct {
	Budget *Budget
	// WaitTimeout bounds each wait for room (ingress: store_timeout).
	WaitTimeout time.Duration
	// ReadTimeout bounds reading a body's rest after its head; 0 is none.
	ReadTimeout time.Duration
}

// answerTime is how long an answer decided after the body was read may take
// to write (the store's answer gets the store timeout on top: see
// handleWebhook).
const answerTime = 2 * time.Second

// Read reads r's body, at most limit bytes, within the body budget: room
// for the head is reserved first and the head read within headTimeout; then
// the rest, its room growing a step at a time as it arrives (see Budget):
// each restStep of it must arrive within headTimeout, and all of it within
// Reader.ReadTimeout. A body that finds no room for its next step at once
// waits for the room of its whole rest, then reads on at the same pace.
// Waiting for room (in arrival order) takes at most WaitTimeout each
// time and happens with the body unread, so TCP holds the sender back; a
// request that finds no room for its head and no place among those waiting
// for one (see Budget) is Overloaded at once. It returns the body and the
// budget bytes it holds (the body's room, and the request's headers as the
// head's reservation counted them), which the caller releases once the
// request no longer needs them (after the store).
//
// The buffer grows with the room reserved, never past it: a body of known
// length ends in a buffer of exactly that length.
func (rd *Reader) Read(ctx context.Context, w http.ResponseWriter, r *http.Request, limit int64) (body []byte, held int64, fault Fault) {
	want := r.ContentLength
	if want < 0 {
		want = limit
	}
	rc := http.NewResponseController(w)
	// The write deadline was set when the headers were read (write_timeout);
	// a body that took its read_timeout, or waits for room, can outlast it,
	// and its answer (408, 413, 503, a handshake's, or the store's, which
	// pushes it further) would be lost with the connection. Whatever comes
	// after the read gets answerTime to be written.
	defer func() { _ = rc.SetWriteDeadline(time.Now().Add(answerTime)) }()
	wctx, cancel := context.WithTimeout(ctx, rd.WaitTimeout)
	defer cancel()
	head, extra, err := rd.Budget.acquireHead(wctx, want, requestCost(r))
	if errors.Is(err, errNoRoomToWait) {
		return nil, 0, Overloaded
	}
	if err != nil {
		return nil, 0, waitFault(r)
	}
	// held is the body's room plus extra, the request's headers, reserved
	// until the caller releases held.
	held = head + extra
	// Its places in the heads' and growing bodies' shares, until the body
	// is whole or its whole rest reserved.
	headPlace, growPlace := head+extra, int64(0)
	defer func() {
		rd.Budget.releaseHead(headPlace)
		rd.Budget.releaseGrow(growPlace)
	}()
	fail := func(f Fault) ([]byte, int64, Fault) {
		rd.Budget.Release(held)
		return nil, 0, f
	}

	// The sender's time starts now: any wait was ingress's.
	headDeadline := headTimeout
	if rd.ReadTimeout > 0 {
		headDeadline = min(headDeadline, rd.ReadTimeout)
	}
	_ = rc.SetReadDeadline(time.Now().Add(headDeadline))
	mr := http.MaxBytesReader(w, r.Body, limit)
	buf := make([]byte, head)
	n, err := io.ReadFull(mr, buf)
	switch {
	case r.ContentLength < 0 && (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)):
		// A chunked body smaller than a head: whole.
		rd.Budget.Release(head - int64(n))
		held = int64(n) + extra
		return bodyRead(rc, buf[:n], held)
	case err != nil:
		return fail(readError(err))
	case int64(n) == want && r.ContentLength >= 0:
		return bodyRead(rc, buf, held)
	}

	// The rest, room a step at a time as it arrives.
	var overall time.Time // the end of ReadTimeout for the rest
	if rd.ReadTimeout > 0 {
		overall = time.Now().Add(rd.ReadTimeout)
	}
	whole := false // the whole rest reserved
	body = buf
	for {
		if len(body) < cap(body) {
			// The next restStep within headTimeout (and the rest within
			// read_timeout): a sender that stops is cut off soon, holding
			// what it sent plus one step.
			end := min(cap(body), len(body)+restStep)
			deadline := time.Now().Add(headDeadline)
			if !overall.IsZero() && overall.Before(deadline) {
				deadline = overall
			}
			_ = rc.SetReadDeadline(deadline)
			m, err := io.ReadFull(mr, body[len(body):end])
			body = body[:len(body)+m]
			if r.ContentLength < 0 && (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)) {
				break // chunked: whole
			}
			if err != nil {
				return fail(readError(err))
			}
			if int64(len(body)) == want && r.ContentLength >= 0 {
				break
			}
			continue
		}
		if int64(len(body)) >= want {
			// Chunked and full: one more byte would be over the limit.
			var one [1]byte
			if _, err := mr.Read(one[:]); err == nil {
				err = &http.MaxBytesError{Limit: limit}
				return fail(readError(err))
			} else if err != io.EOF {
				return fail(readError(err))
			}
			break
		}
		if room := held - extra; int64(cap(body)) == room {
			// Room for more: the next step if it is free now, else the
			// whole rest, waiting in line.
			step := min(max(restStep, room), want-room)
			if !whole && rd.Budget.tryGrow(step+headPlace, step) {
				growPlace += step + headPlace
				rd.Budget.releaseHead(headPlace)
				headPlace = 0
				held += step
			} else {
				rctx, cancel := context.WithTimeout(ctx, rd.WaitTimeout)
				rest, _, err := rd.Budget.acquire(rctx, want-room)
				cancel()
				if err != nil {
					return fail(waitFault(r))
				}
				held += rest
				whole = true
				rd.Budget.releaseHead(headPlace)
				rd.Budget.releaseGrow(growPlace)
				headPlace, growPlace = 0, 0
				if rd.ReadTimeout > 0 {
					overall = time.Now().Add(rd.ReadTimeout) // the wait was ingress's
				}
			}
		}
		// Grow the buffer into the room: at once to a known length, by
		// doubling for a chunked body (which may end well short of it).
		size := held - extra
		if r.ContentLength < 0 {
			size = min(size, 2*int64(cap(body)))
		}
		grown := make([]byte, len(body), size)
		copy(grown, body)
		body = grown
	}
	if size := int64(cap(body)); size < held-extra {
		rd.Budget.Release(held - extra - size) // keep what it takes
		held = size + extra
	}
	return bodyRead(rc, body, held)
}

// bodyRead clears the read deadline once the body is whole: net/http then
// reads in the background to notice a sender leaving, and a deadline
// passing there would cancel the request while it is verified and stored.
func bodyRead(rc *http.ResponseController, body []byte, held int64) ([]byte, int64, Fault) {
	_ = rc.SetReadDeadline(time.Time{})
	return body, held, OK
}

// waitFault is why a wait for room ended: the sender left, or the budget
// stayed spent for the store timeout.
func waitFault(r *http.Request) Fault {
	if r.Context().Err() != nil {
		return Gone
	}
	return Overloaded
}

func readError(err error) Fault {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return TooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return Timeout
	default:
		return Broken
	}
}
