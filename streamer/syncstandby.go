package streamer

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// A logical replication connection is a standby to PostgreSQL's
// synchronous replication like any other: one synchronous_standby_names
// matches ('*', or its application_name) may be chosen as the synchronous
// standby, whenever the physical standby is away or connected after it.
// A COMMIT is then acknowledged once the streamer has read the WAL, and the
// streamer stores nothing: ingress answers 2xx for an event only the
// primary holds, and a failover loses it (review helper-315,
// TestReplicationStreamIsNeverASynchronousStandby). So the stream is not
// started while the setting matches it, and a stream is ended when a reload
// makes it match (the publication re-check, every 30 s): an
// ErrReplicationSetup, polling covering meanwhile.

// syncStandbyProblem is the ErrReplicationSetup error for a stream whose
// application_name synchronous_standby_names (names) lists, nil otherwise.
func syncStandbyProblem(names, appName string) error {
	if !syncStandbyNamed(names, appName) {
		return nil
	}
	return fmt.Errorf("%w: synchronous_standby_names (%q) matches the replication stream's application_name %q, so PostgreSQL may wait on the streamer as a synchronous standby, "+
		"which stores nothing, and acknowledge commits a failover then loses: list the physical standbys by name (e.g. FIRST 1 (standby1)) instead of '*', "+
		"or give the stream another application_name in streamer.replication_url, or use wake: notify",
		ErrReplicationSetup, names, appName)
}

// syncStandbyNamed reports whether the synchronous_standby_names value
// names lists appName, as PostgreSQL's syncrep matches a standby: '*', or
// the name compared without regard to case (quoted or not). The FIRST/ANY
// keyword and the count are not names.
func syncStandbyNamed(names, appName string) bool {
	for _, n := range standbyNames(names) {
		if n == "*" || strings.EqualFold(n, appName) {
			return true
		}
	}
	return false
}

// standbyNames is the names a synchronous_standby_names value lists, read
// as PostgreSQL's grammar (syncrep_gram.y) reads it: a plain list "a, b",
// or [FIRST|ANY] NUM ( list ). A name in double quotes is taken as written
// ("" for a quote in it), parentheses and commas in it included; an
// unquoted number is a name in a plain list.
func standbyNames(s string) []string {
	type token struct {
		text   string
		quoted bool
	}
	var toks []token
	for i := 0; i < len(s); {
		switch s[i] {
		case ' ', '\t', '\n', '\r', '\f', '\v':
			i++
		case ',', '(', ')':
			toks = append(toks, token{text: s[i : i+1]})
			i++
		case '"':
			var b strings.Builder
			for i++; i < len(s); i++ {
				if s[i] == '"' {
					if i+1 < len(s) && s[i+1] == '"' {
						b.WriteByte('"')
						i++
						continue
					}
					i++
					break
				}
				b.WriteByte(s[i])
			}
			toks = append(toks, token{text: b.String(), quoted: true})
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\n\r\f\v,()\"", rune(s[j])) {
				j++
			}
			toks = append(toks, token{text: s[i:j]})
			i = j
		}
	}
	// [FIRST|ANY] NUM ( list ): the names are the list's.
	k := 0
	if len(toks) > 0 && !toks[0].quoted && (strings.EqualFold(toks[0].text, "FIRST") || strings.EqualFold(toks[0].text, "ANY")) {
		k = 1
	}
	if len(toks) > k+1 && !toks[k].quoted && isCount(toks[k].text) && !toks[k+1].quoted && toks[k+1].text == "(" {
		toks = toks[k+2:]
	}
	var names []string
	for _, t := range toks {
		if t.quoted || (t.text != "," && t.text != "(" && t.text != ")") {
			names = append(names, t.text)
		}
	}
	return names
}

// isCount reports an unquoted NUM.
func isCount(t string) bool {
	if t == "" {
		return false
	}
	for _, c := range t {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// checkSyncStandby reads, on the replication connection, its
// application_name and synchronous_standby_names, and returns the name and
// syncStandbyProblem's verdict.
func checkSyncStandby(ctx context.Context, conn *pgconn.PgConn) (string, error) {
	app, err := show(ctx, conn, "application_name")
	if err != nil {
		return "", err
	}
	names, err := show(ctx, conn, "synchronous_standby_names")
	if err != nil {
		return "", err
	}
	return app, syncStandbyProblem(names, app)
}

// show reads one setting on a replication connection (one statement per
// query: its grammar takes SHOW alone).
func show(ctx context.Context, conn *pgconn.PgConn, setting string) (string, error) {
	results, err := conn.Exec(ctx, "SHOW "+setting).ReadAll()
	if err != nil {
		return "", explain(fmt.Errorf("read %s: %w", setting, err))
	}
	if len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 1 {
		return "", fmt.Errorf("read %s: no value", setting)
	}
	return string(results[0].Rows[0][0]), nil
}
