package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cost is what the database did for one measurement, per delivered job: the
// statements the measured system ran (from pg_stat_statements when the
// cluster loads it), its transactions and the rows it wrote (inserted,
// updated or deleted, triggers' included) from PostgreSQL's cumulative
// statistics. The bench's own queries (marked /* bench-… */) are left out.
type Cost struct {
	// CostSource is "pg_stat_statements" or, without it,
	// "pg_stat_database" (no statement counts then).
	CostSource string `json:"cost_source"`
	// CostJobs is the delivered jobs the counts are divided by.
	CostJobs int64 `json:"cost_jobs"`
	// StatementsPerJob counts every top-level statement but transaction
	// control (BEGIN, COMMIT, ROLLBACK).
	StatementsPerJob   float64 `json:"statements_per_job,omitempty"`
	TransactionsPerJob float64 `json:"transactions_per_job"`
	RowsWrittenPerJob  float64 `json:"rows_written_per_job"`
	// Statements are the most frequent statements, per job.
	Statements []StatementCost `json:"statements,omitempty"`
	// RowsWrittenByTable is rows written per job by table (partitions
	// counted under their partitioned table).
	RowsWrittenByTable map[string]float64 `json:"rows_written_by_table,omitempty"`
}

// StatementCost is one normalized statement of a measurement.
type StatementCost struct {
	Query       string  `json:"query"`
	CallsPerJob float64 `json:"calls_per_job"`
	RowsPerJob  float64 `json:"rows_per_job"`
	// ExecMicrosPerJob is the statement's execution time per job (its
	// total_exec_time): where the database's time per job goes.
	ExecMicrosPerJob float64 `json:"exec_us_per_job"`
}

// costTopStatements is how many statements a Cost lists.
const costTopStatements = 8

// statementsLibrary says whether the server binaries in binDir come with
// pg_stat_statements, so the cluster may preload it (a missing library
// would stop the server from starting).
func statementsLibrary(binDir string) bool {
	// binDir may hold links to the server's own directory (/usr/local/bin
	// -> /usr/lib/postgresql/15/bin): look beside the real binary.
	if real, err := filepath.EvalSymlinks(filepath.Join(binDir, "postgres")); err == nil {
		binDir = filepath.Dir(real)
	}
	if fileExists(filepath.Join(filepath.Dir(binDir), "lib", "pg_stat_statements.so")) {
		return true
	}
	// Only this server's pg_config: another version's library would not load.
	out, err := exec.Command(filepath.Join(binDir, "pg_config"), "--pkglibdir").Output()
	return err == nil && fileExists(filepath.Join(strings.TrimSpace(string(out)), "pg_stat_statements.so"))
}

// createStatementsExtension makes pg_stat_statements' view available in the
// database at url.
func createStatementsExtension(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	return err
}

// reportStats makes conn's backend report its pending statistics now: a
// backend reports them at most once a second, and an idle one may hold them
// for 10s, long enough for a measurement's first reading to miss the rows a
// setup step wrote on it and count them in the measurement. The report is
// made before the answer to this statement, so it is visible on return.
func reportStats(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, `/* bench-meter */ SELECT pg_stat_force_next_flush()`); err != nil {
		return fmt.Errorf("report the statistics of the setup's connection: %w", err)
	}
	return nil
}

// meter takes the cumulative statistics of one database before and after a
// measurement.
type meter struct {
	conn       *pgx.Conn
	statements bool
	before     costSnapshot
}

type costSnapshot struct {
	stmts  map[string]stmtCount // by queryid
	xacts  int64
	tables map[string]int64
}

type stmtCount struct {
	query       string
	calls, rows int64
	execMs      float64
}

// startMeter connects to the database at url and takes the first snapshot.
func (b *bench) startMeter(ctx context.Context, url string) (*meter, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = "bench-meter"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("meter: %w", err)
	}
	m := &meter{conn: conn, statements: b.statements}
	if m.before, err = m.snapshot(ctx); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return m, nil
}

func (m *meter) close() { m.conn.Close(context.Background()) }

// finish waits for the measured system's connections to end (a backend
// reports its statistics at exit, and an idle one may hold them for up to
// 10s), takes the second snapshot and returns the difference per job. Call
// it after stopping the system.
func (m *meter) finish(ctx context.Context, jobs int64) (*Cost, error) {
	defer m.close()
	if err := m.waitQuiet(ctx); err != nil {
		return nil, err
	}
	after, err := m.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return m.before.cost(after, jobs, m.statements), nil
}

// waitQuiet waits up to 5s until no connection of the measured system (every
// pool the bench and inlet open is named inlet-…) is left on the database.
func (m *meter) waitQuiet(ctx context.Context) error {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var n int
		if err := m.conn.QueryRow(ctx, `/* bench-meter */ SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
			  AND application_name LIKE 'inlet%'`).Scan(&n); err != nil {
			return fmt.Errorf("meter: wait for the measured connections to end: %w", err)
		}
		if n == 0 {
			break
		}
	}
	time.Sleep(200 * time.Millisecond) // exiting backends write their statistics last
	return nil
}

func (m *meter) snapshot(ctx context.Context) (costSnapshot, error) {
	s := costSnapshot{stmts: map[string]stmtCount{}, tables: map[string]int64{}}
	if err := m.conn.QueryRow(ctx, `/* bench-meter */ SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&s.xacts); err != nil {
		return s, fmt.Errorf("meter: read pg_stat_database: %w", err)
	}
	rows, err := m.conn.Query(ctx, `/* bench-meter */ SELECT coalesce(pg_partition_root(relid), relid)::regclass::text,
		sum(n_tup_ins + n_tup_upd + n_tup_del)::bigint FROM pg_stat_user_tables GROUP BY 1`)
	if err != nil {
		return s, fmt.Errorf("meter: read pg_stat_user_tables: %w", err)
	}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return s, err
		}
		s.tables[name] = n
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("meter: read pg_stat_user_tables: %w", err)
	}
	if !m.statements {
		return s, nil
	}
	// One row per (role, statement): the services SET ROLE, so a statement
	// may appear under several roles.
	rows, err = m.conn.Query(ctx, `/* bench-meter */ SELECT queryid::text, calls, rows, total_exec_time, query FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND queryid IS NOT NULL`)
	if err != nil {
		return s, fmt.Errorf("meter: read pg_stat_statements: %w", err)
	}
	for rows.Next() {
		var id, query string
		var calls, n int64
		var execMs float64
		if err := rows.Scan(&id, &calls, &n, &execMs, &query); err != nil {
			return s, err
		}
		c := s.stmts[id]
		c.query, c.calls, c.rows, c.execMs = query, c.calls+calls, c.rows+n, c.execMs+execMs
		s.stmts[id] = c
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("meter: read pg_stat_statements: %w", err)
	}
	return s, nil
}

var (
	transactionControl = regexp.MustCompile(`(?i)^\s*(begin|commit|rollback|start transaction|end|savepoint|release)\b`)
	sqlComment         = regexp.MustCompile(`(?m)--[^\n]*$`)
	whitespace         = regexp.MustCompile(`\s+`)
)

// cost is after − s per job.
func (s costSnapshot) cost(after costSnapshot, jobs int64, statements bool) *Cost {
	per := func(n int64) float64 { return float64(n) / float64(max(jobs, 1)) }
	c := &Cost{CostSource: "pg_stat_database", CostJobs: jobs, RowsWrittenByTable: map[string]float64{}}
	var rows int64
	for name, n := range after.tables {
		if d := n - s.tables[name]; d > 0 {
			rows += d
			c.RowsWrittenByTable[name] = per(d)
		}
	}
	c.RowsWrittenPerJob = per(rows)
	var own, total int64
	if statements {
		c.CostSource = "pg_stat_statements"
		for _, id := range slices.Sorted(maps.Keys(after.stmts)) {
			a := after.stmts[id]
			d := stmtCount{query: a.query, calls: a.calls - s.stmts[id].calls, rows: a.rows - s.stmts[id].rows,
				execMs: a.execMs - s.stmts[id].execMs}
			switch {
			case d.calls <= 0:
			case strings.Contains(a.query, "/* bench-"):
				own += d.calls // each its own transaction
			case transactionControl.MatchString(a.query):
			default:
				total += d.calls
				c.Statements = append(c.Statements, StatementCost{Query: shortQuery(a.query), CallsPerJob: per(d.calls), RowsPerJob: per(d.rows),
					ExecMicrosPerJob: 1000 * d.execMs / float64(max(jobs, 1))})
			}
		}
		slices.SortFunc(c.Statements, func(a, b StatementCost) int { return cmp.Compare(b.CallsPerJob, a.CallsPerJob) })
		c.Statements = c.Statements[:min(len(c.Statements), costTopStatements)]
		c.StatementsPerJob = per(total)
	}
	c.TransactionsPerJob = per(max(after.xacts-s.xacts-own, 0))
	return c
}

// shortQuery is a statement's text without comments, on one line, cut to
// 100 characters: enough to tell which one it is.
func shortQuery(q string) string {
	q = strings.TrimSpace(whitespace.ReplaceAllString(sqlComment.ReplaceAllString(q, ""), " "))
	if len(q) > 100 {
		q = q[:100] + "…"
	}
	return q
}

// print writes the cost as one line, then its most frequent statements.
func (c *Cost) print(indent string) { c.printPer(indent, "delivered job") }

// printPer is print with what the counts are divided by named (the ingest
// section divides by stored events).
func (c *Cost) printPer(indent, unit string) {
	if c == nil {
		return
	}
	stmts := "statements: -"
	if c.CostSource == "pg_stat_statements" {
		stmts = fmt.Sprintf("%.2f statements", c.StatementsPerJob)
	}
	tables := slices.SortedFunc(maps.Keys(c.RowsWrittenByTable), func(a, b string) int {
		return cmp.Compare(c.RowsWrittenByTable[b], c.RowsWrittenByTable[a])
	})
	var byTable []string
	for _, t := range tables {
		byTable = append(byTable, fmt.Sprintf("%s %.2f", t, c.RowsWrittenByTable[t]))
	}
	fmt.Printf("%sper %s (%d): %s, %.2f transactions, %.2f rows written (%s)\n",
		indent, unit, c.CostJobs, stmts, c.TransactionsPerJob, c.RowsWrittenPerJob, strings.Join(byTable, ", "))
	for _, s := range c.Statements[:min(len(c.Statements), 5)] {
		fmt.Printf("%s  %6.3f calls %6.2f rows %7.1f µs  %s\n", indent, s.CallsPerJob, s.RowsPerJob, s.ExecMicrosPerJob, s.Query)
	}
}
