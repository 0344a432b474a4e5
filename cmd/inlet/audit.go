package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/audit"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/inletyaml"
)

const auditHelp = `

The database is the operator commands' (admin.database_url, else
database_url, else DATABASE_URL, else the local PostgreSQL of inlet dev in
this directory, .inlet/database_url). --role is the role assumed after connecting: grant it
to your login role.`

func runAudit(ctx context.Context, env *environment, args []string) error {
	return runVerbs(ctx, env, "audit", `
Tamper evidence for the event log: seal writes checkpoints (an RFC 6962
Merkle tree over the events in id order, each checkpoint naming the previous
one's hash); verify recomputes them from the events table.`, map[string]subcommand{
		"seal":   {"write checkpoints over the events received since the last one", runAuditSeal},
		"verify": {"recompute the checkpoints; report the first altered, missing or out-of-order event", runAuditVerify},
	}, args)
}

// withAuditDB loads the config and opens a small pool as role.
func withAuditDB(ctx context.Context, cfgPath, role string, f func(pool *pgxpool.Pool, cfg inletyaml.Config) error) error {
	cfg, _, err := operatorConfig(cfgPath)
	if err != nil {
		return err
	}
	pool, err := database.Open(ctx, cmp.Or(cfg.Admin.DatabaseURL, cfg.DatabaseURL),
		database.Options{Role: role, AppName: "inlet-audit", MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	return f(pool, cfg)
}

func runAuditSeal(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "audit seal", "", `
Seal the events received since the last checkpoint, up to the horizon: events
received more than --grace ago, stopping at a gap in the ids whose next event
is younger (an insert may still be in flight). With --every, seal again at
that interval until SIGTERM.`+auditHelp)
	cfgPath := configFlag(fs)
	role := fs.String("role", "webhook_sealer", "database role to assume")
	grace := fs.Duration("grace", 5*time.Second, "seal only events older than this")
	every := fs.Duration("every", 0, "seal at this interval until SIGTERM (0: one pass)")
	maxLeaves := fs.Int("max-leaves", 10000, "ids per checkpoint at most")
	asJSON := fs.Bool("json", false, "print the checkpoints written as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: inlet audit seal takes flags only, got %q", errUsage, fs.Args())
	}
	if *grace <= 0 || *every < 0 || *maxLeaves < 1 {
		return fmt.Errorf("%w: --grace must be positive, --every not negative, --max-leaves at least 1", errUsage)
	}
	return withAuditDB(ctx, *cfgPath, *role, func(pool *pgxpool.Pool, cfg inletyaml.Config) error {
		log := stderrLogger(cfg, "text")
		s, err := audit.NewSealer(audit.Config{DB: pool, Grace: *grace, Interval: cmp.Or(*every, time.Minute),
			MaxLeaves: *maxLeaves, Logger: log})
		if err != nil {
			return err
		}
		if *every > 0 {
			if err := s.Start(ctx); err != nil {
				return err
			}
			log.Info("audit sealer running", slog.Duration("every", *every), slog.Duration("grace", *grace))
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
Recompute every checkpoint from the events table and report the first
problem: an altered event (its leaf no longer matches its checkpoint, or its
body no longer hashes to body_sha256), a missing event, an event inserted out
of order (into a sealed range), or a broken checkpoint chain (a checkpoint
altered or removed). Exits 0 when intact, 1 with the reason otherwise.
Keep the printed head outside the database and pass it back with --head: a
removed newest checkpoint shows only that way.`+auditHelp)
	cfgPath := configFlag(fs)
	role := fs.String("role", "", "database role to assume (default admin.db_role, webhook_operator; webhook_auditor works too)")
	head := fs.String("head", "", "a checkpoint hash kept from an earlier verify or seal: the chain must contain it")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: inlet audit verify takes flags only, got %q", errUsage, fs.Args())
	}
	cfg, _, err := operatorConfig(*cfgPath)
	if err != nil {
		return err
	}
	r := *role
	if r == "" && cfg.Admin.DBRole != nil {
		r = *cfg.Admin.DBRole
	}
	return withAuditDB(ctx, *cfgPath, r, func(pool *pgxpool.Pool, _ inletyaml.Config) error {
		rep, err := audit.Verify(ctx, pool, audit.VerifyOptions{Head: *head})
		if err != nil {
			return err
		}
		if *asJSON {
			if err := printJSON(env.stdout, rep); err != nil {
				return err
			}
		} else if rep.OK {
			pruned := ""
			if rep.Pruned > 0 {
				pruned = fmt.Sprintf(", %d dropped by retention (webhook_ingress.retention_log)", rep.Pruned)
			}
			fmt.Fprintf(env.stdout, "intact: %s, %s through event id %d sealed (%d not yet sealed%s); head %s\n",
				plural(int(rep.Events), "event"), plural(int(rep.Checkpoints), "checkpoint"), rep.SealedThrough, rep.Unsealed, pruned, cmp.Or(rep.Head, "-"))
		}
		if !rep.OK {
			return errors.New(rep.Problem.Reason)
		}
		return nil
	})
}
