// Command inlet receives provider webhooks into your own PostgreSQL. One binary
// runs any of its services; see `inlet --help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/inlet-dev/inlet/internal/config"
)

// command is one subcommand: its flags are parsed by run from args.
type command struct {
	summary string
	run     func(ctx context.Context, env *environment, args []string) error
}

// environment is what a command may touch besides its flags.
type environment struct {
	stdout, stderr io.Writer
	// cmd is the command being run ("events list"), set as it parses its
	// flags: a usage error points to its --help.
	cmd string
}

var commands = map[string]command{
	"dev":           {"run ingress, streamer and the configured consumers in one process on embedded defaults", runDev},
	"ingress":       {"run the webhook receiver (POST /webhooks/{source})", runIngress},
	"migrate":       {"apply the database schema migrations (idempotent)", runMigrate},
	"streamer":      {"run the streamer: lease due jobs and publish references on the bus", runStreamer},
	"consumer":      {"run the ready consumers (log, http-forward) of the config file", runConsumer},
	"send":          {"sign a test webhook with a configured source's secret and POST it", runSend},
	"events":        {"query the event log: list, show (exact bytes), re-verify signatures", runEvents},
	"dlq":           {"inspect dead-lettered jobs: list, show", runDLQ},
	"replay":        {"re-queue a job, a handler's dead letters, or matching events to one handler", runReplay},
	"backfill":      {"fill the event log from Stripe's or GitHub's history API (resumable)", runBackfill},
	"reconcile":     {"store the events a provider lists for a window that never arrived as webhooks", runReconcile},
	"audit":         {"seal the event log into tamper-evident checkpoints, and verify them", runAudit},
	"subscriptions": {"list subscriptions; switch a retired handler's off", runSubscriptions},
	"roles":         {"a database role per consumer, held to its own handlers (as the owner)", runRoles},
	"retention":     {"drop whole old periods of the event log; create partitions ahead (as the owner)", runRetention},
	"relay":         {"run the pass-through relay: verify, forward signed to the customer's ingress, store nothing", runRelay},
	"config":        {"check a config file as every service would: ok, or every problem (FILE:LINE: key.path: message)", runConfig},
	"control-plane": {"run the multi-tenant receiver of data planes' attempt metadata (reporter:)", runControlPlane},
}

// errUsage marks errors that are the caller's wording, exit code 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signalContext()
	env := &environment{stdout: os.Stdout, stderr: os.Stderr}
	code := exitCode(env, run(ctx, env, os.Args[1:]))
	stop()
	os.Exit(code)
}

// exitCode reports err on stderr in one line and returns the exit code: 0
// (none, or --help), 2 for a usage error, which points to the command's
// --help rather than printing it, 1 otherwise.
func exitCode(env *environment, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if _, ok := errors.AsType[*config.Problems](err); ok && !errors.Is(err, errUsage) {
		printError(env.stderr, err)
		return 1
	}
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	if errors.Is(err, errUsage) {
		msg = strings.TrimPrefix(msg, errUsage.Error()+": ")
		fmt.Fprintf(env.stderr, "inlet: %s; see '%s --help'\n", msg, strings.TrimSpace("inlet "+env.cmd))
		return 2
	}
	fmt.Fprintln(env.stderr, "inlet: "+msg)
	return 1
}

// printError prints err on one line, or a config file's problems one a line
// (FILE:LINE: key.path: message), each after "inlet: ".
func printError(w io.Writer, err error) {
	if _, ok := errors.AsType[*config.Problems](err); ok {
		for line := range strings.SplitSeq(err.Error(), "\n") {
			fmt.Fprintln(w, "inlet: "+line)
		}
		return
	}
	fmt.Fprintln(w, "inlet: "+strings.ReplaceAll(err.Error(), "\n", " "))
}

// signalContext is cancelled by the first SIGINT/SIGTERM (or SIGHUP: the
// terminal closed), so services drain; a second one runs the exit hooks
// (onForcedExit) and exits at once. SIGHUP is left alone when it is ignored
// (nohup).
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	sigs := []os.Signal{syscall.SIGINT, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	signal.Notify(ch, sigs...)
	go func() {
		sig := <-ch
		fmt.Fprintf(os.Stderr, "inlet: %s received, draining (send again to exit at once)\n", sig)
		cancel()
		<-ch
		fmt.Fprintln(os.Stderr, "inlet: second signal, exiting now")
		runExitHooks()
		os.Exit(130)
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

// exitHooks is what a second signal runs before exiting at once: what must
// not outlive the process (the local PostgreSQL of inlet dev, which runs in
// a process group of its own, so no Ctrl-C reaches it).
var exitHooks struct {
	mu    sync.Mutex
	next  int
	hooks map[int]func()
}

// onForcedExit registers f to run if a second signal makes inlet exit at
// once; remove unregisters it. Hooks run in reverse registration order.
func onForcedExit(f func()) (remove func()) {
	exitHooks.mu.Lock()
	defer exitHooks.mu.Unlock()
	if exitHooks.hooks == nil {
		exitHooks.hooks = map[int]func(){}
	}
	id := exitHooks.next
	exitHooks.next++
	exitHooks.hooks[id] = f
	return func() {
		exitHooks.mu.Lock()
		defer exitHooks.mu.Unlock()
		delete(exitHooks.hooks, id)
	}
}

func runExitHooks() {
	exitHooks.mu.Lock()
	ids := make([]int, 0, len(exitHooks.hooks))
	for id := range exitHooks.hooks {
		ids = append(ids, id)
	}
	hooks := exitHooks.hooks
	exitHooks.hooks = nil
	exitHooks.mu.Unlock()
	sort.Sort(sort.Reverse(sort.IntSlice(ids)))
	for _, id := range ids {
		hooks[id]()
	}
}

func run(ctx context.Context, env *environment, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command given", errUsage)
	}
	if args[0] == "help" && len(args) > 1 {
		// inlet help events [list]: that command's help, as its --help.
		return run(ctx, env, append(slices.Clone(args[1:]), "--help"))
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.stdout)
		return nil
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	env.cmd = args[0]
	return cmd.run(ctx, env, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprint(w, `inlet receives provider webhooks into your own PostgreSQL.

Usage: inlet <command> [flags]

Commands:
`)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, `
Run 'inlet <command> --help' (or 'inlet help <command>') for a command's
flags. Configuration is one YAML file (--config, default inlet.yaml; see
inlet.example.yaml). Without --config a command reads ./inlet.yaml, else the
project's: that of the nearest parent directory holding an inlet.yaml or a
.git (as git finds its repository), when it holds an inlet.yaml; with
neither, inlet dev, send and the operator commands use inlet dev's embedded
defaults. A relative ${file:PATH} is read from the directory of the config
file that holds it. Every command uses the same database: --database-url
where a command has it, else the file's database_url, else DATABASE_URL, else
the local PostgreSQL that inlet dev started from this directory or the
nearest parent directory that has one (.inlet/database_url, looked for as git
looks for .git). inlet send posts to the inlet dev running there
(.inlet/ingress_url) unless given --url. A parent's inlet.yaml, or an
.inlet/, that another user owns is refused, as git refuses another owner's
repository (--config PATH reads a file whoever owns it).
`)
}

// newFlagSet returns a flag set whose --help prints the command's summary,
// usage line and flags, and whose errors are usage errors.
func newFlagSet(env *environment, name, args, long string) *flag.FlagSet {
	env.cmd = name
	fs := flag.NewFlagSet("inlet "+name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() {
		fmt.Fprintf(env.stdout, "Usage: inlet %s [flags]%s\n\n%s\n\nFlags:\n", name, args, strings.TrimSpace(long))
		fs.SetOutput(env.stdout)
		fs.PrintDefaults()
		fs.SetOutput(env.stderr)
	}
	return fs
}

// parseFlags parses args, allowing flags after positional arguments
// (`inlet send github --id x`); positional ones stay in fs.Args(). A bad flag
// is a usage error, reported in one line (not with the whole --help, which
// the flag package would print); --help prints the help.
func parseFlags(fs *flag.FlagSet, args []string) error {
	help, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := parseInterspersed(fs, args)
	fs.Usage = help
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		help()
	}
	return err
}

// flagsOnly refuses the positional arguments of a command that takes flags
// only: a flag that lost its dashes ("dry-run", an em-dashed "—listen") would
// otherwise be dropped without a word and the command run on other settings
// than the operator wrote.
func flagsOnly(fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: %s takes flags only, got %q", errUsage, fs.Name(), fs.Args())
	}
	return nil
}

func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if rest[0] == "--" {
			positional = append(positional, rest[1:]...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	return fs.Parse(append([]string{"--"}, positional...))
}
