package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/config"
)

const defaultConfigPath = "inlet.yaml"

func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", defaultConfigPath, "path of the YAML configuration file")
}

// loadConfig reads path. When the path is the default and the file does not
// exist, fallback (if non-nil) supplies the configuration instead.
func loadConfig(path string, fallback func() (inletyaml.Config, error)) (inletyaml.Config, string, error) {
	return loadServiceConfig(path, config.AllSections, fallback)
}

// loadServiceConfig is loadConfig of the sections service reads.
func loadServiceConfig(path string, service config.Service, fallback func() (inletyaml.Config, error)) (inletyaml.Config, string, error) {
	c, err := inletyaml.LoadFor(path, service)
	if err == nil {
		return c, path, nil
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

// devDataDir is inlet dev's default --data-dir: its local PostgreSQL, and
// the file database_url naming it.
const devDataDir = ".inlet"

// databaseHelp says where every command's database comes from: the rule of
// databaseURL, for the --help of each command that connects.
const databaseHelp = `The database comes from --database-url (where the command has it), else
database_url in the config file, else DATABASE_URL, else the local PostgreSQL
that inlet dev started from this directory (.inlet/database_url).`

// databaseURL is the database a command connects to, by one rule for every
// command: flagURL (--database-url), else configured (the config file's
// database_url, which WithDefaults fills from DATABASE_URL when the file has
// none), else the URL inlet dev wrote to .inlet/database_url when it started
// its local PostgreSQL here. inlet dev itself starts that PostgreSQL exactly
// when configured is empty, so every command reaches the database inlet dev
// uses, with or without a config file. "" when there is none.
func databaseURL(flagURL, configured string) string {
	if u := cmp.Or(flagURL, configured); u != "" {
		return u
	}
	b, err := os.ReadFile(filepath.Join(devDataDir, "database_url"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// errNoDatabase is the error of a command that found no database URL;
// withFlag when the command has --database-url.
func errNoDatabase(cfgPath string, withFlag bool) error {
	pass := ""
	if withFlag {
		pass = "pass --database-url, "
	}
	return fmt.Errorf("%w: no database: %sset database_url in %s or DATABASE_URL, or start inlet dev in this directory (it writes %s)",
		errUsage, pass, cfgPath, filepath.Join(devDataDir, "database_url"))
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
