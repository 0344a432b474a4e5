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
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand: its flags are parsed by run from args.
type command struct {
	summary string
	run     func(ctx context.Context, env *environment, args []string) error
}

// environment is what a command may touch besides its flags.
type environment struct {
	stdout, stderr io.Writer
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
	"control-plane": {"run the multi-tenant receiver of data planes' attempt metadata (reporter:)", runControlPlane},
}

// errUsage marks errors that are the caller's wording, exit code 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signalContext()
	defer stop()
	env := &environment{stdout: os.Stdout, stderr: os.Stderr}
	if err := run(ctx, env, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		msg := strings.ReplaceAll(err.Error(), "\n", " ")
		fmt.Fprintln(os.Stderr, "inlet: "+msg)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// signalContext is cancelled by the first SIGINT/SIGTERM, so services drain;
// a second one exits at once.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-ch
		fmt.Fprintf(os.Stderr, "inlet: %s received, draining (send again to exit at once)\n", sig)
		cancel()
		<-ch
		fmt.Fprintln(os.Stderr, "inlet: second signal, exiting now")
		os.Exit(130)
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

func run(ctx context.Context, env *environment, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.stdout)
		if len(args) == 0 {
			return fmt.Errorf("%w: no command given", errUsage)
		}
		return nil
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return fmt.Errorf("%w: unknown command %q (see inlet --help)", errUsage, args[0])
	}
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
Run 'inlet <command> --help' for a command's flags. Configuration is one YAML
file (--config, default inlet.yaml; see inlet.example.yaml); DATABASE_URL
supplies the database when the file does not.
`)
}

// newFlagSet returns a flag set whose --help prints the command's summary,
// usage line and flags, and whose errors are usage errors.
func newFlagSet(env *environment, name, args, long string) *flag.FlagSet {
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
// (`inlet send github --id x`); positional ones stay in fs.Args().
func parseFlags(fs *flag.FlagSet, args []string) error {
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
