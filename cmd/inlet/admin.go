package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/database"
)

// What the operator commands (events, dlq, replay) share: the config, the
// webhook_operator pool, and output for people (tables) and scripts (--json).

// operatorHelp ends the --help of every operator command.
const operatorHelp = `

The database is admin.database_url of the config file (--config, default
inlet.yaml) when set; else, as for every command: database_url in the config
file, else DATABASE_URL, else the local PostgreSQL that inlet dev started
from this directory or the nearest parent that has one (.inlet/database_url),
with or without a config file.
The commands run as admin.db_role (default webhook_operator): grant it to
your login role (GRANT webhook_operator TO you). --json prints the result as
JSON for scripts;
a list as {"items": [...], "next": "<--before of the next page>"}, with no
"next" on the last page.`

// operatorConfig loads the config of an operator command. Without a config
// file it falls back to the embedded dev defaults; its database is
// admin.database_url, else the one of databaseURL (so the database inlet dev
// started here is found with or without a config file).
func operatorConfig(path string) (inletyaml.Config, string, error) {
	cfg, from, err := loadConfig(path, inletyaml.Dev)
	if err != nil {
		return cfg, from, err
	}
	if cfg.Admin.DatabaseURL == "" {
		if cfg.DatabaseURL, err = databaseURL("", cfg.DatabaseURL); err != nil {
			return cfg, from, err
		}
	}
	if cfg.Admin.DatabaseURL == "" && cfg.DatabaseURL == "" {
		return cfg, from, errNoDatabase(path, false)
	}
	return cfg, from, nil
}

// openOperator opens the operator pool of cfg.
func openOperator(ctx context.Context, cfg inletyaml.Config) (*pgxpool.Pool, error) {
	return database.Open(ctx, cmp.Or(cfg.Admin.DatabaseURL, cfg.DatabaseURL),
		database.Options{Role: *cfg.Admin.DBRole, AppName: "inlet-admin", MaxConns: 4})
}

// withOperator loads the config, opens the pool and runs f.
func withOperator(ctx context.Context, env *environment, cfgPath string, f func(pool *pgxpool.Pool, cfg inletyaml.Config, from string) error) error {
	cfg, from, err := operatorConfig(cfgPath)
	if err != nil {
		return err
	}
	pool, err := openOperator(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	return cliError(f(pool, cfg, from))
}

// cliError makes the admin package's bad-request errors usage errors (exit 2).
func cliError(err error) error {
	if err != nil && errors.Is(err, admin.ErrInvalid) && !errors.Is(err, errUsage) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return err
}

func sourcesOf(cfg inletyaml.Config) admin.Sources {
	s := admin.Sources{}
	for _, src := range cfg.Sources {
		s[src.Name] = src.Config
	}
	return s
}

// adminServer is the admin HTTP API that inlet ingress and inlet dev serve
// when admin.listen is set, over a pool of its own.
type adminServer struct {
	api  *admin.API
	pool *pgxpool.Pool
	log  *slog.Logger
}

// startAdmin starts the admin API of cfg; nil (whose stop is a no-op) when
// admin.listen is not set.
func startAdmin(ctx context.Context, cfg inletyaml.Config, log *slog.Logger) (*adminServer, error) {
	if cfg.Admin.Listen == "" {
		return nil, nil
	}
	log = log.With(slog.String("service", "admin"))
	pool, err := openOperator(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// One budget of wrong tokens per client address, whether tried on the
	// API, the dashboard's form or its bearer header.
	limiter := admin.NewAuthLimiter(admin.AuthLimit{})
	dash, err := newDashboard(cfg, pool, limiter, log)
	if err != nil {
		pool.Close()
		return nil, err
	}
	api, err := admin.NewAPI(admin.APIConfig{Listen: cfg.Admin.Listen, Token: cfg.Admin.Token, DB: pool, Sources: sourcesOf(cfg), Logger: log,
		AuthLimiter: limiter, Dashboard: dash, LoopbackHostsOnly: inletyaml.PublicAdminToken(cfg),
		MaxTypesPerSource: maxTypesPerSource(cfg)})
	if err == nil {
		err = api.Start(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &adminServer{api: api, pool: pool, log: log}, nil
}

func (s *adminServer) stop() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.api.Stop(ctx); err != nil {
		s.log.Warn("stop admin API", slog.String("error", err.Error()))
	}
	s.pool.Close()
}

// subcommand is one verb of a command with verbs (inlet events list).
type subcommand struct {
	summary string
	run     func(ctx context.Context, env *environment, args []string) error
}

// runVerbs dispatches args[0] to its verb; --help lists them.
func runVerbs(ctx context.Context, env *environment, name, long string, verbs map[string]subcommand, args []string) error {
	names := make([]string, 0, len(verbs))
	for n := range verbs {
		names = append(names, n)
	}
	sort.Strings(names)
	help := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: inlet %s <%s> [flags]\n\n%s\n\nCommands:\n", name, strings.Join(names, "|"), strings.TrimSpace(long))
		for _, n := range names {
			fmt.Fprintf(w, "  %-7s %s\n", n, verbs[n].summary)
		}
		fmt.Fprintf(w, "\nRun 'inlet %s <command> --help' for its flags (every one takes --config).\n", name)
	}
	env.cmd = name
	if len(args) == 0 {
		return fmt.Errorf("%w: %s needs a command: %s", errUsage, name, strings.Join(names, ", "))
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		help(env.stdout)
		return flag.ErrHelp
	}
	v, ok := verbs[args[0]]
	if !ok {
		return fmt.Errorf("%w: %s has no command %q (%s)", errUsage, name, args[0], strings.Join(names, ", "))
	}
	return v.run(ctx, env, args[1:])
}

// timeFlag parses the value of --name as admin.ParseTime does.
func timeFlag(name, value string) (time.Time, error) {
	t, err := admin.ParseTime(value, time.Now())
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: --%s: %v", errUsage, name, err)
	}
	return t, nil
}

// limitFlag checks --limit before anything connects. The flag defaults to
// admin.DefaultLimit, so a 0 was written out; the admin package would read it
// as none given (the default page), not as the refusal -1 gets.
func limitFlag(n int) error {
	if n < 1 || n > admin.MaxLimit {
		return fmt.Errorf("%w: --limit %d: must be between 1 and %d", errUsage, n, admin.MaxLimit)
	}
	return nil
}

// idArg is the one positional id argument of a command.
func idArg(fs *flag.FlagSet, what string) (int64, error) {
	if fs.NArg() != 1 {
		return 0, fmt.Errorf("%w: want one %s, got %d arguments", errUsage, what, fs.NArg())
	}
	id, err := strconv.ParseInt(fs.Arg(0), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%w: %s %q: must be a positive integer", errUsage, what, fs.Arg(0))
	}
	return id, nil
}

// jsonList is the one shape of every --json list: its items (an array, empty
// when nothing matches) and, when more match than were printed, in next the
// value to pass as --before for the next page (absent on the last page, and
// for lists that are never paged).
type jsonList[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next,omitempty"`
}

// printList prints items as a jsonList; next is the next page's --before, 0
// on the last page.
func printList[T any](w io.Writer, items []T, next int64) error {
	l := jsonList[T]{Items: items}
	if l.Items == nil {
		l.Items = []T{}
	}
	if next != 0 {
		l.Next = strconv.FormatInt(next, 10)
	}
	return printJSON(w, l)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// safe makes s harmless on a terminal: text with control characters (or
// anything not printable) is shown quoted with escapes. Stored values come
// from providers and handlers, not from us.
func safe(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.QuoteToGraphic(s)
}

// cell is safe for a table cell: "-" for empty.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return safe(s)
}

func optCell(s *string) string {
	if s == nil {
		return "-"
	}
	return cell(*s)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

func optStamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}

// plural is "1 job", "2 jobs".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
