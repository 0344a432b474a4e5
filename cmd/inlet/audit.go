package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/audit"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema"
)

const auditHelp = `

The database is the operator commands' (admin.database_url, else
database_url, else DATABASE_URL, else the local PostgreSQL of inlet dev in
this directory or the nearest parent, .inlet/database_url). --role is the role assumed after connecting: grant it
to your login role.`

func runAudit(ctx context.Context, env *environment, args []string) error {
	return runVerbs(ctx, env, "audit", `
Tamper evidence for the event log: seal writes checkpoints (an RFC 6962
Merkle tree over the events in id order, each checkpoint naming the previous
one's hash); verify recomputes them from the events table.`, map[string]subcommand{
		"seal":   {"write checkpoints over the events received since the last one", runAuditSeal},
		"verify": {"recompute the checkpoints; report every altered, missing or out-of-order event", runAuditVerify},
	}, args)
}

// withAuditDB loads the config and opens a small pool as the role role
// names for it.
func withAuditDB(ctx context.Context, cfgPath string, role func(inletyaml.Config) string, f func(pool *pgxpool.Pool, cfg inletyaml.Config) error) error {
	cfg, _, err := operatorConfig(cfgPath)
	if err != nil {
		return err
	}
	pool, err := database.Open(ctx, cmp.Or(cfg.Admin.DatabaseURL, cfg.DatabaseURL),
		database.Options{Role: role(cfg), AppName: "inlet-audit", MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	return f(pool, cfg)
}

func runAuditSeal(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "audit seal", "", `
Seal the events received since the last checkpoint, up to the horizon: events
received more than --grace ago, stopping at a gap in the ids while a
transaction that could still insert the missing id is running (a gap is
sealed as skipped only once none is). With --every, seal again at that
interval until SIGTERM.`+auditHelp)
	cfgPath := configFlag(fs)
	role := fs.String("role", "", "database role to assume (default: audit.db_role, else webhook_sealer)")
	grace := fs.Duration("grace", 0, "seal only events older than this (default: audit.grace, else 5s)")
	every := fs.Duration("every", 0, "seal at this interval until SIGTERM (0: one pass)")
	maxLeaves := fs.Int("max-leaves", 10000, "ids per checkpoint at most")
	asJSON := fs.Bool("json", false, "print the checkpoints written as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: inlet audit seal takes flags only, got %q", errUsage, fs.Args())
	}
	graceGiven := false
	fs.Visit(func(f *flag.Flag) { graceGiven = graceGiven || f.Name == "grace" })
	if (graceGiven && *grace <= 0) || *every < 0 || *maxLeaves < 1 {
		return fmt.Errorf("%w: --grace must be positive, --every not negative, --max-leaves at least 1", errUsage)
	}
	if *asJSON && *every > 0 {
		return fmt.Errorf("%w: --json prints one pass's checkpoints: not with --every (the running sealer logs each checkpoint it writes)", errUsage)
	}
	sealerRole := func(cfg inletyaml.Config) string {
		if *role != "" || cfg.Audit.DBRole == nil {
			return cmp.Or(*role, schema.SealerRole)
		}
		return *cfg.Audit.DBRole
	}
	return withAuditDB(ctx, *cfgPath, sealerRole, func(pool *pgxpool.Pool, cfg inletyaml.Config) error {
		log := stderrLogger(cfg, "text")
		g := cmp.Or(*grace, cfg.Audit.Grace)
		s, err := audit.NewSealer(audit.Config{DB: pool, Grace: g, Interval: cmp.Or(*every, time.Minute),
			MaxLeaves: *maxLeaves, Logger: log})
		if err != nil {
			return err
		}
		if *every > 0 {
			if err := s.Start(ctx); err != nil {
				return err
			}
			log.Info("audit sealer running", slog.Duration("every", *every), slog.Duration("grace", g))
			<-ctx.Done()
			s.Stop()
			return nil
		}
		cps, err := s.Seal(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			out := make([]auditCheckpointJSON, len(cps))
			for i, cp := range cps {
				out[i] = auditCheckpointJSON{cp, cp.RootHex(), cp.HashHex()}
			}
			return printJSON(env.stdout, out)
		}
		if len(cps) == 0 {
			fmt.Fprintln(env.stdout, "nothing to seal")
			return nil
		}
		last := cps[len(cps)-1]
		fmt.Fprintf(env.stdout, "sealed %s: event ids %d..%d; head checkpoint %d %s\n",
			plural(len(cps), "checkpoint"), cps[0].FirstEventID, last.LastEventID, last.Seq, last.HashHex())
		return nil
	})
}

type auditCheckpointJSON struct {
	audit.Checkpoint
	Root string `json:"root_hash"`
	Hash string `json:"hash"`
}

func runAuditVerify(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "audit verify", "", `
Recompute every checkpoint from the events table and report every problem:
each altered event (its leaf no longer matches its checkpoint, or its body
no longer hashes to body_sha256), missing event and event inserted out of
order (into a sealed range), and a broken checkpoint chain (a checkpoint
altered or removed: the checkpoints after it, and their events, cannot be
checked). Prints the problems (at most --max-problems, saying how many were
cut) and the counts checked; exits 0 when intact, 1 otherwise, with the
first problem on stderr. Keep the printed head outside the database and pass
it back with --head: a removed newest checkpoint shows only that way.

The outcome is recorded in webhook_ingress.audit_verifications (unless
--no-record), where the dashboard (an altered event shows as altered; the
Audit page) and inlet streamer's inlet_audit_* metrics read it; the role
must be allowed to (webhook_operator is; webhook_auditor only reads, and
its verify is not recorded).`+auditHelp)
	cfgPath := configFlag(fs)
	role := fs.String("role", "", "database role to assume (default admin.db_role, webhook_operator; webhook_auditor works too)")
	head := fs.String("head", "", "a checkpoint hash kept from an earlier verify or seal: the chain must contain it")
	maxProblems := fs.Int("max-problems", audit.DefaultMaxProblems, "list at most this many problems (the rest are counted)")
	noRecord := fs.Bool("no-record", false, "do not record the outcome in webhook_ingress.audit_verifications")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: inlet audit verify takes flags only, got %q", errUsage, fs.Args())
	}
	if *maxProblems < 1 {
		return fmt.Errorf("%w: --max-problems must be at least 1", errUsage)
	}
	// A mistyped --head is a usage error (exit 2), not a failed
	// verification (exit 1, what a cron job alarms on as tampering).
	if b, err := hex.DecodeString(*head); *head != "" && (err != nil || len(b) != sha256.Size) {
		return fmt.Errorf("%w: --head %q is not a checkpoint hash (64 hex digits, as verify and seal print it)", errUsage, *head)
	}
	verifierRole := func(cfg inletyaml.Config) string {
		if *role == "" && cfg.Admin.DBRole != nil {
			return *cfg.Admin.DBRole
		}
		return *role
	}
	return withAuditDB(ctx, *cfgPath, verifierRole, func(pool *pgxpool.Pool, _ inletyaml.Config) error {
		rep, err := audit.Verify(ctx, pool, audit.VerifyOptions{Head: *head, MaxProblems: *maxProblems})
		if err != nil {
			return err
		}
		if !*noRecord {
			if err := audit.Record(ctx, pool, rep); err != nil {
				if !isPermissionDenied(err) {
					return err
				}
				fmt.Fprintf(env.stderr, "note: outcome not recorded: this role may not write webhook_ingress.audit_verifications (run as webhook_operator to show it on the dashboard and in metrics, or pass --no-record)\n")
			}
		}
		if *asJSON {
			if err := printJSON(env.stdout, rep); err != nil {
				return err
			}
		} else {
			printVerifyReport(env.stdout, rep)
		}
		if !rep.OK {
			if rep.ProblemsFound == 1 {
				return errors.New(rep.Problem.Reason)
			}
			return fmt.Errorf("%d problems found; the first: %s", rep.ProblemsFound, rep.Problem.Reason)
		}
		return nil
	})
}

// printVerifyReport prints rep as a table of its problems, if any, and a
// line of what was checked.
func printVerifyReport(w io.Writer, rep audit.Report) {
	pruned := ""
	if rep.Pruned > 0 {
		pruned = fmt.Sprintf(", %d dropped by retention (webhook_ingress.retention_log)", rep.Pruned)
	}
	checked := fmt.Sprintf("%s, %s through event id %d sealed (%d not yet sealed%s); head %s",
		plural(int(rep.Events), "event"), plural(int(rep.Checkpoints), "checkpoint"), rep.SealedThrough, rep.Unsealed, pruned, cmp.Or(rep.Head, "-"))
	if rep.OccurredAtFilled > 0 {
		// Not a problem (inlet backfill stored fills a NULL occurred_at), but
		// not vouched for either: name them (audit.Report.OccurredAtFilled).
		checked += "; occurred_at filled after sealing: " + filledEvents(rep.OccurredAtFilled, rep.OccurredAtFilledIDs)
	}
	if rep.PayloadFilled > 0 {
		// Not a problem either (inlet backfill stored fills a NULL payload,
		// which verify checks against the body): name them
		// (audit.Report.PayloadFilled).
		checked += "; payload filled after sealing: " + filledEvents(rep.PayloadFilled, rep.PayloadFilledIDs)
	}
	if rep.OK {
		fmt.Fprintf(w, "intact: %s\n", checked)
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "KIND\tCHECKPOINT\tEVENT\tREASON")
	for _, p := range rep.Problems {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Kind, dashIfZero(p.Checkpoint), dashIfZero(p.EventID), p.Reason)
	}
	_ = tw.Flush()
	found := plural(int(rep.ProblemsFound), "problem") + " found"
	if rep.ProblemsTruncated {
		found += fmt.Sprintf(" (%d listed: --max-problems; the rest are counted only)", len(rep.Problems))
	}
	fmt.Fprintf(w, "TAMPERED: %s; checked %s\n", found, checked)
	if rep.ChainBroken {
		fmt.Fprintln(w, "the checkpoint chain is broken: the checkpoints after the break, and the events they cover, were not checked")
	}
}

// filledEvents is "N events (ids a, b, …)" for n events of which ids are
// listed.
func filledEvents(n int64, ids []int64) string {
	list := make([]string, len(ids))
	for i, id := range ids {
		list[i] = strconv.FormatInt(id, 10)
	}
	if int64(len(list)) < n {
		list = append(list, "…")
	}
	return fmt.Sprintf("%s (ids %s)", plural(int(n), "event"), strings.Join(list, ", "))
}

func dashIfZero(n int64) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

// isPermissionDenied reports whether err is PostgreSQL's insufficient
// privilege (42501).
func isPermissionDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}
