package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

var roleVerbs = map[string]subcommand{
	"create-consumer": {"make (or update) a team's consumer role, held to its handlers", runRolesCreateConsumer},
	"list":            {"list consumer roles: handlers, and who may act as each", runRolesList},
	"drop-consumer":   {"remove a consumer role and its handler list", runRolesDropConsumer},
}

// rolesHelp ends the --help of every roles command.
const rolesHelp = `

They run as the owner of webhook_ingress (the role of inlet migrate, which
may create roles). ` + databaseHelp

func runRoles(ctx context.Context, env *environment, args []string) error {
	return runVerbs(ctx, env, "roles", `
A database role per consumer service (or group of handlers), so one team's
consumer cannot read, complete, fail or disable another team's handlers.
PostgreSQL enforces it: row-level security holds a consumer role to the jobs,
attempt history, subscriptions and liveness rows of its own handlers, and to
the bodies of events that have a job for one of them. The shared
webhook_worker role keeps running every handler (the single-team setup).`+rolesHelp, roleVerbs, args)
}

// consumerRolePrefix starts every consumer role's name: a consumer named
// payments runs as webhook_consumer_payments.
const consumerRolePrefix = "webhook_consumer_"

var consumerName = regexp.MustCompile(`^[a-z0-9_]+$`)

// consumerRole is the role of consumer name (which may be the role's own
// name already).
func consumerRole(name string) (string, error) {
	role := name
	if !strings.HasPrefix(role, consumerRolePrefix) {
		role = consumerRolePrefix + name
	}
	if !consumerName.MatchString(name) || len(role) > 63 || role == consumerRolePrefix {
		return "", fmt.Errorf("%w: consumer name %q: lower-case letters, digits and _, the role (%s…) at most 63 bytes", errUsage, name, consumerRolePrefix)
	}
	return role, nil
}

// rolesFlags are what every roles command takes.
func rolesFlags(fs *flag.FlagSet) (cfgPath, dbURL *string) {
	return configFlag(fs), fs.String("database-url", "", "PostgreSQL URL of the schema owner (overrides the config file)")
}

// withOwner connects as the owner (the database of databaseURL) and runs f
// in one transaction.
func withOwner(ctx context.Context, cfgPath, dbURL string, f func(tx pgx.Tx) error) error {
	url := dbURL
	if url == "" {
		c, _, err := loadConfig(cfgPath, func() (inletyaml.Config, error) { return inletyaml.Config{}.WithDefaults(), nil })
		if err != nil {
			return err
		}
		if url, err = databaseURL("", c.DatabaseURL); err != nil {
			return err
		}
	}
	conn, err := connectOwner(ctx, url, cfgPath, "inlet-roles")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return pgx.BeginFunc(ctx, conn, f)
}

// connectURL connects to url as appName, giving up after 5 s unless the URL
// sets connect_timeout. Its errors never quote the URL:
// pgx's parse message may, password included (a key=value string with
// spaces around '=' is not masked).
func connectURL(ctx context.Context, url, appName string, opts ...func(*pgx.ConnConfig)) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, errors.New("database URL is not a valid PostgreSQL connection string")
	}
	database.DropClientParams(cc.RuntimeParams) // pool_max_conns: the server refuses it
	cc.RuntimeParams["application_name"] = appName
	if cc.ConnectTimeout == 0 {
		// As database.Open: a server that takes the connection but never
		// answers fails the command instead of hanging it.
		cc.ConnectTimeout = 5 * time.Second
	}
	for _, opt := range opts {
		opt(cc)
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return conn, nil
}

// connectOwner connects to url (the schema owner's, from databaseURL) as
// appName and checks the schema is migrated. The errors never quote the URL.
func connectOwner(ctx context.Context, url, cfgPath, appName string) (*pgx.Conn, error) {
	if url == "" {
		return nil, errNoDatabase(cfgPath, true)
	}
	conn, err := connectURL(ctx, url, appName)
	if err != nil {
		return nil, err
	}
	if err := schema.Check(ctx, conn); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

func runRolesCreateConsumer(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "roles create-consumer", " NAME", `
Make the database role webhook_consumer_NAME (NOLOGIN, a member of
webhook_consumer, which holds the consumers' grants) and record the handlers
it runs in webhook_ingress.consumer_roles, and the events it may take in
webhook_ingress.consumer_role_scopes. Run again, it sets the role's handlers
to the new list, and its scopes to the new ones when --scope is given (kept
otherwise). Row-level security then holds it to those handlers: it reads,
extends, completes and fails only their jobs, appends history only to them,
registers and disables only their subscriptions, says only they are alive,
and reads the body and headers only of events that have a job for one of
them.

--scope SOURCE[:TYPE] (globs, * any run of characters; TYPE defaults to *)
says which events: the role may enable a subscription only inside one of its
scopes (stripe with invoice.* under --scope stripe, not * or stri*), and
reads the body only of events inside one, and takes only its jobs inside
one, whatever subscriptions exist. So a team cannot subscribe its handler to
another team's events to read them. A new role needs at least one; --scope
'*' gives it every event (one team). Narrowing a scope leaves wider
subscriptions enabled (disable them with inlet subscriptions disable): their
jobs outside it expire into the dead letters, and the consumer's next start
refuses to register them until its configuration is narrowed too.

The consumer must run as the role: consumer.db_role: webhook_consumer_NAME
for inlet consumer, or consumers.OpenPoolAs in the SDK (SET ROLE after
logging in as a member), or log in as the role itself. --member grants it to
a login role; that login role should not also be a member of webhook_worker,
which runs every handler.

  inlet roles create-consumer payments --handlers billing,refunds --scope stripe --scope 'paddle:transaction.*' --member payments_login`+rolesHelp)
	cfgPath, dbURL := rolesFlags(fs)
	handlers := fs.String("handlers", "", "comma-separated handler names the role runs (required)")
	var scopeSources, scopeTypes []string
	fs.Func("scope", "SOURCE[:TYPE]: events the role may subscribe to and read (globs; TYPE defaults to *); repeatable; replaces the role's scopes (required for a new role)", func(s string) error {
		source, eventType, ok := strings.Cut(s, ":")
		if !ok {
			eventType = "*"
		}
		if source == "" {
			return fmt.Errorf("%q has no source: a pattern such as stripe, stripe* or *", s)
		}
		if err := validScopePattern(source); err != nil {
			return fmt.Errorf("source of %q: %v", s, err)
		}
		if err := validScopePattern(eventType); err != nil {
			return fmt.Errorf("type of %q: %v", s, err)
		}
		scopeSources, scopeTypes = append(scopeSources, source), append(scopeTypes, eventType)
		return nil
	})
	var members []string
	fs.Func("member", "login role that may act as the consumer role (GRANT role TO member); repeatable", func(s string) error {
		members = append(members, s)
		return nil
	})
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: inlet roles create-consumer takes one consumer name, got %d arguments", errUsage, fs.NArg())
	}
	role, err := consumerRole(fs.Arg(0))
	if err != nil {
		return err
	}
	var hs []string
	for h := range strings.SplitSeq(*handlers, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if err := bus.ValidHandlerName(h); err != nil {
			return fmt.Errorf("%w: --handlers: %q: %v", errUsage, h, err)
		}
		hs = append(hs, h)
	}
	if len(hs) == 0 {
		return fmt.Errorf("%w: inlet roles create-consumer needs --handlers (one or more, comma-separated)", errUsage)
	}
	for _, m := range members {
		if m == "" || m == role {
			return fmt.Errorf("%w: --member %q: a login role other than the consumer role", errUsage, m)
		}
	}
	return withOwner(ctx, *cfgPath, *dbURL, func(tx pgx.Tx) error {
		q := queries.New(tx)
		rows, err := q.CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role, Handlers: hs,
			ScopeProviders: scopeSources, ScopeTypes: scopeTypes})
		if err != nil {
			return fmt.Errorf("create consumer role %s: %w", role, err)
		}
		var created bool
		var changes, scopes [][2]string
		for _, r := range rows {
			created = r.RoleCreated
			if c, ok := strings.CutPrefix(r.Change, "scope_"); ok {
				scopes = append(scopes, [2]string{r.Handler, c})
			} else {
				changes = append(changes, [2]string{r.Handler, r.Change})
			}
		}
		var warnings []string
		for _, m := range members {
			if _, err := tx.Exec(ctx, "GRANT "+pgx.Identifier{role}.Sanitize()+" TO "+pgx.Identifier{m}.Sanitize()); err != nil {
				return fmt.Errorf("grant %s to %s: %w", role, m, err)
			}
			worker, err := q.ReachesWorkerRole(ctx, m)
			if err != nil {
				return err
			}
			if worker {
				warnings = append(warnings, fmt.Sprintf("warning: %s is also a member of webhook_worker, which runs every handler: it could SET ROLE webhook_worker (REVOKE webhook_worker FROM %s)", m, m))
			}
		}
		verb := "updated"
		if created {
			verb = "created"
		}
		fmt.Fprintf(env.stdout, "%s consumer role %s\n", verb, role)
		tw := newTable(env.stdout)
		fmt.Fprintln(tw, "HANDLER\tCHANGE")
		for _, c := range changes {
			fmt.Fprintf(tw, "%s\t%s\n", safe(c[0]), c[1])
		}
		if len(scopes) > 0 {
			fmt.Fprintln(tw, "SCOPE\tCHANGE")
		}
		for _, c := range scopes {
			fmt.Fprintf(tw, "%s\t%s\n", safe(c[0]), c[1])
		}
		tw.Flush()
		for _, m := range members {
			fmt.Fprintf(env.stdout, "granted to %s\n", m)
		}
		for _, w := range warnings {
			fmt.Fprintln(env.stderr, w)
		}
		fmt.Fprintf(env.stdout, "run its consumers as this role: consumer.db_role: %s (or consumers.OpenPoolAs)\n", role)
		return nil
	})
}

// consumerRoleRow is one line of inlet roles list.
type consumerRoleRow struct {
	Role     string   `json:"role"`
	Handlers []string `json:"handlers"`
	Scopes   []string `json:"scopes"`
	Members  []string `json:"members"`
}

func runRolesList(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "roles list", " [NAME]", `
List every consumer role (member of webhook_consumer) with the handlers it
runs, its scopes (SOURCE:TYPE, the events it may subscribe to and read) and
the roles that may act as it (its members, e.g. login roles), or only
consumer NAME's (an error when there is no such consumer role).`+rolesHelp)
	cfgPath, dbURL := rolesFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	only := ""
	switch fs.NArg() {
	case 0:
	case 1:
		r, err := consumerRole(fs.Arg(0))
		if err != nil {
			return err
		}
		only = r
	default:
		return fmt.Errorf("%w: inlet roles list takes at most one consumer name, got %d arguments", errUsage, fs.NArg())
	}
	return withOwner(ctx, *cfgPath, *dbURL, func(tx pgx.Tx) error {
		rows, err := queries.New(tx).ListConsumerRoles(ctx, only)
		if err != nil {
			return fmt.Errorf("list consumer roles: %w", err)
		}
		if only != "" && len(rows) == 0 {
			// A miss is no claim that there are none at all: the name
			// may be a typo while other consumer roles exist.
			return fmt.Errorf("no consumer role %s (inlet roles list shows them all)", only)
		}
		list := make([]consumerRoleRow, len(rows))
		for i, r := range rows {
			list[i] = consumerRoleRow(r)
		}
		if *asJSON {
			return printList(env.stdout, list, 0)
		}
		if len(list) == 0 {
			fmt.Fprintln(env.stdout, "no consumer roles (every consumer runs as webhook_worker)")
			return nil
		}
		tw := newTable(env.stdout)
		fmt.Fprintln(tw, "ROLE\tHANDLERS\tSCOPES\tMEMBERS")
		for _, r := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Role, safe(strings.Join(r.Handlers, ",")), cell(safe(strings.Join(r.Scopes, " "))),
				cell(strings.Join(r.Members, ",")))
		}
		return tw.Flush()
	})
}

func runRolesDropConsumer(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "roles drop-consumer", " NAME", `
Remove consumer role webhook_consumer_NAME: its rows of
webhook_ingress.consumer_roles and consumer_role_scopes, then the role (its memberships go with it).
Its handlers' subscriptions and jobs stay; run them under another role, or
switch them off with inlet subscriptions disable.`+rolesHelp)
	cfgPath, dbURL := rolesFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: inlet roles drop-consumer takes one consumer name, got %d arguments", errUsage, fs.NArg())
	}
	role, err := consumerRole(fs.Arg(0))
	if err != nil {
		return err
	}
	return withOwner(ctx, *cfgPath, *dbURL, func(tx pgx.Tx) error {
		handlers, err := queries.New(tx).DropConsumerRole(ctx, role)
		if err != nil {
			return fmt.Errorf("drop consumer role %s: %w", role, err)
		}
		fmt.Fprintf(env.stdout, "dropped consumer role %s (handlers: %s)\n", role, cell(strings.Join(handlers, ",")))
		return nil
	})
}

// validScopePattern checks one glob of a --scope: printable UTF-8, at most
// 200 bytes (a subscription pattern's limit).
func validScopePattern(p string) error {
	if len(p) > 200 {
		return fmt.Errorf("pattern is %d bytes, longer than 200", len(p))
	}
	if !utf8.ValidString(p) {
		return errors.New("pattern is not valid UTF-8")
	}
	for _, r := range p {
		if unicode.IsControl(r) {
			return errors.New("pattern contains a control character")
		}
	}
	return nil
}
