package streamer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Publication is the publication the replication wake source follows:
// webhook_ingress.jobs, inserts and updates. It is per database; the streamer
// creates it when its replication role may (the owner of the jobs table or a
// superuser), otherwise Start fails naming the statement to run (schema
// query CreateJobsPublication).
const Publication = "inlet_jobs"

// DefaultSlotName is Config.SlotName's default. A slot has one reader: every
// streamer replica that uses replication needs its own, stable name.
const DefaultSlotName = "inlet_streamer"

// Postgres's own rule for slot names, and it keeps the name safe to inline in
// replication commands, which take no parameters.
var slotNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

var (
	jobsPublicationSQL       = schema.Query("JobsPublication")
	createJobsPublicationSQL = schema.Query("CreateJobsPublication")
)

// ErrReplicationSetup means the replication wake source cannot work as
// configured (missing publication, role without REPLICATION, wal_level not
// logical, a connection without replication=database, …); its text says what
// to change. Start returns it; retrying does not help until that is fixed.
var ErrReplicationSetup = errors.New("streamer: replication wake source is not set up")

// ConnectReplication opens a logical replication connection to the database
// at url (it adds replication=database). Its role needs the REPLICATION
// attribute; pg_hba.conf matches it by database name, like any connection.
// It suits Config.ReplicationConnect:
//
//	cfg.ReplicationConnect = func(ctx context.Context) (*pgconn.PgConn, error) {
//		return streamer.ConnectReplication(ctx, url)
//	}
func ConnectReplication(ctx context.Context, url string) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		// pgx's message may quote the URL, password included (a key=value
		// string with spaces around '=' is not masked).
		return nil, errors.New("replication connection URL is not a valid PostgreSQL connection string")
	}
	// A service's URL sets its pool's size (pool_max_conns): the server
	// refuses a connection that sends it.
	database.DropClientParams(cfg.RuntimeParams)
	cfg.RuntimeParams["replication"] = "database"
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "inlet-streamer-replication"
	}
	return pgconn.ConnectConfig(ctx, cfg)
}

const (
	replicationMinBackoff = 100 * time.Millisecond
	replicationMaxBackoff = 10 * time.Second
	// How often the processed position is confirmed while it moves, and how
	// often a status is sent anyway (well inside wal_sender_timeout, 60s by
	// default).
	statusInterval     = time.Second
	idleStatusInterval = 10 * time.Second
	// A transaction reaches the stream once its commit record is flushed,
	// which can be a moment before its rows are visible to other sessions
	// (seen in this package's tests, under -race: a claim right on the
	// wake-up missed the row a few times in a thousand), and longer with a
	// synchronous standby, which the commit waits for in between. Trailing
	// wake-ups after the last relevant commit catch what a too-early claim
	// missed; the last, a second on, for a committing backend the machine
	// did not run for longer (seen once in a full test run on a saturated
	// 2-core machine, with polling off: the job waited for the poll).
	recheckSoon  = 10 * time.Millisecond
	recheckLater = 100 * time.Millisecond
	recheckLast  = time.Second
	// How long Start waits for the first stream to open.
	setupTimeout = 15 * time.Second
	// How often a stream that is up checks the publication still publishes
	// what it needs (a catalog query on the pool), and how long that query
	// may hold up the stream.
	publicationCheckInterval = 30 * time.Second
	publicationCheckTimeout  = 2 * time.Second
	// A stream that has heard nothing from the server for its receive
	// timeout is dead (a network cut that left the socket open: the
	// walsender ended at its wal_sender_timeout, the client's reads just
	// time out): it ends, and run reconnects. After askAfter of silence a
	// status asks the server for a reply (its keepalive). A walsender busy
	// decoding a large transaction reads replies only every half
	// wal_sender_timeout, so the timeout is askAfter + wal_sender_timeout
	// (read from the server when the stream opens) + a margin, at least
	// minReceiveTimeout (PostgreSQL's own wal_receiver_timeout, 60s); with
	// wal_sender_timeout 0 (off) it is maxReceiveTimeout.
	askAfter          = 30 * time.Second
	minReceiveTimeout = 60 * time.Second
	maxReceiveTimeout = 10 * time.Minute
)

// receiveTimeout is how long a stream may hear nothing from a server whose
// wal_sender_timeout is senderTimeout (0: off) before it ends.
func receiveTimeout(senderTimeout time.Duration) time.Duration {
	if senderTimeout <= 0 {
		return maxReceiveTimeout
	}
	return min(max(askAfter+senderTimeout+10*time.Second, minReceiveTimeout), maxReceiveTimeout)
}

// senderTimeout reads the server's wal_sender_timeout on a replication
// connection (SHOW is a replication command): 0 when it is off, and the
// PostgreSQL default of 60s when it cannot be read.
func senderTimeout(ctx context.Context, conn *pgconn.PgConn) time.Duration {
	v, err := show(ctx, conn, "wal_sender_timeout")
	if err != nil {
		return time.Minute
	}
	d, ok := parsePGDuration(v)
	if !ok {
		return time.Minute
	}
	return d
}

// parsePGDuration reads a time setting as SHOW prints it ("60s", "1min",
// "500ms", "0", "2h", "1d"; a bare number is milliseconds).
func parsePGDuration(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	i := strings.IndexFunc(v, func(c rune) bool { return c < '0' || c > '9' })
	num, unit := v, ""
	if i >= 0 {
		num, unit = v[:i], strings.TrimSpace(v[i:])
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > 1<<31 {
		return 0, false
	}
	units := map[string]time.Duration{"": time.Millisecond, "ms": time.Millisecond, "s": time.Second, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}
	u, ok := units[unit]
	if !ok {
		return 0, false
	}
	return time.Duration(n) * u, true
}

// publicationName finds the publication's name as a whole word in a
// server's message, whatever its language and quotes (review helper-159:
// a German or French server's "Publikation »inlet_jobs«" was missed).
var publicationName = regexp.MustCompile(`(^|[^A-Za-z0-9_$])` + Publication + `($|[^A-Za-z0-9_$])`)

// Replication follows logical replication of webhook_ingress.jobs (pgoutput,
// publication inlet_jobs) and wakes the claim loop on every committed
// transaction that inserted a job, or updated one to pending (reaper, replay,
// a publish failure's give-back). Updates to failed are not wake-ups: their
// retry is due later, and the poll tick notices it. It confirms the positions
// it has processed, so a restarted streamer resumes at its slot's confirmed
// position; it reconnects with exponential backoff while the poll tick covers
// the gap.
type Replication struct {
	connect func(ctx context.Context) (*pgconn.PgConn, error)
	slot    string
	logger  *slog.Logger
	// pool (Config.Pool) re-checks the publication while a stream is up: the
	// replication connection is busy streaming.
	pool *pgxpool.Pool
	// wake is a counted wake-up (a relevant commit), nudge an uncounted one
	// (a trailing recheck, a fresh connection).
	wake, nudge func()

	prepared *pgconn.PgConn // opened by Start, handed to run
	// receiveTimeout is the stream's (see receiveTimeout()), set by open
	// from the server's wal_sender_timeout.
	receiveTimeout atomic.Int64

	mu         sync.Mutex
	connected  bool
	reconnects int
	// streamed is set once a stream opened: a slot created after that
	// replaces one that vanished.
	streamed  bool
	confirmed atomic.Uint64
	// publicationGone is set when the stream failed because the
	// publication did not exist as of the WAL it decoded: the slot can never
	// get past that point, so the next open that finds the publication
	// drops the slot (dropIfUnusable).
	publicationGone atomic.Bool
	// appName is the stream's application_name, read at open: the
	// re-check ends a stream synchronous_standby_names comes to match
	// (syncstandby.go).
	appName atomic.Pointer[string]
}

func newReplication(cfg Config, wake, nudge func()) *Replication {
	return &Replication{connect: cfg.ReplicationConnect, slot: cfg.SlotName, logger: cfg.Logger, pool: cfg.Pool, wake: wake, nudge: nudge}
}

// Slot is the replication slot's name.
func (r *Replication) Slot() string { return r.slot }

// Connected reports whether the replication stream is up, and how many times
// it has connected after the first.
func (r *Replication) Connected() (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.connected, r.reconnects
}

// Confirmed is the last WAL position this streamer reported to the server as
// processed ("0/0" before the first).
func (r *Replication) Confirmed() string { return pglogrepl.LSN(r.confirmed.Load()).String() }

// prepare opens the first stream for Start. A setup error is returned: the
// streamer should not start on a configuration that cannot work. Anything
// else (Postgres unreachable, the slot still held by a dying predecessor) is
// logged, and run keeps trying while the poll tick covers.
func (r *Replication) prepare(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	conn, err := r.open(ctx)
	if errors.Is(err, ErrReplicationSetup) {
		return err
	}
	if err != nil {
		r.logger.Warn("replication stream not open yet; polling covers until it is",
			slog.String("slot", r.slot), slog.String("error", err.Error()))
		return nil
	}
	r.prepared = conn
	return nil
}

// run streams until ctx is done, reconnecting with exponential backoff.
func (r *Replication) run(ctx context.Context) {
	conn := r.prepared
	r.prepared = nil
	delay := replicationMinBackoff
	first := true
	for attempt := 1; ctx.Err() == nil; attempt++ {
		var err error
		if conn == nil {
			conn, err = r.open(ctx)
			if err == nil {
				// Jobs committed before this open may be in no stream and
				// unseen by Start's claim: the slot keeps what came while
				// it was down, but nothing from before it was created (a
				// first deployment, a promoted standby, a drop), and a
				// first stream Start could not open is created after
				// Start's claim. One claim covers both. Only the stream
				// prepare opened, before Start's claim, skips it (review
				// helper-193).
				r.nudge()
			}
		}
		if err == nil {
			var lasted bool
			lasted, err = r.stream(ctx, conn, first)
			conn = nil
			first = false
			if ctx.Err() != nil {
				return
			}
			// It was up: start the backoff afresh. Not after a stream that
			// died at once (a decoding error on the first change, a
			// watchdog killing walsenders): that is a failed attempt, or a
			// persistent fault would reconnect ten times a second.
			if lasted {
				delay, attempt = replicationMinBackoff, 1
			}
		}
		if ctx.Err() != nil {
			return
		}
		wait := delay/2 + rand.N(delay/2+1) //nolint:gosec // G404: reconnect jitter, not a secret
		level := slog.LevelWarn
		if errors.Is(err, ErrReplicationSetup) {
			level = slog.LevelError
		}
		r.logger.Log(ctx, level, "replication stream lost; polling covers the gap until it is back",
			slog.String("slot", r.slot), slog.Int("attempt", attempt), slog.Duration("retry_in", wait),
			slog.String("error", errText(err)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		delay = min(delay*2, replicationMaxBackoff)
	}
}

// open connects, makes sure the publication and the slot exist, and starts
// streaming from the slot's confirmed position.
func (r *Replication) open(ctx context.Context) (_ *pgconn.PgConn, err error) {
	conn, err := r.connect(ctx)
	if err != nil {
		return nil, explain(fmt.Errorf("connect for replication: %w", err))
	}
	defer func() {
		if err != nil {
			closeConn(conn)
		}
	}()
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return nil, explain(fmt.Errorf("identify system (is replication=database in the connection string?): %w", err))
	}
	if sys.DBName == "" {
		return nil, fmt.Errorf("%w: the replication connection must be a logical one, to the Inlet database: set replication=database, not replication=true",
			ErrReplicationSetup)
	}
	app, err := checkSyncStandby(ctx, conn)
	if err != nil {
		return nil, err
	}
	r.appName.Store(&app)
	r.receiveTimeout.Store(int64(receiveTimeout(senderTimeout(ctx, conn))))
	if err := ensurePublication(ctx, conn); err != nil {
		return nil, err
	}
	dropped, err := r.dropIfUnusable(ctx, conn)
	if err != nil {
		return nil, err
	}
	if err := r.ensureSlot(ctx, conn, dropped); err != nil {
		return nil, err
	}
	err = pglogrepl.StartReplication(ctx, conn, r.slot, 0, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", "publication_names '" + Publication + "'"},
	})
	if err != nil {
		if r.noticePublicationGone(err) {
			return nil, fmt.Errorf("start replication from slot %q: %w", r.slot, err)
		}
		return nil, explain(fmt.Errorf("start replication from slot %q: %w", r.slot, err))
	}
	return conn, nil
}

// dropIfUnusable drops the slot when it can never stream again; it is only
// a wake source, so ensureSlot then makes it afresh, polling covered the
// gap, and the claim after reconnecting finds what was committed meanwhile.
// It reports whether it dropped the slot. Two cases:
//   - max_slot_wal_keep_size invalidated it (a streamer down longer than the
//     cap allows; pg_replication_slots.wal_status 'lost').
//   - The stream failed with "publication inlet_jobs does not exist" and the
//     publication exists now (ensurePublication ran first): it was dropped
//     and created again while a streamer ran. pgoutput looks the publication
//     up as of the WAL it decodes, so resuming from the slot's position,
//     before the drop, fails there on every reconnect.
//
// A replication connection takes simple queries only; slot names are
// [a-z0-9_] (New).
func (r *Replication) dropIfUnusable(ctx context.Context, conn *pgconn.PgConn) (bool, error) {
	if r.publicationGone.Load() {
		r.logger.Warn("replication stream failed because publication "+Publication+" did not exist as of the WAL it decoded (dropped and created again while streaming): the slot cannot get past that point, so it is dropped and created afresh; polling covered the gap and a claim now finds what was committed meanwhile",
			slog.String("slot", r.slot))
		err := pglogrepl.DropReplicationSlot(ctx, conn, r.slot, pglogrepl.DropReplicationSlotOptions{})
		var pgErr *pgconn.PgError
		if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42704") { // undefined_object: gone already
			return false, explain(fmt.Errorf("drop replication slot %q stuck before publication %s existed: %w", r.slot, Publication, err))
		}
		r.publicationGone.Store(false)
		return true, nil
	}
	// Only this database's: a slot of that name elsewhere is not this
	// stream's to drop (creating or starting it here then fails, saying so).
	results, err := conn.Exec(ctx, "SELECT wal_status FROM pg_catalog.pg_replication_slots WHERE slot_name = '"+
		strings.ReplaceAll(r.slot, "'", "''")+"' AND database = pg_catalog.current_database()").ReadAll()
	if err != nil {
		return false, explain(fmt.Errorf("look up replication slot %q: %w", r.slot, err))
	}
	if len(results) != 1 || len(results[0].Rows) != 1 || string(results[0].Rows[0][0]) != "lost" {
		return false, nil
	}
	r.logger.Warn("replication slot was invalidated (wal_status lost: max_slot_wal_keep_size passed while no streamer read it): dropped and created afresh; polling covered the gap",
		slog.String("slot", r.slot))
	err = pglogrepl.DropReplicationSlot(ctx, conn, r.slot, pglogrepl.DropReplicationSlotOptions{})
	var pgErr *pgconn.PgError
	if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42704") { // undefined_object: another replica dropped it first
		return false, explain(fmt.Errorf("drop invalidated replication slot %q: %w", r.slot, err))
	}
	return true, nil
}

// noticePublicationGone reports whether err is the stream's "publication
// inlet_jobs does not exist" (SQLSTATE 42704, undefined_object) and, if so,
// has the next open drop the slot once the publication exists.
func (r *Replication) noticePublicationGone(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42704" || !publicationName.MatchString(pgErr.Message) {
		return false
	}
	r.publicationGone.Store(true)
	return true
}

// ensurePublication checks the publication, creating it when it is missing.
// Replicas starting together may all find it missing: the one whose CREATE
// loses the race gets duplicate_object, or a unique violation on the
// catalog's name index when both inserted at once, and then checks what the
// winner created.
func ensurePublication(ctx context.Context, conn *pgconn.PgConn) error {
	for try := 0; ; try++ {
		exists, err := checkPublication(ctx, conn)
		if err != nil || exists {
			return err
		}
		publicationMissing()
		_, err = conn.Exec(ctx, createJobsPublicationSQL).ReadAll()
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			return nil
		case try == 0 && errors.As(err, &pgErr) && (pgErr.Code == "42710" || // duplicate_object
			pgErr.Code == "23505" && pgErr.ConstraintName == "pg_publication_pubname_index"):
			continue // another replica was quicker: check what it created
		case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege
			return fmt.Errorf("%w: publication %s is missing and the replication role may not create it; as the owner of webhook_ingress.jobs run: %s: %w",
				ErrReplicationSetup, Publication, statement(createJobsPublicationSQL), err)
		default:
			return explain(fmt.Errorf("create publication %s: %w", Publication, err))
		}
	}
}

// publicationMissing runs between finding the publication missing and
// creating it: a test holds every replica there to make their race certain.
var publicationMissing = func() {}

// checkPublication reports whether the publication exists, and an error when
// it exists without publishing what the wake-ups need.
func checkPublication(ctx context.Context, conn *pgconn.PgConn) (bool, error) {
	results, err := conn.Exec(ctx, jobsPublicationSQL).ReadAll()
	if err != nil {
		return false, explain(fmt.Errorf("look up publication %s: %w", Publication, err))
	}
	if len(results) != 1 {
		return false, fmt.Errorf("look up publication %s: %d results, want 1", Publication, len(results))
	}
	rows := results[0].Rows
	if len(rows) != 1 {
		return false, nil
	}
	return true, publicationProblem(string(rows[0][0]) == "t", string(rows[0][2]) == "t")
}

// publicationProblem is the ErrReplicationSetup error for a publication that
// exists without publishing what the wake-ups need, or nil.
func publicationProblem(pubInsert, hasJobs bool) error {
	if !hasJobs {
		return fmt.Errorf("%w: publication %s exists without webhook_ingress.jobs; as the table's owner run: ALTER PUBLICATION %s SET TABLE webhook_ingress.jobs; ALTER PUBLICATION %[2]s SET (publish_via_partition_root = true)",
			ErrReplicationSetup, Publication, Publication)
	}
	if !pubInsert {
		return fmt.Errorf("%w: publication %s does not publish inserts; as its owner run: ALTER PUBLICATION %s SET (publish = 'insert, update')",
			ErrReplicationSetup, Publication, Publication)
	}
	return nil
}

// recheckPublication runs checkPublication's rules on the pool while a
// stream is up: a publication altered meanwhile (its table dropped from it,
// inserts no longer published) leaves the stream up and silent, and the next
// Start would refuse it. So does a synchronous_standby_names reloaded to
// match the stream (syncstandby.go). It returns that ErrReplicationSetup
// error; anything
// else (a missing publication, which the stream itself reports on the next
// change it decodes; a query that failed) is not the stream's to end.
func (r *Replication) recheckPublication(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, publicationCheckTimeout)
	defer cancel()
	if app := r.appName.Load(); app != nil {
		var names string
		if err := r.pool.QueryRow(qctx, "SHOW synchronous_standby_names").Scan(&names); err == nil {
			if err := syncStandbyProblem(names, *app); err != nil {
				return err
			}
		}
	}
	p, err := queries.New(r.pool).JobsPublication(qctx)
	switch {
	case err == nil:
		return publicationProblem(p.Pubinsert, p.HasJobs)
	case errors.Is(err, pgx.ErrNoRows):
		// Dropped: the stream fails on the next change it decodes.
	case ctx.Err() == nil: // not stopping
		r.logger.Debug("publication not re-checked; the next check tries again",
			slog.String("publication", Publication), slog.String("error", err.Error()))
	}
	return nil
}

// ensureSlot creates the slot unless it exists. A new slot starts at the
// current position; what was committed before is found by the claim every
// start runs, or by the one run nudges after each open of its own. dropped
// says dropIfUnusable just dropped it (and said why).
func (r *Replication) ensureSlot(ctx context.Context, conn *pgconn.PgConn, dropped bool) error {
	_, err := pglogrepl.CreateReplicationSlot(ctx, conn, r.slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		r.mu.Lock()
		streamed := r.streamed
		r.mu.Unlock()
		if dropped {
			r.logger.Info("replication slot created afresh", slog.String("slot", r.slot))
			return nil
		}
		if streamed {
			// It streamed from this slot before, so the slot vanished: a
			// standby promoted to primary (slots are not replicated) or
			// a drop. The new slot starts now; the claim after reconnecting
			// finds what was committed meanwhile, and polling covered the gap.
			r.logger.Warn("replication slot was missing on this server (a promoted standby, or dropped): created afresh; polling covered the gap and a claim now finds what was committed meanwhile",
				slog.String("slot", r.slot), slog.String("drop_with", "SELECT pg_drop_replication_slot('"+r.slot+"')"))
			return nil
		}
		r.logger.Info("replication slot created; drop it if this streamer is retired, or it retains WAL",
			slog.String("slot", r.slot), slog.String("drop_with", "SELECT pg_drop_replication_slot('"+r.slot+"')"))
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == "42710": // duplicate_object: resume it
		return nil
	default:
		return explain(fmt.Errorf("create replication slot %q: %w", r.slot, err))
	}
}

// retireSlotRecheck is how often a streamer whose wake source is not
// replication looks again at a slot of its slot_name that is still read (a
// replica still on wake: replication, during a rollout), so the slot goes
// once that replica has stopped; also the longest wait between attempts
// while Postgres cannot be reached.
const retireSlotRecheck = time.Minute

// slotOfNameSQL describes the slot named $1 for retireSlot
// (pg_replication_slots is readable by every role, webhook_streamer too).
// retained is the WAL it holds, -1 where that is not known (a standby, a
// slot that reserved none).
const slotOfNameSQL = `SELECT s.slot_type, coalesce(s.plugin, ''), coalesce(s.database, ''),
       s.database IS NOT DISTINCT FROM pg_catalog.current_database() AS here,
       s.temporary, s.active, coalesce(s.wal_status, ''),
       CASE WHEN pg_catalog.pg_is_in_recovery() OR s.restart_lsn IS NULL THEN -1
            ELSE pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), s.restart_lsn)::bigint
       END AS retained
FROM pg_catalog.pg_replication_slots s
WHERE s.slot_name = $1`

// dropRetiredSlotSQL drops the slot named $1 only while it is still what
// retireSlot found: a permanent logical slot of this database made by
// pgoutput (the replication wake source's plugin), read by nobody. A reader
// that attaches after the check makes the drop fail with object_in_use.
const dropRetiredSlotSQL = `SELECT pg_catalog.pg_drop_replication_slot(s.slot_name)
FROM pg_catalog.pg_replication_slots s
WHERE s.slot_name = $1
  AND s.slot_type = 'logical' AND s.plugin = 'pgoutput'
  AND s.database = pg_catalog.current_database()
  AND NOT s.temporary AND NOT s.active`

// slotDB is what retireSlot needs of the streamer's pool.
type slotDB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// retireSlot runs, until ctx ends, for a streamer whose wake source is not
// replication (notify or poll): it drops the slot of its slot_name that an
// earlier wake: replication left behind. Nothing reads that slot any more,
// yet it retains WAL without bound (max_slot_wal_keep_size is off by
// default), and PostgreSQL refuses to start with wal_level below logical
// while any logical slot exists: an operator who went back to notify and
// lowered wal_level, as only replication needs logical, had a server that
// did not start (review helper-281). Only a permanent logical slot of this
// database made by pgoutput is dropped; one that a replica still reads (on
// replication during a rollout) is left and looked at again every recheck
// (retireSlotRecheck) until it is unread or gone. The slot is only ever a
// wake source: a replica that goes back to replication creates it afresh,
// and its first claim finds what was committed meanwhile. It returns once
// the slot is gone, is not Inlet's, or may not be dropped (then it says,
// at Warn, what an operator should run): it never fails the streamer.
func retireSlot(ctx context.Context, db slotDB, slot string, recheck time.Duration, logger *slog.Logger) {
	dropWith := "SELECT pg_drop_replication_slot('" + slot + "')"
	delay := time.Second
	saidActive := false
	for {
		wait, done := retireSlotStep(ctx, db, slot, dropWith, recheck, logger, &saidActive)
		if done || ctx.Err() != nil {
			return
		}
		if wait == 0 { // unreachable: back off
			wait = delay
			delay = min(delay*2, recheck)
		} else {
			delay = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// retireSlotStep is one look at the slot (and a drop when it qualifies). It
// reports whether retireSlot is done; if not, how long to wait before the
// next look (0: Postgres was unreachable, back off).
func retireSlotStep(ctx context.Context, db slotDB, slot, dropWith string, recheck time.Duration, logger *slog.Logger, saidActive *bool) (time.Duration, bool) {
	var (
		slotType, plugin, dbName, walStatus string
		here, temporary, active             bool
		retained                            int64
	)
	err := db.QueryRow(ctx, slotOfNameSQL, slot).Scan(&slotType, &plugin, &dbName, &here, &temporary, &active, &walStatus, &retained)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, true
	case err != nil:
		return retireSlotFailed(ctx, fmt.Errorf("look up replication slot %q: %w", slot, err), slot, dropWith, logger)
	case slotType != "logical" || plugin != "pgoutput" || !here || temporary:
		logger.Info("a replication slot of this streamer's slot_name exists but is not one this database's wake: replication made; left alone",
			slog.String("slot", slot), slog.String("slot_type", slotType), slog.String("plugin", plugin),
			slog.String("database", dbName), slog.Bool("temporary", temporary))
		return 0, true
	case active:
		if !*saidActive {
			*saidActive = true
			logger.Warn("replication slot of this streamer's slot_name is still read (a replica still on streamer.wake: replication, during a rollout?) though this streamer's wake source is not replication: left, and dropped once nothing reads it",
				slog.String("slot", slot), slog.Duration("recheck_every", recheck))
		}
		return recheck, false
	}
	dropped, err := dropRetiredSlot(ctx, db, slot)
	var pgErr *pgconn.PgError
	switch {
	case err == nil && dropped:
		logger.Warn("replication slot dropped: this streamer's wake source is no longer replication, and the slot an earlier wake: replication left retained WAL (and with it PostgreSQL would not start with wal_level below logical)",
			slog.String("slot", slot), slog.Int64("retained_wal_bytes", retained), slog.String("wal_status", walStatus))
		return 0, true
	case err == nil:
		// It changed between the look and the drop (attached, or gone): look again.
		return time.Second, false
	case errors.As(err, &pgErr) && pgErr.Code == "42704": // undefined_object: dropped meanwhile
		return 0, true
	case errors.As(err, &pgErr) && pgErr.Code == "55006": // object_in_use: a reader attached meanwhile
		return recheck, false
	}
	return retireSlotFailed(ctx, err, slot, dropWith, logger)
}

// dropRetiredSlot runs dropRetiredSlotSQL as the pool's login role: the
// slot was created by wake: replication's connection, which logs in with
// that role and takes no SET ROLE, and dropping a slot needs REPLICATION (or
// a superuser), which webhook_streamer has not. SET LOCAL ends with the
// transaction; the pool's connection is webhook_streamer again after it.
func dropRetiredSlot(ctx context.Context, db slotDB, slot string) (bool, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("drop replication slot %q: begin: %w", slot, err)
	}
	defer func() {
		// Even after ctx has ended, but bounded: Stop waits for it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE NONE"); err != nil {
		return false, fmt.Errorf("drop replication slot %q: back to the login role: %w", slot, err)
	}
	tag, err := tx.Exec(ctx, dropRetiredSlotSQL, slot)
	if err != nil {
		return false, fmt.Errorf("drop replication slot %q: %w", slot, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("drop replication slot %q: commit: %w", slot, err)
	}
	return tag.RowsAffected() == 1, nil
}

// retireSlotFailed handles err from retireSlotStep's look or drop: Postgres
// unreachable is retried (wait 0); anything else (the login role without
// REPLICATION, 42501) is logged at Warn with what to run, and ends
// retireSlot.
func retireSlotFailed(ctx context.Context, err error, slot, dropWith string, logger *slog.Logger) (time.Duration, bool) {
	if ctx.Err() != nil {
		return 0, true
	}
	if database.IsUnavailable(err) {
		logger.Debug("replication slot not checked yet (Postgres unreachable); trying again",
			slog.String("slot", slot), slog.String("error", err.Error()))
		return 0, false
	}
	hint := "run drop_with as a role with REPLICATION or a superuser once no streamer reads it, before lowering wal_level"
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
		hint = "the streamer's login role may not drop replication slots (that needs REPLICATION or superuser): " + hint
	}
	logger.Warn("replication slot an earlier streamer.wake: replication left is not dropped: it retains WAL, and PostgreSQL does not start with wal_level below logical while it exists; "+hint,
		slog.String("slot", slot), slog.String("drop_with", dropWith), slog.String("error", err.Error()))
	return 0, true
}

// stream reads the replication stream until ctx is done (then it confirms
// what it processed and returns nil) or the connection fails. It closes conn.
// lasted reports whether the stream proved itself up (it confirmed a
// transaction it delivered, or it lasted replicationMaxBackoff), so run
// starts its backoff afresh. A transaction delivered and not confirmed is
// delivered again by the next stream: counted, a stream that replays one
// and dies reconnected ~6 times a second (review helper-159).
func (r *Replication) stream(ctx context.Context, conn *pgconn.PgConn, first bool) (lasted bool, _ error) {
	defer closeConn(conn)
	opened := time.Now()
	d := decoder{statusColumn: map[uint32]int{}}
	confirmedCommit := false
	ended := func(err error) (bool, error) {
		return confirmedCommit || time.Since(opened) >= replicationMaxBackoff, err
	}
	r.mu.Lock()
	r.connected = true
	r.streamed = true
	if !first {
		r.reconnects++
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.connected = false
		r.mu.Unlock()
	}()
	if first {
		r.logger.Info("replication stream open", slog.String("slot", r.slot), slog.String("publication", Publication))
	} else {
		// run nudged a claim for what happened meanwhile.
		r.logger.Info("replication stream restored", slog.String("slot", r.slot))
	}

	soon, later, last := time.AfterFunc(time.Hour, r.nudge), time.AfterFunc(time.Hour, r.nudge), time.AfterFunc(time.Hour, r.nudge)
	soon.Stop()
	later.Stop()
	last.Stop()
	defer soon.Stop()
	defer later.Stop()
	defer last.Stop()

	var reported pglogrepl.LSN
	lastReport, heard, asked := time.Now(), time.Now(), false
	receiveTimeout := time.Duration(r.receiveTimeout.Load())
	report := func() error {
		// After askAfter with nothing heard, ask for a reply.
		ask := !asked && time.Since(heard) >= askAfter
		err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: d.processed, ReplyRequested: ask})
		if err != nil {
			return fmt.Errorf("confirm position %s: %w", d.processed, err)
		}
		asked = asked || ask
		reported, lastReport = d.processed, time.Now()
		confirmedCommit = confirmedCommit || (d.commits > 0 && reported > 0)
		r.confirmed.Store(uint64(reported))
		return nil
	}
	checkAt := opened.Add(publicationCheckInterval)
	for {
		if time.Since(heard) >= receiveTimeout {
			return ended(fmt.Errorf("nothing from the server for %s, a reply asked for (a network cut, or a server that stopped answering; the timeout follows its wal_sender_timeout): reconnecting", receiveTimeout))
		}
		if since := time.Since(lastReport); (d.processed > reported && since >= statusInterval) || since >= idleStatusInterval ||
			(!asked && time.Since(heard) >= askAfter) {
			if err := report(); err != nil {
				return ended(err)
			}
		}
		if !time.Now().Before(checkAt) {
			if err := r.recheckPublication(ctx); err != nil {
				return ended(err)
			}
			checkAt = time.Now().Add(publicationCheckInterval)
		}
		next := lastReport.Add(idleStatusInterval)
		if d.processed > reported {
			next = lastReport.Add(statusInterval)
		}
		if checkAt.Before(next) {
			next = checkAt
		}
		if at := heard.Add(askAfter); !asked && at.Before(next) {
			next = at
		} else if at := heard.Add(receiveTimeout); at.Before(next) {
			next = at
		}
		rctx, cancel := context.WithDeadline(ctx, next)
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		if ctx.Err() != nil {
			// Stopping: confirm what was processed, so the next start
			// resumes there.
			r.confirmFinal(conn, d.processed)
			return ended(nil)
		}
		if err != nil {
			if pgconn.Timeout(err) {
				continue
			}
			return ended(fmt.Errorf("receive from replication stream: %w", err))
		}
		heard, asked = time.Now(), false
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			woke, replyNow, err := d.handle(msg.Data)
			if err != nil {
				return ended(err)
			}
			if woke {
				r.wake()
				soon.Reset(recheckSoon)
				later.Reset(recheckLater)
				last.Reset(recheckLast)
			}
			if replyNow {
				if err := report(); err != nil {
					return ended(err)
				}
			}
		case *pgproto3.ErrorResponse:
			err := fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(msg))
			if r.noticePublicationGone(err) {
				// Not a setup error: the next open recreates the
				// publication if it is still missing, then the slot.
				return ended(fmt.Errorf("%w (publication %s was dropped while streaming; the slot is dropped and created afresh once it exists)", err, Publication))
			}
			return ended(explain(err))
		case *pgproto3.CopyDone:
			return ended(errors.New("server ended the replication stream"))
		}
	}
}

// confirmFinal reports lsn, then ends the stream (CopyDone) and waits for
// the server to finish it: the server handles messages in order, so the slot
// holds the position before Stop returns.
func (r *Replication) confirmFinal(conn *pgconn.PgConn, lsn pglogrepl.LSN) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: lsn})
	if err == nil {
		conn.Frontend().Send(&pgproto3.CopyDone{})
		err = conn.Frontend().Flush()
	}
	for err == nil {
		var msg pgproto3.BackendMessage
		if msg, err = conn.ReceiveMessage(ctx); err != nil {
			break
		}
		switch msg := msg.(type) {
		case *pgproto3.ErrorResponse:
			err = pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.ReadyForQuery:
			r.confirmed.Store(uint64(lsn))
			return
		}
	}
	r.logger.Warn("replication position not confirmed at stop; the next start replays from the last one (wake-ups only)",
		slog.String("slot", r.slot), slog.String("lsn", lsn.String()), slog.String("error", err.Error()))
}

// decoder follows pgoutput messages far enough to tell which commits should
// wake the claim loop, and how far the stream has been processed.
type decoder struct {
	statusColumn map[uint32]int // relation id → index of its status column
	inTx         bool
	wakeAtCommit bool
	processed    pglogrepl.LSN
	commits      int // transactions decoded
}

// handle takes one CopyData payload. It reports whether a commit that should
// wake the claim loop ended, and whether the server asked for a status now.
func (d *decoder) handle(data []byte) (woke, replyNow bool, err error) {
	if len(data) == 0 {
		return false, false, errors.New("empty message on the replication stream")
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return false, false, fmt.Errorf("parse keepalive: %w", err)
		}
		// Everything up to the server's sent position has reached us, and
		// between transactions all of it is handled: it can be confirmed, so
		// the slot does not hold WAL for changes that are not ours.
		if !d.inTx && k.ServerWALEnd > d.processed {
			d.processed = k.ServerWALEnd
		}
		return false, k.ReplyRequested, nil
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return false, false, fmt.Errorf("parse WAL data: %w", err)
		}
		m, err := pglogrepl.Parse(x.WALData)
		if err != nil {
			return false, false, fmt.Errorf("decode pgoutput message: %w", err)
		}
		return d.apply(m), false, nil
	}
	return false, false, nil
}

func (d *decoder) apply(m pglogrepl.Message) (woke bool) {
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		d.statusColumn[m.RelationID] = -1
		for i, c := range m.Columns {
			if c.Name == "status" {
				d.statusColumn[m.RelationID] = i
			}
		}
	case *pglogrepl.BeginMessage:
		d.inTx, d.wakeAtCommit = true, false
	case *pglogrepl.InsertMessage:
		d.wakeAtCommit = true
	case *pglogrepl.UpdateMessage:
		if d.claimable(m.RelationID, m.NewTuple) {
			d.wakeAtCommit = true
		}
	case *pglogrepl.CommitMessage:
		woke = d.wakeAtCommit
		d.inTx, d.wakeAtCommit = false, false
		d.commits++
		d.processed = max(d.processed, m.TransactionEndLSN)
	}
	return woke
}

// claimable reports whether a new row version is pending. A failed job is
// claimable only once its backoff ends, which the poll tick notices.
func (d *decoder) claimable(rel uint32, t *pglogrepl.TupleData) bool {
	i, ok := d.statusColumn[rel]
	if !ok || i < 0 || t == nil || i >= len(t.Columns) {
		return false
	}
	c := t.Columns[i]
	return c.DataType == pglogrepl.TupleDataTypeText && string(c.Data) == "pending"
}

// explain marks errors that retrying cannot fix as ErrReplicationSetup and
// adds what to do about the usual ones. Connection trouble, a server shutting
// down and a slot still held by another process stay plain errors: retried.
func explain(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	code := pgErr.Code
	switch {
	case code == "55006": // object_in_use: the slot has a reader
		return fmt.Errorf("%w (each streamer replica needs its own slot_name; a crashed predecessor's session ends within wal_sender_timeout)", err)
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "57"), code == "53300", code == "40001", code == "40P01":
		return err
	}
	hint := ""
	switch code {
	case "42501": // insufficient_privilege
		hint = "; the replication connection's role needs the REPLICATION attribute (ALTER ROLE … REPLICATION)"
	case "55000": // object_not_in_prerequisite_state
		hint = "; logical replication needs wal_level = logical (a restart) and a slot created in this database"
	case "53400": // configuration_limit_exceeded
		hint = "; raise max_replication_slots / max_wal_senders, or drop unused slots"
	}
	return fmt.Errorf("%w: %w%s", ErrReplicationSetup, err, hint)
}

// statement is a named query without its comment lines, for a message.
func statement(q string) string {
	var out []string
	for _, line := range strings.Split(q, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "--") {
			out = append(out, line)
		}
	}
	return strings.Join(out, " ")
}

func closeConn(conn *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

func errText(err error) string {
	if err == nil {
		return "connection closed"
	}
	return err.Error()
}
