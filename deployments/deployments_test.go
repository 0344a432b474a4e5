package deployments

// What every deployment's test shares: the inlet command line as cmd/inlet
// defines it (read from its source, so these tests follow it), Inlet's own
// config loader, and database URL checks.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.yaml.in/yaml/v3"

	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/retention"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/streamer"
)

// services are the long-running subcommands every deployment runs, each as
// its own process, plus migrate.
var services = []string{"ingress", "streamer", "consumer"}

// ownerTools are the one-shot subcommands that run as the schema owner
// (DATABASE_URL of migrate) and without --config: they need only
// DATABASE_URL, and a config file would make them expand every ${VAR} in it.
var ownerTools = []string{"migrate", "retention"}

// streamerStop is how long `inlet streamer` takes to stop after SIGTERM at
// most, even while its database does not answer: its claim rounds in
// progress end, with their give-backs, within streamer.StopTimeout, then it
// stops its health listener with a 5s deadline (cmd/inlet: runStreamer); it
// has no --drain-timeout. It was 5s, which the streamer does not keep
// (review helper-311).
const streamerStop = streamer.StopTimeout + 5*time.Second

// flagSpec is one flag of a subcommand.
type flagSpec struct {
	isBool bool
	// def is the default of a duration flag (zero when not a duration or not
	// a literal the test can read).
	def time.Duration
}

// inletCLI is what the inlet binary accepts: subcommand → flag name → spec.
type inletCLI map[string]map[string]flagSpec

var (
	cliCache  = map[string]inletCLI{}
	cliSource = "../cmd/inlet"
)

// readInletCLI reads the subcommands (the commands map of cmd/inlet) and each
// one's flags (the fs.String/fs.Duration/... calls of its run function and of
// the helpers it passes fs to) from cmd/inlet's source.
func readInletCLI(t *testing.T) inletCLI {
	t.Helper()
	if cli, ok := cliCache[cliSource]; ok {
		return cli
	}
	files, err := filepath.Glob(filepath.Join(cliSource, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", cliSource, err)
	}
	fset := token.NewFileSet()
	funcs := map[string]*ast.FuncDecl{}
	var commands *ast.CompositeLit
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					funcs[d.Name.Name] = d
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					vs, ok := s.(*ast.ValueSpec)
					if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "commands" || len(vs.Values) != 1 {
						continue
					}
					if cl, ok := vs.Values[0].(*ast.CompositeLit); ok {
						commands = cl
					}
				}
			}
		}
	}
	if commands == nil {
		t.Fatalf("%s: no `var commands = map[string]command{...}` found; update readInletCLI", cliSource)
	}
	cli := inletCLI{}
	for _, e := range commands.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		lit, ok := kv.Key.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			continue
		}
		name, _ := strconv.Unquote(lit.Value)
		flags := map[string]flagSpec{"h": {isBool: true}, "help": {isBool: true}}
		if cl, ok := kv.Value.(*ast.CompositeLit); ok {
			for _, el := range cl.Elts {
				if id, ok := el.(*ast.Ident); ok && funcs[id.Name] != nil {
					collectFlags(funcs, funcs[id.Name], flags, map[string]bool{})
				}
			}
		}
		cli[name] = flags
	}
	for _, want := range append(slices.Clone(ownerTools), services...) {
		if _, ok := cli[want]; !ok {
			t.Fatalf("cmd/inlet has no %q subcommand (found %v)", want, sortedKeys(cli))
		}
	}
	cliCache[cliSource] = cli
	return cli
}

var flagMethods = map[string]bool{
	"String": false, "Duration": false, "Int": false, "Int64": false, "Uint": false, "Uint64": false,
	"Float64": false, "Func": false, "Bool": true, "BoolFunc": true,
}

var flagVarMethods = map[string]bool{
	"StringVar": false, "DurationVar": false, "IntVar": false, "Int64Var": false, "UintVar": false,
	"Uint64Var": false, "Float64Var": false, "TextVar": false, "Var": false, "BoolVar": true,
}

// collectFlags adds the flags fn defines on its *flag.FlagSet (a variable
// named fs) to flags, following calls of package functions it passes fs to.
func collectFlags(funcs map[string]*ast.FuncDecl, fn *ast.FuncDecl, flags map[string]flagSpec, seen map[string]bool) {
	if seen[fn.Name.Name] || fn.Body == nil {
		return
	}
	seen[fn.Name.Name] = true
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		switch f := call.Fun.(type) {
		case *ast.SelectorExpr:
			if x, ok := f.X.(*ast.Ident); !ok || x.Name != "fs" {
				return true
			}
			nameArg, isBool := -1, false
			if b, ok := flagMethods[f.Sel.Name]; ok {
				nameArg, isBool = 0, b
			} else if b, ok := flagVarMethods[f.Sel.Name]; ok {
				nameArg, isBool = 1, b
			}
			if nameArg < 0 || len(call.Args) <= nameArg {
				return true
			}
			lit, ok := call.Args[nameArg].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			spec := flagSpec{isBool: isBool}
			if (f.Sel.Name == "Duration" || f.Sel.Name == "DurationVar") && len(call.Args) > nameArg+1 {
				spec.def = durationLiteral(call.Args[nameArg+1])
			}
			flags[name] = spec
		case *ast.Ident:
			for _, a := range call.Args {
				if id, ok := a.(*ast.Ident); ok && id.Name == "fs" && funcs[f.Name] != nil {
					collectFlags(funcs, funcs[f.Name], flags, seen)
				}
			}
		}
		return true
	})
}

// durationLiteral evaluates `N * time.Unit` and `time.Unit`; anything else is 0.
func durationLiteral(e ast.Expr) time.Duration {
	units := map[string]time.Duration{
		"Nanosecond": time.Nanosecond, "Microsecond": time.Microsecond, "Millisecond": time.Millisecond,
		"Second": time.Second, "Minute": time.Minute, "Hour": time.Hour,
	}
	switch e := e.(type) {
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "time" {
			return units[e.Sel.Name]
		}
	case *ast.BinaryExpr:
		if e.Op != token.MUL {
			return 0
		}
		l, r := e.X, e.Y
		if _, ok := l.(*ast.SelectorExpr); ok {
			l, r = r, l
		}
		lit, ok := l.(*ast.BasicLit)
		if !ok || lit.Kind != token.INT {
			return 0
		}
		n, err := strconv.Atoi(lit.Value)
		if err != nil {
			return 0
		}
		return time.Duration(n) * durationLiteral(r)
	}
	return 0
}

// invocation is one parsed inlet command line.
type invocation struct {
	sub        string
	flags      map[string]string
	positional []string
}

// parseInvocation checks args (without the program name) against the CLI: a
// known subcommand and only its flags, each with a value unless boolean.
func parseInvocation(cli inletCLI, args []string) (invocation, error) {
	if len(args) == 0 {
		return invocation{}, fmt.Errorf("no subcommand")
	}
	specs, ok := cli[args[0]]
	if !ok {
		return invocation{}, fmt.Errorf("%q is not an inlet subcommand (have %v)", args[0], sortedKeys(cli))
	}
	inv := invocation{sub: args[0], flags: map[string]string{}}
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			inv.positional = append(inv.positional, a)
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		value, hasValue := "", false
		if k, v, ok := strings.Cut(name, "="); ok {
			name, value, hasValue = k, v, true
		}
		spec, ok := specs[name]
		if !ok {
			return inv, fmt.Errorf("inlet %s has no flag -%s (have %v)", inv.sub, name, sortedKeys(specs))
		}
		if !hasValue && !spec.isBool {
			if i+1 >= len(rest) {
				return inv, fmt.Errorf("inlet %s: flag -%s needs a value", inv.sub, name)
			}
			i++
			value = rest[i]
		}
		if spec.def != 0 || name == "drain-timeout" {
			if _, err := time.ParseDuration(value); err != nil {
				return inv, fmt.Errorf("inlet %s: -%s %q: %v", inv.sub, name, value, err)
			}
		}
		inv.flags[name] = value
	}
	return inv, nil
}

// stopDeadline is how long the invocation may take to stop after SIGTERM:
// its --drain-timeout (or that flag's default), or the streamer's fixed stop.
func stopDeadline(t *testing.T, cli inletCLI, inv invocation) time.Duration {
	t.Helper()
	if v, ok := inv.flags["drain-timeout"]; ok {
		d, _ := time.ParseDuration(v)
		return d
	}
	if spec, ok := cli[inv.sub]["drain-timeout"]; ok {
		if spec.def == 0 {
			t.Fatalf("inlet %s: cannot read the default of --drain-timeout from cmd/inlet; pass it explicitly", inv.sub)
		}
		return spec.def
	}
	if inv.sub == "streamer" {
		return streamerStop
	}
	return 0
}

// parseConfig loads b as inlet <sub> does (inletyaml.ParseFor with the sections
// of config.ServiceOf(sub)), ${VAR}s from env only, and checks what running
// the services as separate processes needs of the sections sub reads.
func parseConfig(t *testing.T, where, sub string, b []byte, env map[string]string) inletyaml.Config {
	t.Helper()
	svc := config.ServiceOf(sub)
	cfg, err := inletyaml.ParseFor(b, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}, svc)
	if err != nil {
		t.Fatalf("%s: inlet.yaml does not load for inlet %s: %v", where, sub, err)
	}
	switch sub {
	case "streamer", "consumer", "dev":
		if cfg.Bus.Kind != "nats" {
			t.Errorf("%s: bus.kind is %q: separate ingress/streamer/consumer processes need nats", where, cfg.Bus.Kind)
		}
	}
	if svc.Reads("consumer") && len(cfg.Consumer.Handlers) == 0 {
		t.Errorf("%s: consumer.handlers is empty: inlet consumer refuses to start", where)
	}
	if svc.Reads("sources") && len(cfg.Sources) == 0 {
		t.Errorf("%s: no sources: ingress would accept nothing", where)
	}
	return cfg
}

var configVarRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`)

// configVars are the names of the ${VAR}s in the values (not the comments) of
// the top-level sections of an inlet.yaml that svc reads: the ones its
// environment must set.
func configVars(t *testing.T, b []byte, svc config.Service) []string {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		t.Fatalf("inlet.yaml: %v", err)
	}
	seen := map[string]bool{}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode {
			for _, m := range configVarRE.FindAllStringSubmatch(n.Value, -1) {
				seen[m[1]] = true
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	for _, doc := range root.Content {
		if doc.Kind != yaml.MappingNode {
			walk(doc)
			continue
		}
		for i := 0; i+1 < len(doc.Content); i += 2 {
			if svc.Reads(doc.Content[i].Value) {
				walk(doc.Content[i])
				walk(doc.Content[i+1])
			}
		}
	}
	return sortedKeys(seen)
}

// checkNeedlessSecrets flags the ${VAR}s of an inlet.yaml that env holds
// though they are only in sections the process does not read (least
// privilege: a streamer or consumer holds no webhook signing secret). needed
// are the ones it reads (configVars of its service; none for a process that
// loads no config file).
func checkNeedlessSecrets(t *testing.T, where string, b []byte, needed []string, env map[string]string) {
	t.Helper()
	for _, v := range configVars(t, b, config.AllSections) {
		if _, ok := env[v]; ok && !slices.Contains(needed, v) {
			t.Errorf("%s: needless secret %s: only sections of inlet.yaml it does not read name ${%s}; do not give it", where, v, v)
		}
	}
}

// listenPort is the port of a service's listener in cfg.
func listenPort(t *testing.T, where string, cfg inletyaml.Config, service string) int {
	t.Helper()
	addr := map[string]string{
		"ingress": cfg.Ingress.Listen, "streamer": cfg.Streamer.HealthListen, "consumer": cfg.Consumer.HealthListen,
	}[service]
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: %s listen address %q: %v", where, service, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s: %s listen address %q has no numeric port", where, service, addr)
	}
	return n
}

// reachable reports why port is not a listener of service in cfg that
// other hosts reach (nil when it is).
func reachable(cfg inletyaml.Config, service string, port int) error {
	addrs := map[string][]string{
		"ingress":  {cfg.Ingress.Listen, cfg.Ingress.MetricsListen},
		"streamer": {cfg.Streamer.HealthListen},
		"consumer": {cfg.Consumer.HealthListen},
	}[service]
	for _, addr := range addrs {
		host, p, err := net.SplitHostPort(addr)
		if err != nil || p != strconv.Itoa(port) {
			continue
		}
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			return fmt.Errorf("inlet %s binds it on loopback (%s): set the address to \":%d\" in inlet.yaml", service, addr, port)
		}
		return nil
	}
	return fmt.Errorf("inlet %s listens on no such port (%q)", service, addrs)
}

// loginRole is the login role each service is expected to connect as.
var loginRole = map[string]string{
	"ingress": "inlet_ingress", "streamer": "inlet_streamer", "consumer": "inlet_consumer",
}

// checkDatabaseURL checks that url is one pgx accepts, as the service's own
// login role (when wantUser is set), with an explicit pool size for the
// long-running services (pgx's default follows the host's CPU count, not a
// container's limit). It returns the pool size.
func checkDatabaseURL(t *testing.T, where, service, url, wantUser string) int {
	t.Helper()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Errorf("%s: DATABASE_URL for %s does not parse: %v", where, service, err)
		return 0
	}
	if wantUser != "" && pc.ConnConfig.User != wantUser {
		t.Errorf("%s: %s connects as %q, want its own login role %q (deployments/postgres/roles.sql)", where, service, pc.ConnConfig.User, wantUser)
	}
	if !slices.Contains(ownerTools, service) && !strings.Contains(url, "pool_max_conns=") {
		t.Errorf("%s: DATABASE_URL for %s has no pool_max_conns: pgx's default is the host's CPU count", where, service)
	}
	return int(pc.MaxConns)
}

// retentionArgs checks the values of inlet retention's flags as runRetention
// reads them: --max-age an age (90d, 13w, 2160h), --ahead an integer,
// --lock-timeout a duration, together options retention accepts, and no
// --dry-run (a scheduled run that changes nothing).
func retentionArgs(inv invocation) error {
	o := retention.Options{Interval: inv.flags["interval"], Ahead: retention.DefaultAhead}
	var errs []error
	var err error
	if v, ok := inv.flags["max-age"]; ok {
		if o.MaxAge, err = retention.ParseAge(v); err != nil {
			errs = append(errs, fmt.Errorf("--max-age %q: %w", v, err))
		} else if o.MaxAge == 0 {
			errs = append(errs, fmt.Errorf("--max-age %q keeps everything; leave it out instead", v))
		}
	}
	if v, ok := inv.flags["ahead"]; ok {
		if o.Ahead, err = strconv.Atoi(v); err != nil {
			errs = append(errs, fmt.Errorf("--ahead %q: not an integer", v))
		}
	}
	if v, ok := inv.flags["lock-timeout"]; ok {
		if o.LockTimeout, err = time.ParseDuration(v); err != nil || o.LockTimeout <= 0 {
			errs = append(errs, fmt.Errorf("--lock-timeout %q: want a positive duration", v))
		}
	}
	if _, ok := inv.flags["dry-run"]; ok {
		errs = append(errs, errors.New("--dry-run: the scheduled run would change nothing"))
	}
	if err := o.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// poolCap is the MaxConns that the cmd/inlet function fn opens its pool with
// (a literal database.Options{MaxConns: N}), which overrides pool_max_conns.
func poolCap(t *testing.T, fn string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cliSource, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Name.Name != fn {
				continue
			}
			n := 0
			ast.Inspect(fd.Body, func(x ast.Node) bool {
				kv, ok := x.(*ast.KeyValueExpr)
				if !ok {
					return true
				}
				if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "MaxConns" {
					if lit, ok := kv.Value.(*ast.BasicLit); ok && lit.Kind == token.INT {
						n, _ = strconv.Atoi(lit.Value)
					}
				}
				return true
			})
			if n <= 0 {
				t.Fatalf("%s: %s opens no pool with a literal MaxConns; update poolCap", f, fn)
			}
			return n
		}
	}
	t.Fatalf("%s: no func %s", cliSource, fn)
	return 0
}

// readEnvFile reads KEY=VALUE lines (systemd EnvironmentFile, docker .env):
// '#' comments, blank lines, optional single or double quotes.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(k) {
			t.Errorf("%s:%d: not KEY=VALUE: %q", path, n, line)
			continue
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		if _, dup := env[k]; dup {
			t.Errorf("%s:%d: %s set twice", path, n, k)
		}
		env[k] = v
	}
	return env
}

// maxConnections is max_connections in deployments/postgres/inlet.conf.
func maxConnections(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("postgres/inlet.conf")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*max_connections\s*=\s*(\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("postgres/inlet.conf sets no max_connections")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func TestPostgresSettings(t *testing.T) {
	b, err := os.ReadFile("postgres/inlet.conf")
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("inlet.conf:%d: not name = value: %q", n+1, line)
			continue
		}
		v, _, _ = strings.Cut(v, "#")
		settings[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), "'")
	}
	// The 2xx-after-commit contract: an acknowledged webhook survives a crash.
	if v := settings["synchronous_commit"]; v != "on" && v != "remote_apply" && v != "remote_write" {
		t.Errorf("synchronous_commit = %q: an acknowledged webhook could be lost", v)
	}
	if v := settings["fsync"]; v != "on" {
		t.Errorf("fsync = %q: must be on", v)
	}
	// logical WAL only for the replication wake source, so it stays commented.
	if v, ok := settings["wal_level"]; ok {
		t.Errorf("wal_level = %q is set: it is needed only for streamer.wake: replication; keep it commented", v)
	}
	if !regexp.MustCompile(`(?m)^#\s*wal_level\s*=\s*logical`).Match(b) {
		t.Error("inlet.conf should show `# wal_level = logical` for streamer.wake: replication")
	}
	maxConnections(t)

	// roles.sql makes each service's login role a member of its group role.
	roles, err := os.ReadFile("postgres/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	for svc, group := range map[string]string{"ingress": schema.IngressRole, "streamer": schema.StreamerRole, "consumer": schema.WorkerRole} {
		grant := fmt.Sprintf("GRANT %s TO %s;", group, loginRole[svc])
		if !bytes.Contains(roles, []byte(grant)) {
			t.Errorf("postgres/roles.sql lacks %q", grant)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestReadInletCLI(t *testing.T) {
	cli := readInletCLI(t)
	for _, svc := range append(slices.Clone(ownerTools), services...) {
		if _, ok := cli[svc]["config"]; !ok {
			t.Errorf("inlet %s: no --config flag found in cmd/inlet", svc)
		}
	}
	for _, svc := range []string{"ingress", "consumer"} {
		if d := cli[svc]["drain-timeout"].def; d <= 0 {
			t.Errorf("inlet %s: the default of --drain-timeout was not read from cmd/inlet", svc)
		}
	}
	if _, err := parseInvocation(cli, []string{"ingress", "--no-such-flag", "x"}); err == nil {
		t.Error("an unknown flag was accepted")
	}
	if _, err := parseInvocation(cli, []string{"ingres"}); err == nil {
		t.Error("an unknown subcommand was accepted")
	}
	inv, err := parseInvocation(cli, []string{"consumer", "--config=/x.yaml", "-drain-timeout", "31s"})
	if err != nil || inv.flags["config"] != "/x.yaml" || stopDeadline(t, cli, inv) != 31*time.Second {
		t.Errorf("parseInvocation = %+v, %v", inv, err)
	}

	for args, ok := range map[string]bool{
		"retention --max-age 90d": true,
		"retention --max-age 13w --interval month --ahead 2 --lock-timeout 2s": true,
		"retention":                         true,
		"retention --max-age 90":            false,
		"retention --max-age 0d":            false,
		"retention --interval year":         false,
		"retention --ahead four":            false,
		"retention --ahead 400":             false,
		"retention --lock-timeout 5":        false,
		"retention --max-age 90d --dry-run": false,
	} {
		inv, err := parseInvocation(cli, strings.Fields(args))
		if err != nil {
			t.Errorf("%s: %v", args, err)
			continue
		}
		if err := retentionArgs(inv); (err == nil) != ok {
			t.Errorf("retentionArgs(%s) = %v; want ok=%t", args, err, ok)
		}
	}
}
