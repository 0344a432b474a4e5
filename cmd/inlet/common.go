package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"

	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/internal/inletyaml"
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
