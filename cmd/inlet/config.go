package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"strings"

	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/config"
)

var configVerbs = map[string]subcommand{
	"check": {"check the file as every service does: exit 0 and one ok line, or every problem and exit 1", runConfigCheck},
}

func runConfig(ctx context.Context, env *environment, args []string) error {
	return runVerbs(ctx, env, "config", `
The configuration file (see docs/configuration.md).`, configVerbs, args)
}

func runConfigCheck(_ context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "config check", "", `
Check a configuration file as every service checks it when it starts (each
one checks the whole file, not only its own sections): unknown keys (with
the key they are likely a typo of), values of the wrong type, settings out
of range, and what spans two sections. Prints "FILE: ok" and exits 0, or
prints the problems found, one a line as FILE:LINE: key.path: message, and
exits 1: every unknown key and wrongly typed value, and each section's first
setting out of range (fix those and check again for the next).

Every ${VAR} and ${file:PATH} must resolve, as for inlet dev; in CI, where
the secrets are not set, --allow-unset lets them be missing and skips only
the checks of the values that name them.

A file whose sources accept a secret of the embedded defaults (public, in
Inlet's repository) while ingress.listen is not a loopback address passes,
with a warning on stderr.`)
	cfgPath := configFlag(fs)
	allowUnset := fs.Bool("allow-unset", false, "let ${VAR}s and ${file:...} secrets be missing; skip the checks that need their values")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: inlet config check takes no arguments, got %q", errUsage, fs.Args())
	}
	service := config.AllSections
	if *allowUnset {
		service = config.NoSection
	}
	if *cfgPath == defaultConfigPath {
		// The file every other command here would read (loadServiceConfig).
		if _, err := os.Stat(*cfgPath); errors.Is(err, iofs.ErrNotExist) {
			p, err := projectConfig()
			if err != nil {
				return err
			}
			*cfgPath = cmp.Or(p, *cfgPath)
		}
	}
	cfg, err := inletyaml.LoadFor(*cfgPath, service)
	if ps, ok := errors.AsType[*config.Problems](err); ok {
		fmt.Fprintln(env.stdout, ps.Error())
		n := "1 problem"
		if len(ps.List) != 1 {
			n = fmt.Sprintf("%d problems", len(ps.List))
		}
		return fmt.Errorf("%s: %s", *cfgPath, n)
	}
	if errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("config file %s does not exist", *cfgPath)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "%s: ok\n", *cfgPath)
	// Not a problem of the file (a development setup may mean it), but
	// worth a line: public secrets reachable from other hosts.
	if names := reachablePublicSecrets(cfg); len(names) > 0 {
		fmt.Fprintf(env.stderr, "%s: warning: sources %s accept the embedded defaults' public development secrets, and ingress.listen %q "+
			"reaches beyond this machine: any host that reaches it can send webhooks that verify\n",
			*cfgPath, strings.Join(names, ", "), cfg.Ingress.Listen)
	}
	return nil
}
