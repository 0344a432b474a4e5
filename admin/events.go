package admin

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/schema/queries"
)

// EventMeta is an event's metadata: everything but its headers and body.
type EventMeta struct {
	ID                int64     `json:"id"`
	Provider          string    `json:"provider"` // the configured source name
	Scheme            string    `json:"scheme"`
	ExternalEventID   string    `json:"external_event_id"`
	EventType         string    `json:"event_type"`
	ReceivedAt        time.Time `json:"received_at"`
	SignatureVerified bool      `json:"signature_verified"`
	SecretIndex       *int16    `json:"secret_index"`
	BodySize          int64     `json:"body_size"`
	BodySHA256        string    `json:"body_sha256"` // hex
	// OccurredAt is when the provider says the event happened; nil when it
	// gives no time (GitHub, Twilio) or the event predates 012 and was not
	// backfilled.
	OccurredAt *time.Time `json:"occurred_at"`
}

// JobState is one handler's job of an event, in a list.
type JobState struct {
	Handler string `json:"handler"`
	Status  string `json:"status"`
}

// EventSummary is one row of [ListEvents].
type EventSummary struct {
	EventMeta
	Jobs []JobState `json:"jobs"`
}

// MaxWhereBytes is the longest [EventFilter].Where, in bytes: ample for a
// predicate a person writes, and far short of the nesting PostgreSQL's
// default max_stack_depth refuses (tens of thousands of steps), a refusal
// that costs it a parse of the whole path first.
const MaxWhereBytes = 4096

// EventFilter selects events. Zero fields do not filter.
type EventFilter struct {
	// Provider is the exact source name (events.provider).
	Provider string
	// EventType is a glob: "invoice.*"; "*" matches any run of characters.
	EventType string
	// Since (inclusive) and Until (exclusive) bound received_at.
	Since, Until time.Time
	// ExternalEventID is the provider's event id, exactly.
	ExternalEventID string
	// OccurredAfter (inclusive) and OccurredBefore (exclusive) bound
	// occurred_at; events without one never match either.
	OccurredAfter, OccurredBefore time.Time
	// Where is a PostgreSQL JSON path predicate over the payload copy
	// ('$.data.object.customer == "cus_123"'), evaluated with @@; events
	// without a payload never match. Bound as a parameter; a path PostgreSQL
	// rejects is ErrInvalid with its message, and so is one longer than
	// MaxWhereBytes.
	Where string
	// Before pages by id alone: only events with a smaller id. 0 starts at
	// the newest. Each page is read in a fresh snapshot, so an event whose id
	// an earlier page passed and that committed later is never shown (ids are
	// drawn before commit, and commits overlap); Cursor pages one snapshot.
	Before int64
	// Cursor is the position of the next page: the previous page's Next, ""
	// for the first. Its pages show only the events the first page's snapshot
	// held, so together they are the log at one moment; an event committed
	// since is seen by listing again. A bare id ("123", what Next was before
	// it carried a snapshot) is Before. Give Cursor or Before, not both; a
	// malformed one is ErrInvalid.
	Cursor string
	// Limit is the page size. Defaults to DefaultLimit, at most MaxLimit.
	Limit int
}

// EventPage is one page of events, newest first.
type EventPage struct {
	Events []EventSummary `json:"events"`
	// NextBefore is the last id of this page, the Before of the next by id
	// alone; 0 when this is the last page.
	NextBefore int64 `json:"-"`
	// Next is the Cursor of the next page, "" when this is the last:
	// "ID@TIME@SNAPSHOT", the id to continue below, when the first page was
	// read (Unix seconds) and its snapshot (PostgreSQL's pg_snapshot text,
	// xmin:xmax:xip,…). Pass it back as it is.
	Next string `json:"next_before,omitempty"`
}

// snapshotSettle is how long before a listing's first page an event stored
// before migration 070 (no inserted_xid) must have been received for its
// pages to take it as visible to that page without judging its xmin:
// received_at is its inserting transaction's now(), and inserts run seconds
// (ingress bounds a batch at 5 s). Older rows may be frozen with the raw
// xmin of an earlier epoch, which cannot be widened to an xid8 exactly. A
// row stored since is judged by its inserted_xid, exactly, whatever its age.
const snapshotSettle = time.Hour

// maxCursorSkew is how far past this host's clock a cursor's time may be:
// it was read from the database server's clock, which may differ, by as
// much as a time zone when one of them is set wrong.
const maxCursorSkew = 24 * time.Hour

// maxCursorBytes bounds an event cursor: its snapshot lists the
// transactions in flight when it was taken (a few, at most one per
// connection).
const maxCursorBytes = 64 << 10

// eventCursor is an EventFilter.Cursor read: the id to continue below and,
// unless it is a bare id, the first page's snapshot and when it was taken.
type eventCursor struct {
	before   int64
	snapshot string // canonical pg_snapshot text; "" for a bare id
	snap     pgSnapshot
	taken    time.Time
}

func (c eventCursor) String() string {
	return strconv.FormatInt(c.before, 10) + "@" + strconv.FormatInt(c.taken.Unix(), 10) + "@" + c.snapshot
}

// CheckEventCursor reports whether s is an EventFilter.Cursor ListEvents
// takes (ErrInvalid when not), for a caller that checks its input before
// it connects.
func CheckEventCursor(s string) error {
	_, err := parseEventCursor(s)
	return err
}

// parseEventCursor reads a cursor of EventPage.Next or a bare id. It is a
// client's input: bound as parameters, never spliced, and refused here
// unless every part is well formed.
func parseEventCursor(s string) (eventCursor, error) {
	if len(s) > maxCursorBytes {
		return eventCursor{}, invalid("before: a cursor of %d bytes, longer than the %d allowed", len(s), maxCursorBytes)
	}
	idText, rest, full := strings.Cut(s, "@")
	id, err := strconv.ParseInt(idText, 10, 64)
	switch {
	case s == "":
		return eventCursor{}, nil
	case err != nil:
		return eventCursor{}, invalid("before: not an event id or a page's cursor (ID@TIME@SNAPSHOT)")
	case id < 0 || full && id == 0:
		return eventCursor{}, invalid("before %d: must be a positive event id", id)
	case !full:
		return eventCursor{before: id}, nil
	}
	timeText, snapText, ok := strings.Cut(rest, "@")
	taken, err := strconv.ParseInt(timeText, 10, 64)
	if !ok || err != nil || taken <= 0 {
		return eventCursor{}, invalid("before: the cursor's time is not Unix seconds (ID@TIME@SNAPSHOT)")
	}
	// The time is when the first page's transaction began, so never
	// later than now (give or take the clocks' skew). A later one is forged
	// or corrupt, and one past PostgreSQL's timestamptz range failed the
	// query in the database: a 500 for a client's bad input (review
	// helper-216).
	if latest := time.Now().Add(maxCursorSkew).Unix(); taken > latest {
		return eventCursor{}, invalid("before: the cursor's time %d is later than now (at most %d); list again from the first page", taken, latest)
	}
	snap, err := parseSnapshot(snapText)
	if err != nil {
		return eventCursor{}, invalid("before: the cursor's snapshot: %v", err)
	}
	return eventCursor{before: id, snapshot: snap.String(), snap: snap, taken: time.Unix(taken, 0).UTC()}, nil
}

// pgSnapshot is PostgreSQL's pg_snapshot: transactions below xmin are
// finished, those from xmax on had not started, and of those between, xip
// were in progress.
type pgSnapshot struct {
	xmin, xmax uint64
	xip        []uint64
}

func (p pgSnapshot) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(p.xmin, 10) + ":" + strconv.FormatUint(p.xmax, 10) + ":")
	for i, x := range p.xip {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(x, 10))
	}
	return b.String()
}

// parseSnapshot reads pg_snapshot text (xmin:xmax:xip,…) as strictly as
// PostgreSQL's input function: 0 < xmin <= xmax, the xip ascending within
// [xmin, xmax). Ids past 2^63 are refused: none is that large, and the
// listing widens xids in bigint.
func parseSnapshot(s string) (pgSnapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return pgSnapshot{}, errors.New("not xmin:xmax:xip,…")
	}
	num := func(t string) (uint64, bool) {
		n, err := strconv.ParseUint(t, 10, 63)
		return n, err == nil && t != "" && t[0] != '+'
	}
	var p pgSnapshot
	var ok1, ok2 bool
	p.xmin, ok1 = num(parts[0])
	p.xmax, ok2 = num(parts[1])
	if !ok1 || !ok2 || p.xmin == 0 || p.xmin > p.xmax {
		return pgSnapshot{}, errors.New("xmin and xmax must be ids, 0 < xmin <= xmax")
	}
	if parts[2] == "" {
		return p, nil
	}
	for _, t := range strings.Split(parts[2], ",") {
		x, ok := num(t)
		if !ok || x < p.xmin || x >= p.xmax || len(p.xip) > 0 && x <= p.xip[len(p.xip)-1] {
			return pgSnapshot{}, errors.New("the transactions in progress must be ascending ids in [xmin, xmax)")
		}
		p.xip = append(p.xip, x)
	}
	return p, nil
}

// ListEvents returns a page of the events matching f, newest first.
func ListEvents(ctx context.Context, db DB, f EventFilter) (EventPage, error) {
	cur, err := parseEventCursor(f.Cursor)
	if err != nil {
		return EventPage{}, err
	}
	if f.Cursor != "" && f.Before != 0 {
		return EventPage{}, invalid("before: give an id or a cursor, not both")
	}
	if f.Cursor == "" {
		cur.before = f.Before
	}
	limit, err := checkPage(f.Limit, cur.before, "event", f.Since, f.Until)
	if err == nil {
		err = checkText("source", f.Provider, "type", f.EventType, "external_id", f.ExternalEventID, "where", f.Where)
	}
	if err == nil && len(f.Where) > MaxWhereBytes {
		// Never the path itself: it may name a customer.
		err = invalid("where: a JSON path of %d bytes, longer than the %d allowed", len(f.Where), MaxWhereBytes)
	}
	if err != nil {
		return EventPage{}, err
	}
	if !f.OccurredAfter.IsZero() && !f.OccurredBefore.IsZero() && !f.OccurredAfter.Before(f.OccurredBefore) {
		return EventPage{}, invalid("occurred_after (%s) must be before occurred_before (%s)",
			f.OccurredAfter.Format(time.RFC3339), f.OccurredBefore.Format(time.RFC3339))
	}
	page := EventPage{Events: []EventSummary{}}
	err = readTx(ctx, db, func(tx pgx.Tx) error {
		where := f.Where
		if where != "" {
			var err error
			if where, err = wherePath(ctx, tx, where); err != nil {
				return err
			}
		}
		// This transaction's snapshot: the first page's, for the cursor, and
		// the xmax every page widens the xmin of a row stored before 070
		// from.
		mine, taken, err := readSnapshot(ctx, tx)
		if err != nil {
			return err
		}
		arg := queries.AdminListEventsParams{
			Provider: f.Provider, EventTypeLike: globLike(f.EventType), Since: nullTime(f.Since), Until: nullTime(f.Until),
			ExternalEventID: f.ExternalEventID, BeforeID: cur.before, PageSize: int64(limit) + 1, // one more: is there a next page?
			OccurredAfter: nullTime(f.OccurredAfter), OccurredBefore: nullTime(f.OccurredBefore), WherePath: where,
			XidBase: int64(mine.xmax), //nolint:gosec // G115: a 64-bit transaction id stays far below 2^63
		}
		if cur.snapshot == "" {
			cur.snapshot, cur.snap, cur.taken = mine.String(), mine, taken
		} else {
			// A snapshot past this one is of another database (a copy
			// restored or promoted behind the one that took it); one 2^31
			// transactions back is past where the 32-bit xmin of a row
			// stored before 070 widens exactly. Either way, list again.
			if cur.snap.xmax > mine.xmax {
				return invalid("before: the cursor's snapshot is not of this database (its xmax %d is past the current %d); list again from the first page",
					cur.snap.xmax, mine.xmax)
			}
			if mine.xmax-cur.snap.xmin > 1<<31 {
				return invalid("before: the cursor is too old (%d transactions since its first page); list again from the first page",
					mine.xmax-cur.snap.xmin)
			}
			settled := cur.taken.Add(-snapshotSettle)
			arg.Snapshot, arg.SettledBefore = cur.snapshot, &settled
		}
		var rows []queries.AdminListEventsRow
		if f.Where != "" {
			var wrows []queries.AdminListEventsWhereRow
			wrows, err = queries.New(tx).AdminListEventsWhere(ctx, queries.AdminListEventsWhereParams{
				Provider: arg.Provider, EventTypeLike: arg.EventTypeLike, Since: arg.Since, Until: arg.Until,
				ExternalEventID: arg.ExternalEventID, BeforeID: arg.BeforeID, PageSize: arg.PageSize,
				OccurredAfter: arg.OccurredAfter, OccurredBefore: arg.OccurredBefore, WherePath: arg.WherePath,
				Snapshot: arg.Snapshot, SettledBefore: arg.SettledBefore, XidBase: arg.XidBase,
			})
			for _, r := range wrows {
				rows = append(rows, queries.AdminListEventsRow(r))
			}
		} else {
			rows, err = queries.New(tx).AdminListEvents(ctx, arg)
		}
		if err != nil && f.Where != "" {
			return badPath(err)
		}
		if err != nil {
			return err
		}
		for _, r := range rows {
			e := EventSummary{EventMeta: EventMeta{ID: r.ID, Provider: r.Provider, Scheme: r.Scheme, ExternalEventID: r.ExternalEventID,
				EventType: r.EventType, ReceivedAt: r.ReceivedAt, SignatureVerified: r.SignatureVerified, SecretIndex: r.SecretIndex,
				BodySize: int64(r.BodySize), BodySHA256: hex.EncodeToString(r.BodySha256), OccurredAt: r.OccurredAt}}
			e.Jobs = make([]JobState, len(r.Handlers))
			for i := range r.Handlers {
				e.Jobs[i] = JobState{Handler: r.Handlers[i], Status: r.Statuses[i]}
			}
			page.Events = append(page.Events, e)
		}
		return nil
	})
	if err != nil {
		return EventPage{}, fmt.Errorf("list events: %w", err)
	}
	if len(page.Events) > limit {
		page.Events = page.Events[:limit]
		page.NextBefore = page.Events[limit-1].ID
		cur.before = page.NextBefore
		page.Next = cur.String()
	}
	return page, nil
}

// readSnapshot returns the snapshot of tx (REPEATABLE READ: the one all its
// statements read in) and when tx began, in whole seconds as a cursor
// carries it.
func readSnapshot(ctx context.Context, tx pgx.Tx) (pgSnapshot, time.Time, error) {
	r, err := queries.New(tx).AdminSnapshot(ctx)
	if err != nil {
		return pgSnapshot{}, time.Time{}, fmt.Errorf("read the snapshot: %w", err)
	}
	snap, err := parseSnapshot(r.Snapshot)
	if err != nil {
		return pgSnapshot{}, time.Time{}, fmt.Errorf("read the snapshot %q: %w", r.Snapshot, err)
	}
	return snap, r.TakenAt.Truncate(time.Second), nil
}

// Job is one (event, handler) job with its attempt history.
type Job struct {
	ID             int64      `json:"id"`
	EventID        int64      `json:"event_id"`
	Handler        string     `json:"handler"`
	Provider       string     `json:"provider"`
	EventType      string     `json:"event_type"`
	Status         string     `json:"status"`
	AttemptCount   int        `json:"attempt_count"`
	MaxAttempts    int        `json:"max_attempts"`
	NextAttemptAt  time.Time  `json:"next_attempt_at"`
	LeaseHolderID  *string    `json:"lease_holder_id"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
	AttemptedAt    *time.Time `json:"attempted_at"`
	WorkerID       *string    `json:"worker_id"`
	LastError      *string    `json:"last_error"`
	LastErrorClass *string    `json:"last_error_class"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	CompletedAt    *time.Time `json:"completed_at"`
	// Replays is how many times the job was replayed: its replay markers
	// in Attempts. With its status, the version ReplayRequest.ExpectReplays
	// checks (a completed job replayed and completed again is completed
	// still, with one replay more).
	Replays  int       `json:"replays"`
	Attempts []Attempt `json:"attempts"`
}

// Attempt is one row of the view webhook_ingress.attempts: a finished
// attempt, or a replay marker (Outcome "replayed"). A failed, expired or
// archived attempt is a job_attempts row; a job's current successful attempt
// (Outcome "completed") is its job row's: the attempt number, the consumer
// that completed it (WorkerID), when its lease was taken (StartedAt) and
// when it completed (FinishedAt). WorkerID is nil for an expired lease whose
// consumer never reported.
//
// A replay resets the job's attempt count, so a replayed job's history holds
// several attempts of the same number, one per run. Run tells them apart:
// the job's first run is 1, and each replay marker starts the next run. A
// history that opens with a marker of attempt 0 (a job created from the log,
// or re-queued before any attempt) starts run 1 there. The marker's Attempt
// is the count the run before it reached.
type Attempt struct {
	ID         int64     `json:"id"`
	Run        int       `json:"run"`
	Attempt    int       `json:"attempt"`
	WorkerID   *string   `json:"worker_id"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	Outcome    string    `json:"outcome"`
	ErrorClass *string   `json:"error_class"`
	Error      *string   `json:"error"`
	DurationMS float64   `json:"duration_ms"`
}

// EventDetail is one event whole: [GetEvent].
type EventDetail struct {
	EventMeta
	// Headers as received ({"Canonical-Name": ["value", ...]}).
	Headers map[string][]string `json:"headers"`
	// RequestURI is the path and query as received.
	RequestURI string `json:"request_uri"`
	// RawBody is the exact stored bytes (base64 in JSON).
	RawBody []byte `json:"raw_body"`
	// HasPayload says whether the parsed copy (events.payload) is kept.
	HasPayload bool `json:"has_payload"`
	// Jobs are the event's jobs, one per handler, each with its attempts.
	Jobs []Job `json:"jobs"`
}

// GetEvent returns event id with its headers, body, jobs and attempts.
func GetEvent(ctx context.Context, db DB, id int64) (EventDetail, error) {
	var e EventDetail
	err := readTx(ctx, db, func(tx pgx.Tx) error {
		q := queries.New(tx)
		r, err := q.AdminGetEvent(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("no such event")
		}
		if err != nil {
			return err
		}
		e.EventMeta = EventMeta{ID: r.ID, Provider: r.Provider, Scheme: r.Scheme, ExternalEventID: r.ExternalEventID,
			EventType: r.EventType, ReceivedAt: r.ReceivedAt, SignatureVerified: r.SignatureVerified, SecretIndex: r.SecretIndex,
			BodySize: int64(r.BodySize), BodySHA256: hex.EncodeToString(r.BodySha256), OccurredAt: r.OccurredAt}
		if err := json.Unmarshal(r.Headers, &e.Headers); err != nil {
			return fmt.Errorf("headers of event %d: %w", id, err)
		}
		e.RequestURI, e.RawBody, e.HasPayload = r.RequestUri, r.RawBody, r.HasPayload
		if e.RawBody == nil {
			e.RawBody = []byte{}
		}
		jobs, err := q.AdminEventJobs(ctx, id)
		if err != nil {
			return err
		}
		e.Jobs = make([]Job, len(jobs))
		for i, j := range jobs {
			e.Jobs[i] = jobOf(j)
		}
		return attachAttempts(ctx, tx, e.Jobs)
	})
	if err != nil {
		return EventDetail{}, fmt.Errorf("show event %d: %w", id, err)
	}
	return e, nil
}

// jobOf is the Job of a job row of AdminEventJobs (AdminGetJob's first
// columns are the same), its attempts still to attach.
func jobOf(r queries.AdminEventJobsRow) Job {
	return Job{ID: r.ID, EventID: r.EventID, Handler: r.Handler, Provider: r.Provider, EventType: r.EventType, Status: r.Status,
		AttemptCount: int(r.AttemptCount), MaxAttempts: int(r.MaxAttempts), NextAttemptAt: r.NextAttemptAt,
		LeaseHolderID: r.LeaseHolderID, LeaseExpiresAt: r.LeaseExpiresAt, AttemptedAt: r.AttemptedAt, WorkerID: r.WorkerID,
		LastError: r.LastError, LastErrorClass: r.LastErrorClass, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		CompletedAt: r.CompletedAt, Attempts: []Attempt{}}
}

// attachAttempts fills in each job's attempt history.
func attachAttempts(ctx context.Context, tx pgx.Tx, jobs []Job) error {
	if len(jobs) == 0 {
		return nil
	}
	ids := make([]int64, len(jobs))
	byID := make(map[int64]*Job, len(jobs))
	for i := range jobs {
		ids[i] = jobs[i].ID
		byID[jobs[i].ID] = &jobs[i]
	}
	rows, err := queries.New(tx).AdminJobAttempts(ctx, ids)
	if err != nil {
		return err
	}
	runs := make(map[int64]int, len(jobs)) // each job's current run; rows come in order
	for _, r := range rows {
		if j := byID[r.JobID]; j != nil {
			switch {
			case r.Outcome == "replayed" && runs[r.JobID] == 0 && r.Attempt == 0:
				runs[r.JobID] = 1 // created by a replay, or re-queued before any attempt
			case r.Outcome == "replayed":
				runs[r.JobID] = max(runs[r.JobID], 1) + 1
			case runs[r.JobID] == 0:
				runs[r.JobID] = 1
			}
			if r.Outcome == "replayed" {
				j.Replays++
			}
			j.Attempts = append(j.Attempts, Attempt{ID: r.ID, Run: runs[r.JobID], Attempt: int(r.Attempt), WorkerID: r.WorkerID, StartedAt: r.StartedAt,
				FinishedAt: r.FinishedAt, Outcome: r.Outcome, ErrorClass: r.ErrorClass, Error: r.Error, DurationMS: r.DurationMs})
		}
	}
	return nil
}

// wherePath is the JSON path ListEvents evaluates with @@ for path. A
// predicate ('$.a == 1', 'exists(…)') is path itself. A path that selects
// values instead ('$.livemode', '$.data.object ? (@.customer == "x")') made
// @@ answer NULL, not a match, for any value but a boolean: it matches an
// event when it selects something other than false or null (a boolean it
// selects is the answer; anything else, as @? would). PostgreSQL tells the
// two apart: over an empty document a predicate always gives one item, true,
// false or null; a path that selects values gives none, or a value.
func wherePath(ctx context.Context, tx pgx.Tx, path string) (string, error) {
	// The path as PostgreSQL prints it: comments gone, the mode (strict
	// only; lax is the default) first.
	var first []byte
	var norm string
	err := tx.QueryRow(ctx, `SELECT pg_catalog.jsonb_path_query_first('{}'::jsonb, $1::jsonpath, '{}'::jsonb, true)::text, $1::jsonpath::text`,
		path).Scan(&first, &norm)
	if err != nil {
		return "", badPath(err)
	}
	if f := string(first); f == "true" || f == "false" || f == "null" {
		return path, nil
	}
	mode, rest := "", norm
	if m := pathMode.FindStringSubmatch(norm); m != nil {
		mode, rest = strings.ToLower(m[1])+" ", m[2]
	}
	return mode + `exists((` + rest + `) ? (@ == true || (@.type() != "boolean" && @.type() != "null")))`, nil
}

// pathMode splits a JSON path's leading mode (lax or strict, in any case,
// ended by whitespace or by what cannot continue a word, as PostgreSQL's
// lexer ends it) from the rest.
var pathMode = regexp.MustCompile(`(?is)^\s*(lax|strict)\b\s*(.*)$`)

// checkText refuses a text parameter (name, value pairs) that PostgreSQL
// cannot store: a NUL byte or bytes that are not UTF-8 (a query string's
// %00 or %ff). Asked of the database, it was a 500 quoting its error.
func checkText(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if v := pairs[i+1]; !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return invalid("%s: not text PostgreSQL can store (a NUL byte or invalid UTF-8)", pairs[i])
		}
	}
	return nil
}

// badPath turns PostgreSQL's refusal of a --where JSON path (a syntax error
// in the jsonpath input, a path its evaluation rejects, or one past its
// program limits) into ErrInvalid with PostgreSQL's own message.
func badPath(err error) error {
	var pgErr *pgconn.PgError
	// 42704: a variable ($x) the list cannot pass. Class 54: a path within
	// MaxWhereBytes nested past the server's max_stack_depth (54001) or
	// another program limit: the same path fails the same way again, so it
	// is the request's fault, not a 500.
	if errors.As(err, &pgErr) && (pgErr.Code == "42601" || pgErr.Code == "42704" ||
		strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "54")) {
		return invalid("where: PostgreSQL rejects the JSON path: %s", pgErr.Message)
	}
	return err
}
