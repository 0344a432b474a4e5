package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/logvalue"
	"github.com/inlet-dev/inlet/schema"
)

// Event is one webhook, ready to store.
type Event struct {
	Provider    string // source name
	Scheme      string // verifier type
	ExternalID  string
	EventType   string
	Headers     map[string][]string
	RequestURI  string // path and query as received (text: must be UTF-8)
	RawBody     []byte
	SecretIndex int
	// Verified is stored as signature_verified: true when ingress checked
	// the provider's signature; false for events fetched over a provider's
	// API (inlet backfill), which carry no signature.
	Verified bool
	// TraceParent is the W3C traceparent of the span that received it ("":
	// none), stored so the handler's spans join the request's trace.
	TraceParent string
	// OccurredAt is when the provider says the event happened
	// (verify.NewOccurredAt); zero stores NULL.
	OccurredAt time.Time
	// StoreJSON stores the parsed RawBody as payload too (set it only when
	// JSONCopyable(RawBody) holds); false stores NULL. The body is sent once:
	// PostgreSQL parses the raw_body it receives.
	StoreJSON bool
}

// Store writes events. Insert reports whether the event was new (false: a
// duplicate delivery, nothing written). It returns only after COMMIT.
//
// An error wrapping ErrUnstorable means the event can never be stored as it
// is. Any other error may or may not have committed the event: ingress tells
// the two apart where it can (see classify) and answers 503 either way, so
// the provider retries and a retry of a committed event is a duplicate.
type Store interface {
	Insert(ctx context.Context, e *Event) (stored bool, err error)
}

// PGStore stores events with one INSERT … ON CONFLICT DO NOTHING each; an
// autocommit statement is its own transaction, and the fan-out trigger runs
// inside it.
type PGStore struct {
	pool    *pgxpool.Pool
	hinter  Hinter
	filters *filters
}

// Hinter is told after each commit that stored an event, so streamers wake
// (notify.Hinter debounces it into an occasional NOTIFY outside the insert
// transaction).
type Hinter interface{ Hint() }

// NewPGStore returns a Store over pool (which should run as the ingress role).
// hinter may be nil: streamers then find new jobs by polling.
func NewPGStore(pool *pgxpool.Pool, hinter Hinter) *PGStore {
	return &PGStore{pool: pool, hinter: hinter, filters: newFilters(pool)}
}

// useLogger sends the store's own log lines to l (ingress.New passes its
// Config.Logger); slog.Default() until then.
func (s *PGStore) useLogger(l *slog.Logger) {
	s.filters.logger = l.With(slog.String("component", "ingress"))
}

// maxFilterTries bounds how often one store reads the filtered
// subscriptions again because they changed meanwhile (filtersChanged): each
// change is a commit of a subscription's filter, rare by nature.
const maxFilterTries = 5

// InsertEvent and FanOutFiltered stay SQL text (schema.Query), not sqlc
// methods: they are queued together in one pgx.Batch, one implicit
// transaction in one round trip, and sqlc's batch methods send one statement
// kind per batch.
var insertEventSQL = schema.Query("InsertEvent")

// Insert implements Store. An event over a limit (MaxExternalIDBytes, …) or
// one the database refuses for its data fails with ErrUnstorable.
func (s *PGStore) Insert(ctx context.Context, e *Event) (bool, error) {
	if err := checkEvent(e); err != nil {
		return false, fmt.Errorf("insert %s event: %w", e.Provider, err)
	}
	headers, err := json.Marshal(e.Headers)
	if err != nil {
		return false, fmt.Errorf("encode headers of %s event %s: %w: %w", e.Provider, logvalue.Text(e.ExternalID), ErrUnstorable, err)
	}
	// Filters before the connection: reading the filtered subscriptions
	// takes one of the pool's own.
	v, err := s.filters.match(ctx, e)
	if err != nil {
		return false, fmt.Errorf("insert %s event %s: %w", e.Provider, logvalue.Text(e.ExternalID), err)
	}
	return s.insertMatched(ctx, e, headers, v)
}

// insertMatched is Insert of an event whose filters were matched already
// (GroupStore's batch, stored again event by event after one event's data
// failed it: matched once). It matches again only when filtered routing's
// version moved since v was read (the insert is refused: filtersChanged),
// and counts in inlet_ingress_filter_evaluations_total only the verdicts of
// the insert that committed: those of a refused insert were thrown away.
func (s *PGStore) insertMatched(ctx context.Context, e *Event, headers []byte, v verdicts) (bool, error) {
	// A connection first: giving up while waiting for one is known to have
	// written nothing, unlike giving up while the statement runs.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("insert %s event %s: %w: %w", e.Provider, logvalue.Text(e.ExternalID), errNotWritten, err)
	}
	defer conn.Release()
	// The insert says which version of filtered routing the event was
	// matched at: its trigger refuses it when that moved (filtersChanged),
	// and the event is matched again and stored again.
	insert := func(storeJSON bool) (pgconn.CommandTag, error) {
		args := []any{e.Provider, e.Scheme, e.ExternalID, e.EventType, headers, e.RawBody, e.Verified, secretIndex(e), e.RequestURI, e.TraceParent,
			storeJSON, occurredAt(e), v.version}
		if len(v.ids) == 0 {
			return conn.Exec(ctx, insertEventSQL, args...)
		}
		// The jobs of the filters it passed, in the same implicit
		// transaction (a pipelined batch).
		fp, fx, fs := fanOutArgs([]*Event{e}, [][]int64{v.ids})
		b := &pgx.Batch{}
		b.Queue(insertEventSQL, args...)
		b.Queue(fanOutFilteredSQL, fp, fx, fs)
		br := conn.SendBatch(ctx, b)
		tag, err := br.Exec()
		if err == nil {
			_, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return tag, err
	}
	var tag pgconn.CommandTag
	for try := 1; ; try++ {
		tag, err = insert(e.StoreJSON)
		if err != nil && e.StoreJSON && refusedData(err) && !filtersChanged(err) && ctx.Err() == nil {
			// The copy is never worth a webhook: should PostgreSQL refuse a
			// body JSONCopyable let through (invalid or too large for jsonb,
			// classes 22 and 54), store it with payload NULL.
			tag, err = insert(false)
		}
		if !filtersChanged(err) || try == maxFilterTries {
			break
		}
		s.filters.changed()
		if v, err = s.filters.match(ctx, e); err != nil {
			return false, fmt.Errorf("insert %s event %s: %w", e.Provider, logvalue.Text(e.ExternalID), err)
		}
	}
	if late := answeredLate(ctx, err); late != nil {
		// store_timeout (or shutdown's cut) passed before PostgreSQL
		// answered: outcome unknown, whatever the answer.
		return false, fmt.Errorf("insert %s event %s: %w", e.Provider, logvalue.Text(e.ExternalID), late)
	}
	if err != nil {
		return false, fmt.Errorf("insert %s event %s: %w", e.Provider, logvalue.Text(e.ExternalID), unstorable(err))
	}
	// Committed, stored or a duplicate: the verdicts that applied.
	s.filters.count(v)
	stored := tag.RowsAffected() == 1
	if stored && s.hinter != nil {
		s.hinter.Hint()
	}
	return stored, nil
}

// occurredAt is NULL for the zero time.
func occurredAt(e *Event) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: e.OccurredAt, Valid: !e.OccurredAt.IsZero()}
}

// secretIndex is NULL for an unverified event: no secret matched.
func secretIndex(e *Event) *int16 {
	if !e.Verified {
		return nil
	}
	i := int16(e.SecretIndex) //nolint:gosec // G115: the index of the source's secret that matched; a source has a handful
	return &i
}
