package httpforward_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/httpforward"
)

// TestSurvivor254_SignatureCoversTheBytesSent guards doc.go's promise that a
// service can check a forwarded request with Verify over the body it
// received: Inlet-Signature is computed over exactly the bytes forward.go
// sends, the stored raw body, byte for byte.
//
// Mutant (helper-254): forward.go:127 Sign(..., e.Body) changed to
// Sign(..., bytes.TrimSpace(e.Body)), a signature over other bytes than the
// request carries whenever the body begins or ends with whitespace (many
// providers end a JSON body with "\n"). Every existing signature test uses
// a body without outer whitespace, so the mutant passed them all; a real
// service would answer 401 to every attempt and the job would dead-letter.
func TestSurvivor254_SignatureCoversTheBytesSent(t *testing.T) {
	t.Parallel()
	bodies := [][]byte{
		[]byte("{\"id\":\"evt_1\"}\n"),
		[]byte("\r\n  {\"id\":\"evt_2\"}\t \r\n"),
		[]byte(" "),
	}
	for i, body := range bodies {
		var (
			mu        sync.Mutex
			gotBody   []byte
			verifyErr error
			calls     int
		)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			err := httpforward.Verify(secret, r.Header, b, 0, time.Now())
			mu.Lock()
			calls++
			gotBody, verifyErr = b, err
			mu.Unlock()
			if err != nil {
				http.Error(w, "bad signature", http.StatusUnauthorized)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		f := newForwarder(t, httpforward.Config{URL: srv.URL})
		e := &consumers.Event{JobID: int64(700 + i), EventID: int64(70 + i), Handler: "forward", Provider: "shop",
			EventType: "order.created", Body: append([]byte(nil), body...), Attempt: 1, MaxAttempts: 25}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := f(ctx, e)
		cancel()
		srv.Close()
		mu.Lock()
		if calls != 1 || !bytes.Equal(gotBody, body) {
			t.Errorf("body %q: service got %d requests, last body %q; want one carrying the body unchanged", body, calls, gotBody)
		}
		if verifyErr != nil || err != nil {
			t.Errorf("body %q: Verify over the received bytes = %v, forward = %v (class %q); want the genuine request to verify and the job to succeed",
				body, verifyErr, err, consumers.ClassOf(err))
		}
		mu.Unlock()
	}
}
