package deployments

// Review helper-287 (fixed): the shipped deployment files run end to end against a
// real PostgreSQL (a cluster of each test's own) and a real NATS, with the
// roles deployments/postgres/roles.sql makes and the commands the units run.

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/freeport"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// r287Passwords are the passwords the test gives the login roles (the
// cluster trusts local connections, so they are not checked; they replace
// the files' REPLACE_ME).
var r287Passwords = map[string]string{
	"inlet_owner": "owner-pw", "inlet_ingress": "ingress-pw", "inlet_streamer": "streamer-pw", "inlet_consumer": "consumer-pw",
}

// r287Cluster starts a throwaway cluster of the test's own and, as the
// superuser, does what deployments/README.md says to do once: the owner
// inlet_owner (LOGIN CREATEROLE) and the database inlet it owns. Then it runs
// deployments/postgres/roles.sql with psql as that owner, as the README's
// command does. It returns the cluster.
func r287Cluster(t *testing.T, settings map[string]string) *pgcluster.Cluster {
	t.Helper()
	ctx := context.Background()
	all := map[string]string{"fsync": "off", "full_page_writes": "off"}
	for k, v := range settings {
		all[k] = v
	}
	c, err := pgcluster.New(ctx, pgcluster.Config{Dir: filepath.Join(pgtest.TempDir(t), "pg"), Install: true, Settings: all})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	su, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close(ctx)
	for _, q := range []string{
		`CREATE ROLE inlet_owner LOGIN PASSWORD 'owner-pw' CREATEROLE`,
		`CREATE DATABASE inlet OWNER inlet_owner`,
	} {
		if _, err := su.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	psql, err := exec.LookPath("psql")
	if err != nil {
		psql = filepath.Join(c.BinDir(), "psql")
	}
	cmd := exec.Command(psql, r287URL(t, c, "postgres://inlet_owner@x/inlet?sslmode=disable"),
		"-v", "ingress_password="+r287Passwords["inlet_ingress"],
		"-v", "streamer_password="+r287Passwords["inlet_streamer"],
		"-v", "consumer_password="+r287Passwords["inlet_consumer"],
		"-f", "postgres/roles.sql")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("psql -f postgres/roles.sql as inlet_owner: %v\n%s", err, out)
	}
	return c
}

// r287URL is a shipped DATABASE_URL pointed at the cluster: host and port
// replaced, REPLACE_ME replaced by the role's password, the rest (user,
// database, pool_max_conns, sslmode) as shipped.
func r287URL(t *testing.T, c *pgcluster.Cluster, shipped string) string {
	t.Helper()
	u, err := url.Parse(shipped)
	if err != nil {
		t.Fatalf("%q: %v", shipped, err)
	}
	user := u.User.Username()
	u.User = url.UserPassword(user, r287Passwords[user])
	u.Host = "127.0.0.1:" + strconv.Itoa(c.Port())
	return u.String()
}

// r287Env is the environment systemd gives a unit: its EnvironmentFile=s
// (deployments/systemd/etc/inlet/..., later ones override), DATABASE_URL
// pointed at the cluster.
func r287Env(t *testing.T, c *pgcluster.Cluster, u unitFile) []string {
	t.Helper()
	env := map[string]string{}
	for _, f := range u["Service"]["EnvironmentFile"] {
		f = strings.TrimPrefix(f, "-")
		for k, v := range readEnvFile(t, filepath.Join(systemdDir, "etc", "inlet", filepath.Base(f))) {
			env[k] = v
		}
	}
	if v, ok := env["DATABASE_URL"]; ok {
		env["DATABASE_URL"] = r287URL(t, c, v)
	}
	out := []string{"PATH=" + os.Getenv("PATH"), "HOME=/"}
	for _, k := range sortedKeys(env) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// r287Exec is a unit's ExecStart with /usr/local/bin/inlet replaced by bin
// and /etc/inlet/inlet.yaml by cfg.
func r287Exec(t *testing.T, u unitFile, bin, cfg string) []string {
	t.Helper()
	args := strings.Fields(u.get("Service", "ExecStart"))
	if len(args) == 0 || filepath.Base(args[0]) != "inlet" {
		t.Fatalf("ExecStart %q does not run inlet", u.get("Service", "ExecStart"))
	}
	args[0] = bin
	for i, a := range args {
		if a == "/etc/inlet/inlet.yaml" {
			args[i] = cfg
		}
	}
	return args
}

// r287Free is a free loopback address.
func r287Free(t *testing.T) string {
	t.Helper()
	p, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}

// TestShippedDeploymentsSealSoRetentionDropsOldEvents (review helper-287, fixed).
// Defect: every shipped deployment runs `inlet retention --max-age 90d`
// daily (inlet-retention.timer, the inlet-retention CronJob; README
// "Retention": "Both pass --max-age 90d: set how long you keep events"), but
// none of them ever seals an event: no shipped inlet.yaml (systemd, compose,
// the Kubernetes ConfigMap) sets audit.seal_every (default 0: "a separate
// inlet audit seal"), and no unit, compose service or CronJob runs `inlet
// audit seal`. retention drops a period only when every event of it is
// sealed (retention/retention.go: "events not sealed yet"), so with the
// shipped files it never drops anything: the event log, bodies included,
// grows without bound and the 90-day retention the files promise is false.
// Turning the sealer on in the shipped streamer does not help either:
// roles.sql makes inlet_streamer a member of webhook_streamer only, so the
// streamer's sealer (cmd/inlet/pipeline.go:startSealer, SET ROLE
// webhook_sealer) fails every pass with "permission denied to set role".
// Root cause: deployments/ (systemd/etc/inlet/inlet.yaml,
// compose/inlet.yaml, kubernetes/configmap.yaml, postgres/roles.sql).
// Setup: a real cluster set up as deployments/README.md says (inlet_owner
// CREATEROLE owning database inlet, roles.sql run by psql as the owner),
// inlet-migrate.service's ExecStart with migrate.env; a history whose events
// arrived 100 days ago (their partitions made by the owner, as retention
// would have); the shipped systemd streamer (inlet-streamer.service,
// streamer.env, etc/inlet/inlet.yaml with bus.url and health_listen moved to
// free local ports) against real NATS, ready; any shipped `audit seal`
// run; then inlet-retention.service's ExecStart (`inlet retention --max-age
// 90d`, migrate.env, cwd /). The same is checked statically for compose and
// Kubernetes.
// Expected: the 100-day-old events (no job open) are dropped by the
// shipped retention run.
// Observed: retention keeps them: "kept ... events not sealed yet (ids up to
// 3, sealed through 0)"; 3 of 3 events still there; audit_checkpoints empty.
// With audit.seal_every: 1m added to the systemd inlet.yaml the streamer logs
// `audit seal pass failed ... permission denied to set role "webhook_sealer"`.
// Fixed: the three shipped inlet.yaml files set `audit: {seal_every: 1m}`
// (the streamer runs the sealer), postgres/roles.sql creates webhook_sealer
// NOLOGIN when missing (as for the other group roles, so it works before
// migrate) and runs `GRANT webhook_sealer TO inlet_streamer`, and the
// README's Retention section says retention drops only sealed periods.
func TestShippedDeploymentsSealSoRetentionDropsOldEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Statically: compose and Kubernetes seal nowhere either.
	cf, _ := readCompose(t)
	composeSeals := false
	for _, s := range cf.Services {
		composeSeals = composeSeals || r287SealCommand(s.Command)
	}
	ccfg, err := os.ReadFile(filepath.Join(composeDir, "inlet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c := parseConfig(t, "compose/inlet.yaml", "streamer", ccfg, map[string]string{}); c.Audit.SealEvery <= 0 && !composeSeals {
		t.Errorf("compose: nothing seals events (streamer audit.seal_every %s, no service runs `inlet audit seal`), yet retention is meant to keep the log to its age", c.Audit.SealEvery)
	}
	byFile, _ := readManifests(t)
	objs := decodeObjects(t, byFile)
	kubeSeals := false
	for _, d := range objs.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			kubeSeals = kubeSeals || r287SealCommand(c.Args)
		}
	}
	for _, cj := range objs.cronJobs {
		for _, c := range cj.Spec.JobTemplate.Spec.Template.Spec.Containers {
			kubeSeals = kubeSeals || r287SealCommand(c.Args)
		}
	}
	kcfg := objs.configMaps["inlet-config"].Data["inlet.yaml"]
	if c := parseConfig(t, "kubernetes/configmap.yaml", "streamer", []byte(kcfg), map[string]string{}); c.Audit.SealEvery <= 0 && !kubeSeals {
		t.Errorf("kubernetes: nothing seals events (streamer audit.seal_every %s, no container runs `inlet audit seal`), yet the inlet-retention CronJob runs --max-age 90d", c.Audit.SealEvery)
	}

	// End to end: the systemd deployment.
	bin := filepath.Join(t.TempDir(), "inlet")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/inlet").CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/inlet: %v\n%s", err, out)
	}
	nats := natstest.Start(t)
	c := r287Cluster(t, nil)

	migrateUnit := readUnit(t, "inlet-migrate.service")
	migrateEnv := r287Env(t, c, migrateUnit)
	run := func(u unitFile, env []string, cfg string) string {
		t.Helper()
		args := r287Exec(t, u, bin, cfg)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = env
		cmd.Dir = "/"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args[1:], " "), err, out)
		}
		return string(out)
	}
	run(migrateUnit, migrateEnv, "")

	// History: events that arrived 100 days ago, in partitions of the owner's
	// (as the daily retention runs would have made them).
	var ownerURL string
	for _, kv := range migrateEnv {
		if v, ok := strings.CutPrefix(kv, "DATABASE_URL="); ok {
			ownerURL = v
		}
	}
	owner, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	for _, q := range []string{
		`SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`,
		`SELECT webhook_ingress.create_partitions('week', 4, now() - interval '120 days')`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at) VALUES
			('stripe', 'stripe', 'evt_old_1', '{}', true, now() - interval '100 days'),
			('stripe', 'stripe', 'evt_old_2', '{}', true, now() - interval '100 days'),
			('stripe', 'stripe', 'evt_old_3', '{}', true, now() - interval '100 days')`,
	} {
		if _, err := owner.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	// The shipped streamer, its bus and health listener moved to this test's ports.
	yml, err := os.ReadFile(filepath.Join(systemdDir, "etc", "inlet", "inlet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	health := r287Free(t)
	yml = bytes.Replace(yml, []byte("nats://127.0.0.1:4222"), []byte(nats.URL()), 1)
	yml = bytes.Replace(yml, []byte(`health_listen: "127.0.0.1:8081"`), []byte(`health_listen: "`+health+`"`), 1)
	yml = bytes.Replace(yml, []byte(`health_listen: "127.0.0.1:8082"`), []byte(`health_listen: "`+r287Free(t)+`"`), 1)
	cfgPath := filepath.Join(t.TempDir(), "inlet.yaml")
	if err := os.WriteFile(cfgPath, yml, 0o600); err != nil {
		t.Fatal(err)
	}
	streamerUnit := readUnit(t, "inlet-streamer.service")
	streamerEnv := r287Env(t, c, streamerUnit)
	scfg := parseConfig(t, "systemd/etc/inlet/inlet.yaml", "streamer", yml, map[string]string{})
	args := r287Exec(t, streamerUnit, bin, cfgPath)
	streamer := exec.Command(args[0], args[1:]...)
	streamer.Env, streamer.Dir = streamerEnv, "/"
	var streamerOut bytes.Buffer
	streamer.Stdout, streamer.Stderr = &streamerOut, &streamerOut
	if err := streamer.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = streamer.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = streamer.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = streamer.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("streamer output:\n%s", streamerOut.String())
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get("http://" + health + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case <-done:
			t.Fatalf("the shipped streamer exited before it was ready")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shipped streamer not ready within 90s")
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Whatever the systemd deployment ships to seal: units running `inlet
	// audit seal`, and the streamer's own sealer.
	units, _ := filepath.Glob(filepath.Join(systemdDir, "*.service"))
	for _, f := range units {
		u := readUnit(t, filepath.Base(f))
		if r287SealCommand(strings.Fields(u.get("Service", "ExecStart"))[1:]) {
			run(u, r287Env(t, c, u), cfgPath)
		}
	}
	var sealed int64
	if scfg.Audit.SealEvery > 0 {
		deadline := time.Now().Add(scfg.Audit.SealEvery + scfg.Audit.Grace + 2*time.Minute)
		for time.Now().Before(deadline) {
			if err := owner.QueryRow(ctx, `SELECT coalesce(max(last_event_id), 0) FROM webhook_ingress.audit_checkpoints`).Scan(&sealed); err != nil {
				t.Fatal(err)
			}
			if sealed >= 3 {
				break
			}
			time.Sleep(time.Second)
		}
	}

	// A period kept as busy is what the shipped timer runs again the next
	// day; here again at once, at most twice more (a loaded CI run at 95b394f
	// kept all five busy, every lock wait timing out, once), each busy
	// reason naming who held the locks.
	var out string
	var left int
	for try := 1; ; try++ {
		out = run(readUnit(t, "inlet-retention.service"), migrateEnv, "")
		if err := owner.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events WHERE received_at < now() - interval '90 days'`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 || try == 3 || !strings.Contains(out, "busy: ") {
			break
		}
		t.Logf("retention run %d kept periods as busy; running it again:\n%s", try, out)
		time.Sleep(2 * time.Second)
	}
	if left != 0 {
		reason := regexp.MustCompile(`(?m)^.*not sealed.*$`).FindString(out)
		t.Errorf("systemd: the shipped `inlet retention --max-age 90d` kept %d of 3 events received 100 days ago (no job open; streamer audit.seal_every %s; sealed through %d): %q\nits output:\n%s",
			left, scfg.Audit.SealEvery, sealed, strings.TrimSpace(reason), out)
	}
}

// r287SealCommand reports whether inlet args (without the program) run the sealer.
func r287SealCommand(args []string) bool {
	return len(args) >= 2 && args[0] == "audit" && args[1] == "seal"
}

// TestReplicationAttributeStepNamesASuperuser (review helper-287, fixed).
// Defect: for `streamer.wake: replication` the docs tell the operator to run
// `ALTER ROLE inlet_streamer REPLICATION` as the schema owner:
// deployments/postgres/roles.sql ("else run this as the owner of
// webhook_ingress.jobs after inlet migrate: -- ALTER ROLE inlet_streamer
// REPLICATION; -- CREATE PUBLICATION ...") and deployments/README.md
// ("streamer.wake: replication only (then, as the owner, after migrate ...):
// ALTER ROLE inlet_streamer REPLICATION;"). The owner the same README has
// the operator create (`CREATE ROLE inlet_owner LOGIN ... CREATEROLE`) may
// not: PostgreSQL lets only a superuser (PostgreSQL 16+: a role that has
// REPLICATION itself) set REPLICATION. An operator following the steps
// stops at an error; on a managed service with no superuser the way to do
// it (rds_replication, cloudsqlsuperuser, ...) is not named.
// Root cause: deployments/postgres/roles.sql (the replication comment),
// deployments/README.md (Roles and the wal_level bullet).
// Setup: a real cluster set up as the README says (inlet_owner CREATEROLE
// owning database inlet, roles.sql run by psql as the owner), migrated as the
// owner; then the two commented statements of roles.sql, taken from the
// file, run as the owner as it says.
// Expected: both succeed (or the docs name who may run them).
// Observed: ALTER ROLE fails: "ERROR: must be superuser to alter replication
// roles or change replication attribute (SQLSTATE 42501)" (PostgreSQL 15);
// CREATE PUBLICATION as the owner succeeds.
// Fixed: roles.sql and the README now say the ALTER ROLE line is run as a
// superuser (PostgreSQL 16+: also a CREATEROLE role with REPLICATION and
// ADMIN OPTION on inlet_streamer; on RDS and Aurora GRANT rds_replication,
// on Cloud SQL the ALTER ROLE as a cloudsqlsuperuser member) and keep "as
// the owner" for CREATE PUBLICATION only.
func TestReplicationAttributeStepNamesASuperuser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := r287Cluster(t, map[string]string{"wal_level": "logical"})
	owner, err := pgx.Connect(ctx, r287URL(t, c, "postgres://inlet_owner@x/inlet?sslmode=disable"))
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	if _, err := schema.Migrate(ctx, owner); err != nil {
		t.Fatalf("migrate as inlet_owner: %v", err)
	}
	for _, f := range []string{"postgres/roles.sql", "README.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		stmt, who := r287DocumentedRunner(string(b), "ALTER ROLE inlet_streamer REPLICATION")
		if stmt == "" {
			t.Fatalf("%s: no ALTER ROLE inlet_streamer REPLICATION", f)
		}
		if who != "owner" {
			continue // the doc names a superuser (or another role) for it
		}
		if _, err := owner.Exec(ctx, stmt); err != nil {
			t.Errorf("%s says to run %q as the owner, after inlet migrate; as inlet_owner (LOGIN CREATEROLE, as deployments/README.md creates it): %v", f, stmt, err)
		}
	}
	if _, err := owner.Exec(ctx, `CREATE PUBLICATION inlet_jobs FOR TABLE webhook_ingress.jobs WITH (publish = 'insert, update', publish_via_partition_root = true)`); err != nil {
		t.Errorf("CREATE PUBLICATION as the owner: %v", err)
	}
}

// r287DocumentedRunner finds the commented-out SQL statement that starts
// with prefix in doc ("-- ALTER ROLE ...;") and says who the text before it
// tells to run it: the nearest earlier comment line that names "superuser"
// or "owner" (the comment lines right above it, in the same paragraph).
func r287DocumentedRunner(doc, prefix string) (stmt, who string) {
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		s, ok := strings.CutPrefix(strings.TrimSpace(l), "-- ")
		if !ok || !strings.HasPrefix(s, prefix) {
			continue
		}
		stmt = strings.TrimSpace(s)
		for j := i - 1; j >= 0; j-- {
			c := strings.TrimSpace(lines[j])
			if !strings.HasPrefix(c, "--") {
				break
			}
			switch {
			case strings.Contains(strings.ToLower(c), "superuser"):
				return stmt, "superuser"
			case strings.Contains(c, "owner"):
				return stmt, "owner"
			}
		}
		return stmt, ""
	}
	return "", ""
}
