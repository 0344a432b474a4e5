package deployments

// The compose file, without Docker: its keys are compose-spec keys, ${VAR}s
// are interpolated as compose does from .env.example, every service has an
// image or a build with a Dockerfile, depends_on names services (and a
// condition they can meet), bind mounts exist, named volumes are declared,
// inlet commands are valid, the mounted inlet.yaml loads with Inlet's own
// loader from each container's environment, healthchecks probe /healthz on
// the port the config serves it on (ingress: its metrics listener, not the
// webhook port), and stop grace periods outlast the drain deadlines. The Dockerfile they build is checked too.

import (
	"bufio"
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/inlet-dev/inlet/internal/config"
)

const composeDir = "compose"

// composeServiceKeys are the service attributes of the Compose
// Specification; anything else is a typo (or x- extension).
var composeServiceKeys = strings.Fields(`annotations attach blkio_config build cap_add cap_drop
	cgroup cgroup_parent command configs container_name cpu_count cpu_percent cpu_period
	cpu_quota cpu_rt_period cpu_rt_runtime cpu_shares cpus cpuset credential_spec depends_on
	deploy develop device_cgroup_rules devices dns dns_opt dns_search domainname entrypoint
	env_file environment expose extends external_links extra_hosts gpus group_add healthcheck
	hostname image init ipc isolation label_file labels links logging mac_address mem_limit
	mem_reservation mem_swappiness memswap_limit models network_mode networks oom_kill_disable
	oom_score_adj pid pids_limit platform ports post_start pre_stop privileged profiles provider
	pull_policy read_only restart runtime scale secrets security_opt shm_size stdin_open
	stop_grace_period stop_signal storage_opt sysctls tmpfs tty ulimits use_api_socket user
	userns_mode uts volumes volumes_from working_dir`)

var composeTopKeys = []string{"version", "name", "include", "services", "networks", "volumes", "configs", "secrets", "models"}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       *composeBuild     `yaml:"build"`
	Command     []string          `yaml:"command"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Environment map[string]string `yaml:"environment"`
	EnvFile     []string          `yaml:"env_file"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Restart         string   `yaml:"restart"`
	StopGracePeriod string   `yaml:"stop_grace_period"`
	ReadOnly        bool     `yaml:"read_only"`
	CapDrop         []string `yaml:"cap_drop"`
	SecurityOpt     []string `yaml:"security_opt"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

// interpolate replaces ${VAR}, ${VAR:-default}, ${VAR-default},
// ${VAR:?error}, ${VAR?error} and $VAR in s as compose does, from env; $$ is
// a literal $. A variable that is unset and has no default is an error (where
// compose would warn and use "").
func interpolate(s string, env map[string]string, used map[string]bool) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		var name, op, arg string
		if i+1 < len(s) && s[i+1] == '{' {
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return "", fmt.Errorf("unclosed ${ in %q", s)
			}
			expr := s[i+2 : i+end]
			i += end
			m := regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)(:?[-?+])?(.*)$`).FindStringSubmatch(expr)
			if m == nil {
				return "", fmt.Errorf("bad ${%s} in %q", expr, s)
			}
			name, op, arg = m[1], m[2], m[3]
		} else {
			m := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*`).FindString(s[i+1:])
			if m == "" {
				return "", fmt.Errorf("a lone $ in %q (write $$)", s)
			}
			name = m
			i += len(m)
		}
		used[name] = true
		v, set := env[name]
		switch {
		case op == ":-" && v == "", op == "-" && !set:
			v = arg
		case op == ":?" && v == "", op == "?" && !set:
			return "", fmt.Errorf("${%s} is required: %s", name, arg)
		case op == ":+":
			if v != "" {
				v = arg
			}
		case op == "+":
			if set {
				v = arg
			}
		case !set:
			return "", fmt.Errorf("${%s} is not set in .env.example and has no default", name)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// interpolateNode interpolates every scalar value of n (not keys), as compose
// does on the parsed file.
func interpolateNode(n *yaml.Node, env map[string]string, used map[string]bool) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if strings.Contains(n.Value, "$") {
			v, err := interpolate(n.Value, env, used)
			if err != nil {
				return fmt.Errorf("line %d: %w", n.Line, err)
			}
			n.Value = v
		}
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			if err := interpolateNode(n.Content[i], env, used); err != nil {
				return err
			}
		}
	default:
		for _, c := range n.Content {
			if err := interpolateNode(c, env, used); err != nil {
				return err
			}
		}
	}
	return nil
}

func readCompose(t *testing.T) (composeFile, map[string]string) {
	t.Helper()
	env := readEnvFile(t, filepath.Join(composeDir, ".env.example"))
	b, err := os.ReadFile(filepath.Join(composeDir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	used := map[string]bool{}
	if err := interpolateNode(&root, env, used); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for _, k := range sortedKeys(env) {
		if !used[k] {
			t.Errorf(".env.example sets %s, which compose.yaml never uses", k)
		}
	}

	// Keys first (merge keys resolved by decoding into maps).
	var raw map[string]any
	if err := root.Decode(&raw); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for k := range raw {
		if !slices.Contains(composeTopKeys, k) && !strings.HasPrefix(k, "x-") {
			t.Errorf("compose.yaml: %q is not a top-level compose key", k)
		}
	}
	svcs, _ := raw["services"].(map[string]any)
	for name, s := range svcs {
		m, ok := s.(map[string]any)
		if !ok {
			t.Fatalf("compose.yaml: service %s is not a mapping", name)
		}
		for k := range m {
			if !slices.Contains(composeServiceKeys, k) && !strings.HasPrefix(k, "x-") {
				t.Errorf("compose.yaml: service %s: %q is not a compose service attribute", name, k)
			}
		}
	}
	var cf composeFile
	if err := root.Decode(&cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return cf, env
}

// composeDuration parses compose's durations (Go's syntax).
func composeDuration(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	return time.ParseDuration(s)
}

func TestCompose(t *testing.T) {
	cf, _ := readCompose(t)
	cli := readInletCLI(t)
	if len(cf.Services) == 0 {
		t.Fatal("compose.yaml has no services")
	}
	for _, want := range []string{"postgres", "nats", "migrate", "ingress", "streamer", "consumer"} {
		if _, ok := cf.Services[want]; !ok {
			t.Errorf("compose.yaml has no %s service", want)
		}
	}
	oneShot := func(name string) bool { r := cf.Services[name].Restart; return r == "no" || r == "" }

	connections := 0
	for _, name := range sortedKeys(cf.Services) {
		s := cf.Services[name]
		t.Run(name, func(t *testing.T) {
			if s.Image == "" && s.Build == nil {
				t.Error("neither image nor build")
			}
			if s.Build != nil {
				ctx := filepath.Join(composeDir, s.Build.Context)
				df := s.Build.Dockerfile
				if df == "" {
					df = "Dockerfile"
				}
				if _, err := os.Stat(filepath.Join(ctx, "go.mod")); err != nil {
					t.Errorf("build context %s is not the repository root: %v", s.Build.Context, err)
				}
				if _, err := os.Stat(filepath.Join(ctx, df)); err != nil {
					t.Errorf("build dockerfile %s: %v", df, err)
				}
			}
			for dep, d := range s.DependsOn {
				target, ok := cf.Services[dep]
				if !ok {
					t.Errorf("depends_on %s: no such service", dep)
					continue
				}
				switch d.Condition {
				case "service_started":
				case "service_healthy":
					if target.Healthcheck == nil {
						t.Errorf("depends_on %s: service_healthy, but %s has no healthcheck", dep, dep)
					}
				case "service_completed_successfully":
					if !oneShot(dep) {
						t.Errorf("depends_on %s: service_completed_successfully, but %s restarts (%q)", dep, dep, target.Restart)
					}
				default:
					t.Errorf("depends_on %s: condition %q is not service_started, service_healthy or service_completed_successfully", dep, d.Condition)
				}
			}
			mounts := map[string]string{} // container path → host path
			for _, v := range s.Volumes {
				parts := strings.Split(v, ":")
				if len(parts) < 2 {
					t.Errorf("volume %q: want source:target", v)
					continue
				}
				src, dst := parts[0], parts[1]
				if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
					host := filepath.Join(composeDir, src)
					if _, err := os.Stat(host); err != nil {
						t.Errorf("bind mount %s: %v", src, err)
					}
					mounts[dst] = host
				} else if _, ok := cf.Volumes[src]; !ok {
					t.Errorf("named volume %s is not declared under volumes:", src)
				}
			}
			if name == "postgres" {
				checkComposePostgres(t, s, mounts)
			}
			if s.Image != "inlet:local" && s.Build == nil {
				return
			}
			connections += checkComposeInlet(t, cli, cf, name, s, mounts)
		})
	}
	if max := maxConnections(t); connections > max*3/4 {
		t.Errorf("the services may open %d connections, more than 3/4 of max_connections (%d)", connections, max)
	}
}

// checkComposeInlet checks a service of the inlet image and returns how many
// database connections it may open.
func checkComposeInlet(t *testing.T, cli inletCLI, cf composeFile, name string, s composeService, mounts map[string]string) int {
	if s.Build == nil || filepath.ToSlash(s.Build.Dockerfile) != "deployments/docker/Dockerfile" {
		t.Errorf("build: want context ../.. and dockerfile deployments/docker/Dockerfile, have %+v", s.Build)
	}
	if len(s.Entrypoint) > 0 {
		t.Errorf("entrypoint %q overrides the image's [inlet]", s.Entrypoint)
	}
	if !s.ReadOnly || !slices.Contains(s.CapDrop, "ALL") || !slices.Contains(s.SecurityOpt, "no-new-privileges:true") {
		t.Error("want read_only: true, cap_drop: [ALL], security_opt: [no-new-privileges:true]")
	}
	inv, err := parseInvocation(cli, s.Command)
	if err != nil {
		t.Fatalf("command %q: %v", s.Command, err)
	}
	if inv.sub != name {
		t.Errorf("command runs inlet %s in the service named %s", inv.sub, name)
	}
	env := map[string]string{}
	for _, f := range s.EnvFile {
		for k, v := range readEnvFile(t, filepath.Join(composeDir, strings.Replace(f, ".env", ".env.example", 1))) {
			env[k] = v
		}
	}
	for k, v := range s.Environment {
		env[k] = v
	}
	dbURL, ok := env["DATABASE_URL"]
	if !ok {
		t.Fatal("no DATABASE_URL in the environment")
	}
	if u, err := url.Parse(dbURL); err != nil {
		t.Errorf("DATABASE_URL: %v", err)
	} else if _, ok := cf.Services[u.Hostname()]; !ok {
		t.Errorf("DATABASE_URL names host %q, which is no service", u.Hostname())
	}
	conns := checkDatabaseURL(t, "compose "+name, name, dbURL, loginRole[name])
	if name == "migrate" {
		if s.Restart != "no" {
			t.Errorf("migrate is one-shot: restart should be \"no\", is %q", s.Restart)
		}
		if _, ok := inv.flags["config"]; ok {
			t.Error("migrate needs only DATABASE_URL: with --config it would also need every secret inlet.yaml names")
		}
		// It reads no config file, so it holds none of the services' secrets.
		b, err := os.ReadFile(filepath.Join(composeDir, "inlet.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		checkNeedlessSecrets(t, "compose migrate", b, nil, env)
		if s.DependsOn["postgres"].Condition != "service_healthy" {
			t.Error("migrate should wait for postgres: service_healthy")
		}
		return 1
	}
	if d := s.DependsOn["migrate"]; d.Condition != "service_completed_successfully" {
		t.Error("should depend on migrate: service_completed_successfully (the schema first)")
	}
	cfgPath, ok := inv.flags["config"]
	if !ok {
		t.Fatal("no --config")
	}
	host, ok := mounts[cfgPath]
	if !ok {
		t.Fatalf("--config %s is not bind-mounted", cfgPath)
	}
	b, err := os.ReadFile(host)
	if err != nil {
		t.Fatal(err)
	}
	needed := configVars(t, b, config.ServiceOf(name))
	for _, v := range needed {
		if _, ok := env[v]; !ok {
			t.Errorf("inlet.yaml names ${%s} in a section inlet %s reads, which the service's environment lacks", v, name)
		}
	}
	checkNeedlessSecrets(t, "compose "+name, b, needed, env)
	cfg := parseConfig(t, "compose "+name+" "+host, name, b, env)
	// The bus, where the service reads it (ingress drops the bus section).
	if config.ServiceOf(name).Reads("bus") {
		for _, u := range strings.Split(cfg.Bus.URL, ",") {
			pu, err := url.Parse(strings.TrimSpace(u))
			if err != nil {
				t.Errorf("bus.url: %v", err)
			} else if _, ok := cf.Services[pu.Hostname()]; !ok {
				t.Errorf("bus.url names host %q, which is no service", pu.Hostname())
			} else if s.DependsOn[pu.Hostname()].Condition != "service_healthy" {
				t.Errorf("should depend on %s: service_healthy (the bus)", pu.Hostname())
			}
		}
	}

	port := listenPort(t, host, cfg, name)
	if s.Healthcheck == nil {
		t.Fatal("no healthcheck")
	}
	want := []string{"CMD", "inlet-healthcheck", fmt.Sprintf("http://127.0.0.1:%d/healthz", probePort(t, host, cfg, name))}
	if !slices.Equal(s.Healthcheck.Test, want) {
		t.Errorf("healthcheck test %q, want %q", s.Healthcheck.Test, want)
	}
	if name == "ingress" {
		published := false
		for _, p := range s.Ports {
			if strings.HasSuffix(p, ":"+strconv.Itoa(port)) {
				published = true
			}
		}
		if !published {
			t.Errorf("ports %q do not publish the ingress port %d", s.Ports, port)
		}
	}
	grace, err := composeDuration(s.StopGracePeriod, 10*time.Second)
	if err != nil {
		t.Fatalf("stop_grace_period: %v", err)
	}
	if d := stopDeadline(t, cli, inv); grace <= d {
		t.Errorf("stop_grace_period %s is not longer than the drain deadline %s", grace, d)
	}
	if name == "streamer" && cfg.Streamer.Wake != "poll" {
		conns++
	}
	return conns
}

func checkComposePostgres(t *testing.T, s composeService, mounts map[string]string) {
	if mounts["/etc/postgresql/inlet.conf"] != filepath.Join("postgres", "inlet.conf") {
		t.Errorf("../postgres/inlet.conf should be mounted at /etc/postgresql/inlet.conf, mounts are %v", mounts)
	}
	// During initialisation the image runs a temporary server on the Unix
	// socket only; a healthcheck over it would let migrate start too early.
	if s.Healthcheck == nil || !strings.Contains(strings.Join(s.Healthcheck.Test, " "), "-h 127.0.0.1") {
		t.Error("the postgres healthcheck should use TCP (pg_isready -h 127.0.0.1)")
	}
	initdb, ok := mounts["/docker-entrypoint-initdb.d"]
	if !ok {
		t.Fatal("no /docker-entrypoint-initdb.d mount")
	}
	scripts, _ := filepath.Glob(filepath.Join(initdb, "*.sh"))
	if len(scripts) == 0 {
		t.Fatalf("no init script in %s", initdb)
	}
	for _, sc := range scripts {
		fi, err := os.Stat(sc)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable (the entrypoint would source it)", sc)
		}
		b, _ := os.ReadFile(sc)
		// Every container path it reads is mounted, every variable it needs is set.
		for _, p := range regexp.MustCompile(`/etc/postgresql/[A-Za-z0-9._-]+`).FindAll(b, -1) {
			if _, ok := mounts[string(p)]; !ok {
				t.Errorf("%s reads %s, which is not mounted", sc, p)
			}
		}
		for _, m := range regexp.MustCompile(`\$\{([A-Z_][A-Z0-9_]*):\?\}`).FindAllSubmatch(b, -1) {
			if _, ok := s.Environment[string(m[1])]; !ok {
				t.Errorf("%s needs %s, which the postgres service's environment lacks", sc, m[1])
			}
		}
	}
	if mounts["/etc/postgresql/inlet-roles.sql"] != filepath.Join("postgres", "roles.sql") {
		t.Error("../postgres/roles.sql should be mounted at /etc/postgresql/inlet-roles.sql")
	}
}

// TestDockerfile checks the image the compose file builds: a build stage,
// a final stage that runs as a numeric non-root user with ENTRYPOINT
// ["inlet"], and the binaries compose's healthchecks call on its PATH.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// Join continuation lines, drop comments.
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || (l == "" && cur.Len() == 0) {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\") + " ")
			continue
		}
		cur.WriteString(l)
		if s := strings.TrimSpace(cur.String()); s != "" {
			lines = append(lines, s)
		}
		cur.Reset()
	}
	type stage struct{ from, user, entrypoint string }
	var stages []stage
	var runs, copies []string
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			stages = append(stages, stage{from: rest})
		case "USER":
			stages[len(stages)-1].user = rest
		case "ENTRYPOINT":
			stages[len(stages)-1].entrypoint = rest
		case "RUN":
			runs = append(runs, rest)
		case "COPY":
			if len(stages) > 0 {
				copies = append(copies, rest)
			}
		case "ARG", "ENV", "WORKDIR", "EXPOSE", "CMD", "LABEL":
		default:
			t.Errorf("Dockerfile: unexpected instruction %q", instr)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("want a multi-stage build, have %d stages", len(stages))
	}
	if !strings.HasPrefix(stages[0].from, "golang:") {
		t.Errorf("first stage FROM %q, want golang:", stages[0].from)
	}
	final := stages[len(stages)-1]
	if !strings.Contains(final.from, "distroless/static") && !strings.Contains(final.from, "debian") {
		t.Errorf("final stage FROM %q, want distroless/static or a slim Debian", final.from)
	}
	uid, _, _ := strings.Cut(final.user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("final stage USER %q: want a numeric non-root uid (runAsNonRoot can verify only a number)", final.user)
	}
	if final.entrypoint != `["inlet"]` {
		t.Errorf(`ENTRYPOINT %s, want ["inlet"]`, final.entrypoint)
	}
	built := strings.Join(runs, "\n")
	for _, pkg := range []string{"./cmd/inlet", "./deployments/docker/healthcheck"} {
		if !strings.Contains(built, pkg) {
			t.Errorf("no RUN builds %s", pkg)
		}
		if _, err := os.Stat(filepath.Join("..", pkg)); err != nil {
			t.Errorf("%s: %v", pkg, err)
		}
	}
	last := copies[len(copies)-1]
	for _, bin := range []string{"inlet", "inlet-healthcheck"} {
		if !strings.Contains(last, "/"+bin+" ") || !strings.HasSuffix(last, "/usr/local/bin/") {
			t.Errorf("the final COPY (%q) should put %s into /usr/local/bin/", last, bin)
		}
	}
	if !strings.Contains(built, "CGO_ENABLED=0") && !bytes.Contains(b, []byte("CGO_ENABLED=0")) {
		t.Error("a static final image needs CGO_ENABLED=0")
	}
}
