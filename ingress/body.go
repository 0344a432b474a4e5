package ingress

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

// readFault is why a body was not read.
type readFault int

const (
	readOK readFault = iota
	// readOverloaded: no room in ingress.max_inflight_bytes within the
	// store timeout: 503 overloaded, the rest of the body left unread.
	readOverloaded
	// readGone: the sender left while waiting; nobody to answer.
	readGone
	// readTooLarge: over ingress.max_body_bytes: 413 body_too_large.
	readTooLarge
	// readTimeout: the body did not arrive in time (headTimeout for the
	// head, ingress.read_timeout for the rest): 408 body_read_timeout.
	readTimeout
	// readBroken: the body ended early or the connection failed: 400
	// body_unreadable.
	readBroken
)

// readBody reads r's body, at most limit bytes, within the body budget: room
// for the head is reserved first and the head read within headTimeout; only
// then is room for the rest reserved and the rest read within
// ingress.read_timeout. Waiting for room (in arrival order) takes at most the
// store timeout and happens with the body unread, so TCP holds the sender
// back. It returns the body and the budget bytes it holds, which the caller
// releases once the body is no longer needed (after the store).
//
// A body of known length goes into a buffer of exactly that length; one of
// unknown length (chunked) into a buffer grown as it comes, never past the
// room reserved.
func (s *Server) readBody(ctx context.Context, w http.ResponseWriter, r *http.Request, limit int64) (body []byte, held int64, fault readFault) {
	want := r.ContentLength
	if want < 0 {
		want = limit
	}
	rc := http.NewResponseController(w)
	wctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	defer cancel()
	head, _, err := s.inflight.acquireHead(wctx, want)
	if err != nil {
		return nil, 0, s.waitFault(r)
	}
	held = head
	headPlace := head // in budget.heads until the body is whole or its rest reserved
	defer func() { s.inflight.releaseHead(headPlace) }()
	fail := func(f readFault) ([]byte, int64, readFault) {
		s.inflight.release(held)
		return nil, 0, f
	}

	// The sender's time starts now: any wait was ingress's.
	headDeadline := headTimeout
	if s.cfg.ReadTimeout > 0 {
		headDeadline = min(headDeadline, s.cfg.ReadTimeout)
	}
	_ = rc.SetReadDeadline(time.Now().Add(headDeadline))
	rd := http.MaxBytesReader(w, r.Body, limit)
	buf := make([]byte, head)
	n, err := io.ReadFull(rd, buf)
	switch {
	case r.ContentLength < 0 && (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)):
		// A chunked body smaller than a head: whole.
		s.inflight.release(head - int64(n))
		held = int64(n)
		return s.bodyRead(rc, buf[:n], held)
	case err != nil:
		return fail(readError(err))
	case int64(n) == want && r.ContentLength >= 0:
		return s.bodyRead(rc, buf, held)
	}

	// The rest, once there is room for it.
	rest, _, err := s.inflight.acquire(wctx, want-head)
	if err != nil {
		return fail(s.waitFault(r))
	}
	held += rest
	s.inflight.releaseHead(headPlace)
	headPlace = 0
	if s.cfg.ReadTimeout > 0 {
		_ = rc.SetReadDeadline(time.Now().Add(s.cfg.ReadTimeout))
	} else {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if r.ContentLength >= 0 {
		body = make([]byte, r.ContentLength)
		copy(body, buf)
		if _, err := io.ReadFull(rd, body[head:]); err != nil {
			return fail(readError(err))
		}
		return s.bodyRead(rc, body, held)
	}
	// Chunked: grow by doubling, never past limit (what is reserved).
	body = buf
	for {
		if len(body) == cap(body) {
			if int64(cap(body)) >= limit {
				// Full: one more byte would be over the limit.
				var one [1]byte
				if _, err := rd.Read(one[:]); err == io.EOF {
					break
				} else if err == nil {
					err = &http.MaxBytesError{Limit: limit}
					return fail(readError(err))
				} else {
					return fail(readError(err))
				}
			}
			grown := make([]byte, len(body), min(2*int64(cap(body)), limit))
			copy(grown, body)
			body = grown
		}
		m, err := rd.Read(body[len(body):cap(body)])
		body = body[:len(body)+m]
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(readError(err))
		}
	}
	if size := int64(cap(body)); size < held {
		s.inflight.release(held - size) // keep what it takes
		held = size
	}
	return s.bodyRead(rc, body, held)
}

// bodyRead clears the read deadline once the body is whole: net/http then
// reads in the background to notice a sender leaving, and a deadline
// passing there would cancel the request while it is verified and stored.
func (s *Server) bodyRead(rc *http.ResponseController, body []byte, held int64) ([]byte, int64, readFault) {
	_ = rc.SetReadDeadline(time.Time{})
	return body, held, readOK
}

// waitFault is why a wait for room ended: the sender left, or the budget
// stayed spent for the store timeout.
func (s *Server) waitFault(r *http.Request) readFault {
	if r.Context().Err() != nil {
		return readGone
	}
	return readOverloaded
}

func readError(err error) readFault {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return readTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return readTimeout
	default:
		return readBroken
	}
}
