package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/schema/queries"
)

const defaultConfigPath = "inlet.yaml"

func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", defaultConfigPath, "path of the YAML configuration file (inlet.yaml here, else the project's: see inlet help)")
}

// loadConfig reads path. When the path is the default and the file does not
// exist, the project's inlet.yaml (projectConfig) is read, else fallback (if
// non-nil) supplies the configuration instead. A project's inlet.yaml of
// another user is refused (projectConfig).
func loadConfig(path string, fallback func() (inletyaml.Config, error)) (inletyaml.Config, string, error) {
	return loadServiceConfig(path, config.AllSections, fallback)
}

// loadServiceConfig is loadConfig of the sections service reads. The string
// it returns says where the configuration came from: the file read, or
// "embedded defaults".
func loadServiceConfig(path string, service config.Service, fallback func() (inletyaml.Config, error)) (inletyaml.Config, string, error) {
	c, err := inletyaml.LoadFor(path, service)
	if err == nil {
		return c, path, nil
	}
	if path == defaultConfigPath && errors.Is(err, fs.ErrNotExist) {
		// In a subdirectory of a project, the project's file: the one
		// beside the .inlet/ that findDevFile finds, so a command does not
		// mix inlet dev's database and ingress with another configuration
		// (its secrets: review helper-231).
		p, err := projectConfig()
		if err != nil {
			return inletyaml.Config{}, "", err
		}
		if p != "" {
			c, err := inletyaml.LoadFor(p, service)
			if err != nil {
				return inletyaml.Config{}, "", err
			}
			return c, p, nil
		}
	}
	if fallback != nil && path == defaultConfigPath && errors.Is(err, fs.ErrNotExist) {
		c, err := fallback()
		return c, "embedded defaults", err
	}
	if errors.Is(err, fs.ErrNotExist) {
		return inletyaml.Config{}, "", fmt.Errorf("config file %s does not exist (copy inlet.example.yaml, or pass --config)", path)
	}
	return inletyaml.Config{}, "", err
}

// projectConfig is the inlet.yaml of the project the working directory is
// in, as git reads the config of the repository it runs in: that of the
// nearest directory, the working one or a parent, that is a project's own
// (projectRoot, where findDevFile stops), if it holds one. "" when there is
// none (the nearest project root holds only a .git, or there is no root
// up to /). An error when that inlet.yaml is another user's (checkOwner), as
// git refuses a repository of another owner: one planted in a shared parent
// such as /tmp would give a command its database, sources and forwarding
// URLs, with the user's own ${file:} secrets expanded into them.
func projectConfig() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", nil
	}
	for {
		if projectRoot(dir) {
			p := filepath.Join(dir, defaultConfigPath)
			if _, err := os.Stat(p); err != nil {
				return "", nil
			}
			if err := checkOwner(p, "pass --config "+p+" to use it"); err != nil {
				return "", err
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", nil
		}
		dir = parent
	}
}

// checkOwner refuses path, a file that the working directory's walk up
// found (projectConfig, findDevFile), when another user owns it: the entry
// itself, or what it names when it is a symbolic link. Its error names the
// file, its owner, and the way out: wayOut (the flag that uses it
// deliberately, or does without it), or a directory of the user's own. nil
// when the user owns it, or the system does not tell owners (fileOwner).
func checkOwner(path, wayOut string) error {
	uid := os.Getuid()
	for _, stat := range []func(string) (os.FileInfo, error){os.Lstat, os.Stat} {
		fi, err := stat(path)
		if err != nil {
			continue // the read that follows says why
		}
		owner, ok := fileOwner(fi)
		if !ok || int64(owner) == int64(uid) {
			continue
		}
		return fmt.Errorf("%s is owned by %s, not by you (uid %d): not read, as git refuses a repository of another user "+
			"(it could point this command at their database and URLs); %s, or run inlet from a directory of your own",
			path, ownerName(owner), uid, wayOut)
	}
	return nil
}

// ownerName is "uid N (name)", or "uid N" when the name is unknown.
func ownerName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil && u.Username != "" {
		return "uid " + id + " (" + u.Username + ")"
	}
	return "uid " + id
}

// devDataDir is inlet dev's default --data-dir: its local PostgreSQL, the
// file database_url naming it, and ingress_url, the URL its webhook
// listener answers on while it runs.
const devDataDir = ".inlet"

// databaseHelp says where every command's database comes from: the rule of
// databaseURL, for the --help of each command that connects.
const databaseHelp = `The database comes from --database-url (where the command has it), else
database_url in the config file, else DATABASE_URL, else the local PostgreSQL
that inlet dev started from this directory or the nearest parent directory
that has one (.inlet/database_url, looked for as git looks for .git,
not past a directory holding an inlet.yaml or a .git).`

// findDevFile is the path of .inlet/name in the working directory, else in
// the nearest parent directory that has one, up to the filesystem root or
// the first directory holding an inlet.yaml or a .git: as git finds .git, so a command run in a subdirectory of the one inlet dev
// runs in finds what it wrote. "" when there is none. An error when the
// .inlet/ found, or its file, is another user's (checkOwner): their inlet
// dev's database or ingress is not this user's; wayOut says how to do
// without it.
func findDevFile(name, wayOut string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", nil
	}
	for {
		p := filepath.Join(dir, devDataDir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			for _, q := range []string{filepath.Dir(p), p} {
				if err := checkOwner(q, wayOut); err != nil {
					return "", err
				}
			}
			return p, nil
		}
		// A project's own directory ends the search, as git stops at its
		// repository: a subproject with its own inlet.yaml or .git, where
		// inlet dev has not run yet, must not reach the parent project's
		// database (review helper-220).
		if projectRoot(dir) {
			return "", nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", nil
		}
		dir = parent
	}
}

// projectRoot reports whether dir is a project's own directory: it holds
// an inlet.yaml or a .git.
func projectRoot(dir string) bool {
	for _, n := range []string{defaultConfigPath, ".git"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			return true
		}
	}
	return false
}

// devStateDir is the .inlet directory holding the database_url that
// databaseURL finds (this directory's or a parent's), else ./.inlet: where a
// command keeps its own state beside inlet dev's (backfill's cursor). An
// error when that is another user's (findDevFile); wayOut says how to do
// without it.
func devStateDir(wayOut string) (string, error) {
	p, err := findDevFile("database_url", wayOut)
	if err != nil {
		return "", err
	}
	if p != "" {
		return filepath.Dir(p), nil
	}
	return devDataDir, nil
}

// devDatabaseWayOut is how a command does without the .inlet/database_url
// of another user that findDevFile refuses.
const devDatabaseWayOut = "set DATABASE_URL (or database_url in the config file, or pass --database-url where the command has it) to name a database"

// databaseURL is the database a command connects to, by one rule for every
// command: flagURL (--database-url), else configured (the config file's
// database_url, which WithDefaults fills from DATABASE_URL when the file has
// none), else the URL inlet dev wrote to .inlet/database_url when it started
// its local PostgreSQL here or in a parent directory (findDevFile). inlet
// dev itself starts that PostgreSQL exactly when configured is empty, so
// every command reaches the database inlet dev uses, with or without a
// config file. "" when there is none; an error when the .inlet/ found is
// another user's (findDevFile).
func databaseURL(flagURL, configured string) (string, error) {
	if u := cmp.Or(flagURL, configured); u != "" {
		return u, nil
	}
	p, err := findDevFile("database_url", devDatabaseWayOut)
	if p == "" || err != nil {
		return "", err
	}
	b, err := os.ReadFile(p) //nolint:gosec // G304: inlet dev's own file, found as git finds .git
	if err != nil {
		return "", nil
	}
	return strings.TrimSpace(string(b)), nil
}

// errNoDatabase is the error of a command that found no database URL;
// withFlag when the command has --database-url.
func errNoDatabase(cfgPath string, withFlag bool) error {
	pass := ""
	if withFlag {
		pass = "pass --database-url, "
	}
	return fmt.Errorf("%w: no database: %sset database_url in %s or DATABASE_URL, or start inlet dev in this directory or a parent (it writes %s)",
		errUsage, pass, cfgPath, filepath.Join(devDataDir, "database_url"))
}

// ingressURLHelp says where inlet send's default --url comes from: the rule
// of ingressURL.
const ingressURLHelp = `Without --url it posts to the ingress of the inlet dev running in this
directory or the nearest parent directory that has one (the URL inlet dev
writes to .inlet/ingress_url when its webhook listener is up, and removes
when it stops), else to ingress.listen of the config file (or the embedded
defaults, :8080; a wildcard host such as ":9090" or "0.0.0.0:9090" is
localhost).`

// ingressURL is the base URL of the ingress a command talks to without
// --url, and where that came from (for its errors): the URL inlet dev wrote
// to .inlet/ingress_url (findDevFile), else ingress.listen of cfg, read
// from from (the config file, or the embedded defaults), as this machine
// reaches it. An error when the .inlet/ found is another user's
// (findDevFile).
func ingressURL(cfg inletyaml.Config, from string) (url, origin string, err error) {
	stale := ""
	p, err := findDevFile("ingress_url", "pass --url to name the ingress")
	if err != nil {
		return "", "", err
	}
	if p != "" {
		b, err := os.ReadFile(p) //nolint:gosec // G304: inlet dev's own file, found as git finds .git
		// "URL PID": the file of an inlet dev that is gone (a kill -9
		// leaves it) is skipped, or send would post to whatever listens
		// on that port since (review helper-220).
		f := strings.Fields(string(b))
		switch {
		case err != nil || len(f) == 0:
		case len(f) > 1 && !processAlive(f[1]):
			stale = " (" + p + " is stale: the inlet dev that wrote it, pid " + f[1] + ", is gone)"
		default:
			return f[0], p + ", written by inlet dev when it started there", nil
		}
	}
	return "http://" + dashboardHost(cfg.Ingress.Listen), "ingress.listen of " + from + stale, nil
}

// maxKnownNames caps the names that a usage error about an unknown source
// or handler offers.
const maxKnownNames = 20

// checkSource refuses a --source filter naming a source that is neither in
// the configuration nor ever seen in the database: such a filter matches
// nothing, and an empty list (exit 0) cannot tell a typo from a quiet
// source. A source removed from the configuration whose events are kept is
// seen, so its events stay listable. "" (no filter) passes.
//
// Here, not in admin: the admin API's filters are left as they are (an
// empty page there).
func checkSource(ctx context.Context, pool *pgxpool.Pool, cfg inletyaml.Config, from, name string) error {
	if name == "" {
		return nil
	}
	configured := make([]string, 0, len(cfg.Sources))
	for _, s := range cfg.Sources {
		if s.Name == name {
			return nil
		}
		configured = append(configured, s.Name)
	}
	// One probe of idx_events_provider_received_at per partition, never a
	// scan of the log (inlet replay --source asks the same).
	stored, err := queries.New(pool).AdminSourceKnown(ctx, name)
	if err != nil {
		return fmt.Errorf("look up source %q: %w", name, err)
	}
	if stored {
		return nil
	}
	// event_types (a row per source and type) knows the sources seen, also
	// those whose events retention has dropped since; folding the latest
	// arrivals first (EventTypes) names the ones not folded yet too. The
	// fold is a write the auditor's role may not make: it reads what is
	// folded (review helper-220).
	seen, err := seenSources(ctx, pool, maxTypesPerSource(cfg))
	if err != nil {
		return fmt.Errorf("look up source %q: %w", name, err)
	}
	if slices.Contains(seen, name) {
		return nil
	}
	return errUnknownName("source", name, from, configured, seen)
}

// seenSources are the sources event_types has seen, the latest arrivals
// folded in first where the role may fold (webhook_operator), as they stand
// where it may not (webhook_auditor: SQLSTATE 42501).
func seenSources(ctx context.Context, pool *pgxpool.Pool, maxPerSource int) ([]string, error) {
	types, err := admin.EventTypes(ctx, pool, maxPerSource)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return queries.New(pool).AdminSeenSources(ctx)
	}
	if err != nil {
		return nil, err
	}
	seen := make([]string, 0, len(types))
	for _, t := range types {
		seen = append(seen, t.Source)
	}
	return slices.Compact(seen), nil
}

// checkHandler is checkSource for a --handler filter: a handler of the
// configuration's consumer.handlers, or one that ever subscribed (consumers
// register their subscriptions at start, Inlet never deletes one, and every
// job comes from one).
func checkHandler(ctx context.Context, pool *pgxpool.Pool, cfg inletyaml.Config, from, name string) error {
	if name == "" {
		return nil
	}
	configured := make([]string, 0, len(cfg.Consumer.Handlers))
	for _, h := range cfg.Consumer.Handlers {
		if h.Name == name {
			return nil
		}
		configured = append(configured, h.Name)
	}
	subscribed, err := queries.New(pool).AdminSubscribedHandlers(ctx)
	if err != nil {
		return fmt.Errorf("look up handler %q: %w", name, err)
	}
	if slices.Contains(subscribed, name) {
		return nil
	}
	return errUnknownName("handler", name, from, configured, subscribed)
}

// errUnknownName is the usage error of a filter naming an unknown what: the
// name, where it was looked for, and the known names, sorted, the first
// maxKnownNames of them. Names come from the database (a provider's
// source name, a consumer's handler): safe keeps them off the terminal's
// control sequences.
func errUnknownName(what, name, from string, configured, stored []string) error {
	known := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(configured), stored...))))
	offer := fmt.Sprintf("no %s is configured or seen yet", what)
	if len(known) > 0 {
		shown := make([]string, 0, min(len(known), maxKnownNames))
		for _, n := range known[:min(len(known), maxKnownNames)] {
			shown = append(shown, safe(n))
		}
		offer = what + "s known: " + strings.Join(shown, ", ")
		if more := len(known) - len(shown); more > 0 {
			offer += fmt.Sprintf(" and %d more", more)
		}
	}
	return fmt.Errorf("%w: no %s named %q, neither in the configuration (%s) nor seen in the database (a typo?); %s",
		errUsage, what, name, from, offer)
}

func newLogger(w io.Writer, c inletyaml.Log, defaultFormat string) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationText}
	format := c.Format
	if format == "" {
		format = defaultFormat
	}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// durationText writes a duration as its String() ("7.668695ms", as the text
// format does) rather than the JSON handler's integer nanoseconds.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

func stderrLogger(c inletyaml.Config, defaultFormat string) *slog.Logger {
	return newLogger(os.Stderr, c.Log, defaultFormat)
}

func splitHostPort(addr string) (string, string, error) { return net.SplitHostPort(addr) }
