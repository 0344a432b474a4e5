package backfill

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Derive says how one source's derived columns are made from stored bytes:
// as ingress makes them now (verify.NewOccurredAt, sources.Source.JSONCopy).
type Derive struct {
	OccurredAt        verify.OccurredAt
	StoreJSON         bool
	StoreJSONMaxBytes int
}

// StoredConfig configures [FillStored].
type StoredConfig struct {
	// Sources maps a source name (events.provider) to how its columns are
	// derived. A source not in it (no longer configured) is derived from its
	// stored scheme's defaults, unless OnlyConfigured.
	Sources map[string]Derive
	// OnlyConfigured leaves the events of a source not in Sources as they
	// are, counted in StoredStats.Skipped, instead of deriving them from
	// their scheme's defaults: those may keep a JSON copy the source's
	// configuration did not (store_json: false), and a filled value is never
	// taken back (inlet backfill stored sets it: review helper-240).
	OnlyConfigured bool
	// BatchSize is how many events each transaction fills. Defaults to 1000.
	BatchSize int
	// Restart ignores the saved progress and starts from the oldest event.
	Restart bool
	// Progress is called after each committed batch.
	Progress func(StoredStats)
}

// StoredStats counts a FillStored run.
type StoredStats struct {
	LastID, UntilID int64 // filled through LastID, of events up to UntilID
	Read            int64 // events read
	Occurred        int64 // given an occurred_at
	Payloads        int64 // given a payload
	// Skipped counts the events left unfilled (occurred_at or payload
	// NULL) because their source is not in StoredConfig.Sources
	// (OnlyConfigured), and SkippedSources names those sources, sorted.
	Skipped        int64
	SkippedSources []string
}

const storedName = "occurred_at,payload"

// FillStored fills occurred_at and payload of events stored before
// 012_occurred_at_payload (or before their source kept a payload) from their
// stored headers and bytes, oldest first, BatchSize events per transaction.
// Each transaction also records how far it got in
// webhook_ingress.derived_backfill, so a run that stops (Ctrl-C, a lost
// connection) resumes there when run again. It covers the events that
// existed when the first run began (newer ones ingress filled itself).
// Run as the schema owner: events_guard lets only this update through,
// only from NULL, and only with payload equal to the parsed raw_body.
func FillStored(ctx context.Context, conn *pgx.Conn, cfg StoredConfig) (StoredStats, error) {
	batch := cfg.BatchSize
	if batch <= 0 {
		batch = 1000
	}
	var st StoredStats
	err := conn.QueryRow(ctx, `SELECT last_event_id, until_id FROM webhook_ingress.derived_backfill WHERE name = $1`, storedName).
		Scan(&st.LastID, &st.UntilID)
	if err == pgx.ErrNoRows || cfg.Restart || (err == nil && st.LastID >= st.UntilID) {
		st.LastID = 0
		// The newest id, and the transactions inserting events at that
		// moment (the audit sealer's probe, AuditSealProbe): one of them may hold a
		// smaller id it has not committed (a group-commit batch of an
		// ingress still running the version before 012). The walk starts
		// once they have ended, or it passes over their rows for good
		// (review helper-84).
		probe, err := queries.New(conn).AuditSealProbe(ctx)
		if err != nil {
			return st, fmt.Errorf("read newest event id: %w", err)
		}
		st.UntilID = probe.MaxID
		if err := awaitWriters(ctx, conn, probe.Writers); err != nil {
			return st, err
		}
	} else if err != nil {
		return st, fmt.Errorf("read backfill progress: %w", err)
	}
	derives := map[string]Derive{}
	derive := func(provider, scheme string) Derive {
		if d, ok := cfg.Sources[provider]; ok {
			return d
		}
		d, ok := derives[scheme]
		if !ok {
			d = Derive{OccurredAt: verify.NewOccurredAt(verify.Config{Type: scheme}), StoreJSON: scheme != "twilio", StoreJSONMaxBytes: 256 << 10}
			derives[scheme] = d
		}
		return d
	}
	for st.LastID < st.UntilID {
		rows, err := conn.Query(ctx, `SELECT id, received_at, provider, scheme, headers, raw_body, occurred_at IS NULL, payload IS NULL
			FROM webhook_ingress.events WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3`, st.LastID, st.UntilID, batch)
		if err != nil {
			return st, fmt.Errorf("read events after %d: %w", st.LastID, err)
		}
		var ids []int64
		var received []pgtype.Timestamptz
		var occurred []pgtype.Timestamptz
		var fill []bool
		last := st.LastID
		for rows.Next() {
			var id int64
			var recv pgtype.Timestamptz
			var provider, scheme string
			var headers map[string][]string
			var body []byte
			var noOcc, noPayload bool
			if err := rows.Scan(&id, &recv, &provider, &scheme, &headers, &body, &noOcc, &noPayload); err != nil {
				rows.Close()
				return st, err
			}
			last = id
			st.Read++
			if _, ok := cfg.Sources[provider]; !ok && cfg.OnlyConfigured {
				if noOcc || noPayload {
					st.Skipped++
					if i, found := slices.BinarySearch(st.SkippedSources, provider); !found {
						st.SkippedSources = slices.Insert(st.SkippedSources, i, provider)
					}
				}
				continue
			}
			d := derive(provider, scheme)
			var occ pgtype.Timestamptz
			if noOcc && d.OccurredAt != nil {
				if t := d.OccurredAt(http.Header(headers), body); !t.IsZero() {
					occ = pgtype.Timestamptz{Time: t, Valid: true}
				}
			}
			json := noPayload && d.StoreJSON && ingress.JSONCopyable(body, d.StoreJSONMaxBytes)
			if occ.Valid || json {
				ids, received, occurred, fill = append(ids, id), append(received, recv), append(occurred, occ), append(fill, json)
				if occ.Valid {
					st.Occurred++
				}
				if json {
					st.Payloads++
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return st, err
		}
		if last == st.LastID { // events gone (retention) past here
			last = st.UntilID
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL webhook_ingress.backfill = 'derived'`); err != nil {
				return err
			}
			if len(ids) > 0 {
				if _, err := tx.Exec(ctx, `UPDATE webhook_ingress.events e
					SET occurred_at = coalesce(e.occurred_at, u.occurred_at),
					    payload = coalesce(e.payload, CASE WHEN u.fill THEN convert_from(e.raw_body, 'UTF8')::jsonb END)
					FROM unnest($1::bigint[], $2::timestamptz[], $3::timestamptz[], $4::boolean[]) AS u(id, received_at, occurred_at, fill)
					WHERE e.id = u.id AND e.received_at = u.received_at`, ids, received, occurred, fill); err != nil {
					return fmt.Errorf("fill events %d..%d: %w", ids[0], ids[len(ids)-1], err)
				}
			}
			_, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.derived_backfill (name, last_event_id, until_id) VALUES ($1, $2, $3)
				ON CONFLICT (name) DO UPDATE SET last_event_id = $2, until_id = $3, updated_at = now()`, storedName, last, st.UntilID)
			return err
		})
		if err != nil {
			return st, err
		}
		st.LastID = last
		if cfg.Progress != nil {
			cfg.Progress(st)
		}
	}
	return st, nil
}

// awaitWritersFor bounds awaitWriters: a transaction that inserted into
// events and stays open (a session idle in transaction) would hold the
// backfill forever.
const awaitWritersFor = 2 * time.Minute

// awaitWriters waits until none of the transactions writers (virtual
// transaction ids) is still running, for at most awaitWritersFor.
func awaitWriters(ctx context.Context, conn *pgx.Conn, writers []string) error {
	deadline := time.Now().Add(awaitWritersFor)
	for len(writers) > 0 {
		var running int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'virtualxid' AND virtualxid = ANY($1::text[])`,
			writers).Scan(&running); err != nil {
			return fmt.Errorf("wait for inserts in flight: %w", err)
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d transactions inserting into events when the backfill began are still open after %s (see pg_stat_activity; a session idle in transaction?): run again once they have ended", running, awaitWritersFor)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for inserts in flight: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
