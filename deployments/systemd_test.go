package deployments

// The systemd units: each parses as a unit file (INI: sections, keys,
// repeated keys) with the keys Inlet's units need, ExecStart is a valid inlet
// command line, the stop timeout outlasts the drain deadline, and the
// config file and environment files it names (installed from
// systemd/etc/inlet/) load with Inlet's own loader. Each timer starts a
// service here, daily and persistently. Where systemd-analyze is installed,
// `systemd-analyze verify` (unknown keys, bad values) and
// `systemd-analyze security` check the units too.

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/config"
)

const systemdDir = "systemd"

// unitFile is a parsed unit: section → key → values, in order.
type unitFile map[string]map[string][]string

func (u unitFile) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// parseUnit parses the INI syntax of systemd.syntax(7): [Section] headers,
// Key=Value lines, '#' and ';' comments, backslash line continuation.
func parseUnit(b []byte) (unitFile, error) {
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	var cont strings.Builder
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if cont.Len() > 0 {
			line = cont.String() + strings.TrimLeft(line, " \t")
			cont.Reset()
		}
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || trimmed[0] == '#' || trimmed[0] == ';' {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cont.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		if trimmed[0] == '[' {
			if !strings.HasSuffix(trimmed, "]") {
				return nil, fmt.Errorf("line %d: bad section header %q", n, trimmed)
			}
			section = trimmed[1 : len(trimmed)-1]
			if _, dup := u[section]; dup {
				return nil, fmt.Errorf("line %d: section [%s] twice", n, section)
			}
			u[section] = map[string][]string{}
			continue
		}
		if section == "" {
			return nil, fmt.Errorf("line %d: %q before any section", n, trimmed)
		}
		k, v, ok := strings.Cut(trimmed, "=")
		k = strings.TrimSpace(k)
		if !ok || !regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]*$`).MatchString(k) {
			return nil, fmt.Errorf("line %d: not Key=Value: %q", n, trimmed)
		}
		u[section][k] = append(u[section][k], strings.TrimSpace(v))
	}
	if cont.Len() > 0 {
		return nil, fmt.Errorf("a continuation line ends the file")
	}
	return u, nil
}

// systemdTimespan parses a systemd.time(7) span such as "30s", "1min 30s",
// "2m", or a bare number of seconds.
func systemdTimespan(s string) (time.Duration, error) {
	units := map[string]time.Duration{
		"us": time.Microsecond, "usec": time.Microsecond, "ms": time.Millisecond, "msec": time.Millisecond,
		"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
		"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
		"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
	}
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	parts := regexp.MustCompile(`(\d+)\s*([a-z]+)`).FindAllStringSubmatch(s, -1)
	if len(parts) == 0 || strings.TrimSpace(regexp.MustCompile(`(\d+)\s*([a-z]+)`).ReplaceAllString(s, "")) != "" {
		return 0, fmt.Errorf("%q is not a time span", s)
	}
	var d time.Duration
	for _, p := range parts {
		n, _ := strconv.Atoi(p[1])
		unit, ok := units[p[2]]
		if !ok {
			return 0, fmt.Errorf("%q: unknown unit %q", s, p[2])
		}
		d += time.Duration(n) * unit
	}
	return d, nil
}

// installed maps a path the units name under /etc/inlet/ to the file in this
// folder that is installed there.
func installed(p string) string {
	return filepath.Join(systemdDir, "etc", "inlet", strings.TrimPrefix(p, "/etc/inlet/"))
}

// readUnit reads and parses the unit file name of systemdDir.
func readUnit(t *testing.T, name string) unitFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(systemdDir, name))
	if err != nil {
		t.Fatal(err)
	}
	u, err := parseUnit(b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return u
}

// systemdBool reports whether v is one of systemd's true values.
func systemdBool(v string) bool {
	return slices.Contains([]string{"yes", "true", "on", "1"}, strings.ToLower(v))
}

// timerUnit is the unit a timer starts: Unit=, else the service of its name.
func timerUnit(name string, u unitFile) string {
	return cmp.Or(u.get("Timer", "Unit"), strings.TrimSuffix(name, ".timer")+".service")
}

func TestSystemdUnits(t *testing.T) {
	cli := readInletCLI(t)
	units := map[string]unitFile{}
	for _, svc := range append(slices.Clone(ownerTools), services...) {
		units[svc] = readUnit(t, "inlet-"+svc+".service")
	}
	timers := map[string]unitFile{}
	timerOf := map[string]string{} // service unit → the timer that starts it
	found, err := filepath.Glob(filepath.Join(systemdDir, "*.timer"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		name := filepath.Base(f)
		timers[name] = readUnit(t, name)
		timerOf[timerUnit(name, timers[name])] = name
	}
	if timerOf["inlet-retention.service"] == "" {
		t.Error("no timer starts inlet-retention.service: retention must run daily")
	}
	// Every unit here is checked below.
	found, err = filepath.Glob(filepath.Join(systemdDir, "*.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		if _, ok := units[strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "inlet-"), ".service")]; !ok {
			t.Errorf("%s is not checked: add its subcommand to services or ownerTools", f)
		}
	}
	sysusers, err := os.ReadFile(filepath.Join(systemdDir, "inlet.sysusers.conf"))
	if err != nil {
		t.Fatal(err)
	}

	for _, svc := range sortedKeys(units) {
		u := units[svc]
		timer := timerOf["inlet-"+svc+".service"]
		t.Run(svc, func(t *testing.T) {
			for _, s := range []string{"Unit", "Service"} {
				if _, ok := u[s]; !ok {
					t.Errorf("no [%s] section", s)
				}
			}
			if u.get("Unit", "Description") == "" {
				t.Error("no Description=")
			}
			switch {
			case timer != "":
				// Enabling the timer is what schedules it; WantedBy= here
				// would also run it at every boot.
				if _, ok := u["Install"]; ok {
					t.Errorf("an [Install] section, but %s starts it: enable the timer instead", timer)
				}
				// An active oneshot makes the timer's next start a no-op.
				if systemdBool(u.get("Service", "RemainAfterExit")) {
					t.Errorf("RemainAfterExit=yes: after the first run %s would start nothing", timer)
				}
			case u.get("Install", "WantedBy") == "":
				t.Error("no WantedBy= in [Install]: systemctl enable would do nothing")
			}
			want := map[string]string{
				"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
				"PrivateDevices": "yes", "KillSignal": "SIGTERM", "Restart": "on-failure",
				"CapabilityBoundingSet": "", "RestrictSUIDSGID": "yes",
			}
			for k, v := range want {
				got, ok := u["Service"][k]
				if !ok || got[len(got)-1] != v {
					t.Errorf("[Service] %s=%q, want %q", k, u.get("Service", k), v)
				}
			}
			user := u.get("Service", "User")
			if user == "" && u.get("Service", "DynamicUser") != "yes" {
				t.Error("neither User= nor DynamicUser=yes: it would run as root")
			}
			if user == "root" || user == "0" {
				t.Error("User=root")
			}
			if user != "" && !regexp.MustCompile(`(?m)^u\s+`+regexp.QuoteMeta(user)+`\s`).Match(sysusers) {
				t.Errorf("User=%s is not made by inlet.sysusers.conf", user)
			}

			// The environment: EnvironmentFile=/etc/inlet/inlet.env, then the
			// service's own (later files override earlier ones).
			files := u["Service"]["EnvironmentFile"]
			if len(files) == 0 || files[0] != "/etc/inlet/inlet.env" {
				t.Errorf("EnvironmentFile= %q: want /etc/inlet/inlet.env first", files)
			}
			env := map[string]string{}
			for _, f := range files {
				f = strings.TrimPrefix(f, "-")
				if !strings.HasPrefix(f, "/etc/inlet/") {
					t.Errorf("EnvironmentFile=%s is not under /etc/inlet/", f)
					continue
				}
				for k, v := range readEnvFile(t, installed(f)) {
					env[k] = v
				}
			}

			exec := u["Service"]["ExecStart"]
			if len(exec) != 1 {
				t.Fatalf("want one ExecStart=, have %d", len(exec))
			}
			argv := strings.Fields(strings.TrimLeft(exec[0], "-@:+!"))
			if len(argv) < 2 || argv[0] != "/usr/local/bin/inlet" {
				t.Fatalf("ExecStart=%s: want /usr/local/bin/inlet <subcommand> ...", exec[0])
			}
			inv, err := parseInvocation(cli, argv[1:])
			if err != nil {
				t.Fatalf("ExecStart=%s: %v", exec[0], err)
			}
			if inv.sub != svc {
				t.Errorf("inlet-%s.service runs inlet %s", svc, inv.sub)
			}
			if len(inv.positional) > 0 {
				t.Errorf("ExecStart: stray arguments %q", inv.positional)
			}
			// The services' config file. migrate and retention load none:
			// they need only DATABASE_URL (with --config they would expand
			// the whole file, so need every secret it names), so they are
			// run without --config where there is no ./inlet.yaml.
			b, err := os.ReadFile(installed("/etc/inlet/inlet.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var cfg inletyaml.Config
			if slices.Contains(ownerTools, svc) {
				if got, ok := inv.flags["config"]; ok {
					t.Errorf("ExecStart: --config %q: %s needs only DATABASE_URL; with --config it would also need every secret inlet.yaml names", got, svc)
				}
				if _, ok := inv.flags["database-url"]; ok {
					t.Error("ExecStart: --database-url puts the owner's password on the command line; use migrate.env")
				}
				if wd := u.get("Service", "WorkingDirectory"); wd != "" && wd != "/" {
					t.Errorf("WorkingDirectory=%s: %s would load an inlet.yaml there; want / (or unset)", wd, svc)
				}
				// The schema owner's login, as migrate has it.
				if got, want := files, units["migrate"]["Service"]["EnvironmentFile"]; !slices.Equal(got, want) {
					t.Errorf("EnvironmentFile= %q, want migrate's %q (the schema owner's DATABASE_URL)", got, want)
				}
				checkNeedlessSecrets(t, "systemd "+svc, b, nil, env)
			} else {
				if got := inv.flags["config"]; got != "/etc/inlet/inlet.yaml" {
					t.Errorf("ExecStart: --config %q, want /etc/inlet/inlet.yaml", got)
				}
				needed := configVars(t, b, config.ServiceOf(svc))
				for _, v := range needed {
					if _, ok := env[v]; !ok {
						t.Errorf("inlet.yaml names ${%s} in a section inlet %s reads, which the unit's EnvironmentFiles lack", v, svc)
					}
				}
				checkNeedlessSecrets(t, "systemd "+svc, b, needed, env)
				cfg = parseConfig(t, "systemd "+svc, svc, b, env)
			}
			dbURL, ok := env["DATABASE_URL"]
			if !ok {
				t.Fatal("no DATABASE_URL in the EnvironmentFiles")
			}
			checkDatabaseURL(t, "systemd "+svc, svc, dbURL, loginRole[svc])

			if svc != "migrate" && (!strings.Contains(strings.Join(u["Unit"]["After"], " "), "inlet-migrate.service") ||
				!strings.Contains(strings.Join(append(u["Unit"]["Requires"], u["Unit"]["Wants"]...), " "), "inlet-migrate.service")) {
				t.Error("should be ordered after, and require, inlet-migrate.service (the schema first)")
			}
			if slices.Contains(ownerTools, svc) {
				if u.get("Service", "Type") != "oneshot" {
					t.Errorf("Type=%s, want oneshot", u.get("Service", "Type"))
				}
				if svc == "retention" {
					if err := retentionArgs(inv); err != nil {
						t.Errorf("ExecStart=%s: %v", exec[0], err)
					}
					// A run outlasting the day would collide with the next.
					if d, err := systemdTimespan(u.get("Service", "TimeoutStartSec")); err != nil || d <= 0 || d >= 24*time.Hour {
						t.Errorf("TimeoutStartSec=%q: want a limit under a day", u.get("Service", "TimeoutStartSec"))
					}
				}
				return
			}
			switch u.get("Service", "Type") {
			case "exec", "simple":
			default:
				t.Errorf("Type=%s, want exec (or simple)", u.get("Service", "Type"))
			}
			stop, err := systemdTimespan(u.get("Service", "TimeoutStopSec"))
			if err != nil {
				t.Fatalf("TimeoutStopSec: %v", err)
			}
			if d := stopDeadline(t, cli, inv); stop <= d {
				t.Errorf("TimeoutStopSec=%s is not longer than the drain deadline %s: SIGKILL cuts the drain", stop, d)
			}
			listenPort(t, "systemd inlet.yaml", cfg, svc)
		})
	}

	for _, name := range sortedKeys(timers) {
		u := timers[name]
		t.Run(name, func(t *testing.T) {
			for _, s := range []string{"Unit", "Timer", "Install"} {
				if _, ok := u[s]; !ok {
					t.Errorf("no [%s] section", s)
				}
			}
			if u.get("Unit", "Description") == "" {
				t.Error("no Description=")
			}
			// It starts one of the services here.
			target := timerUnit(name, u)
			if _, ok := units[strings.TrimSuffix(strings.TrimPrefix(target, "inlet-"), ".service")]; !ok || !strings.HasPrefix(target, "inlet-") {
				t.Errorf("starts %s, which is no unit here", target)
			}
			// Once a day: daily, or a time of day on every day.
			cal := u["Timer"]["OnCalendar"]
			if len(cal) != 1 || !regexp.MustCompile(`^(daily|\*-\*-\* \d{1,2}:\d{2}(:\d{2})?)$`).MatchString(cal[0]) {
				t.Errorf("OnCalendar= %q: want one, daily (or *-*-* HH:MM)", cal)
			}
			for _, k := range []string{"OnActiveSec", "OnBootSec", "OnStartupSec", "OnUnitActiveSec", "OnUnitInactiveSec"} {
				if _, ok := u["Timer"][k]; ok {
					t.Errorf("%s=: a trigger besides OnCalendar= would run it more than daily", k)
				}
			}
			if !systemdBool(u.get("Timer", "Persistent")) {
				t.Error("Persistent= is not yes: a run missed while the host was down would wait a day")
			}
			if v := u.get("Timer", "RandomizedDelaySec"); v != "" {
				if d, err := systemdTimespan(v); err != nil || d >= 24*time.Hour {
					t.Errorf("RandomizedDelaySec=%s: want a span under a day (%v)", v, err)
				}
			}
			if !slices.Contains(strings.Fields(strings.Join(u["Install"]["WantedBy"], " ")), "timers.target") {
				t.Errorf("WantedBy=%q: want timers.target, so systemctl enable schedules it", u["Install"]["WantedBy"])
			}
		})
	}

	t.Run("systemd-analyze", func(t *testing.T) {
		analyze, err := exec.LookPath("systemd-analyze")
		if err != nil {
			t.Skip("systemd-analyze is not installed; the units were checked by the parser above only")
		}
		// A root with the units, the standard units they refer to, and an
		// executable at /usr/local/bin/inlet.
		root := t.TempDir()
		for _, d := range []string{"etc/systemd/system", "usr/local/bin", "usr/lib/systemd"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(root, "usr/local/bin/inlet"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		var std string
		for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
			if fi, err := os.Stat(d); err == nil && fi.IsDir() {
				std = d
				break
			}
		}
		if std == "" {
			t.Skip("no systemd unit directory on this machine")
		}
		if err := copyTree(std, filepath.Join(root, "usr/lib/systemd/system")); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, svc := range sortedKeys(units) {
			names = append(names, "inlet-"+svc+".service")
		}
		for _, name := range append(slices.Clone(names), sortedKeys(timers)...) {
			b, _ := os.ReadFile(filepath.Join(systemdDir, name))
			if err := os.WriteFile(filepath.Join(root, "etc/systemd/system", name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		args := append([]string{"verify", "--root=" + root}, names...)
		out, err := exec.Command(analyze, append(args, sortedKeys(timers)...)...).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
		for _, name := range sortedKeys(timers) {
			spec := timers[name].get("Timer", "OnCalendar")
			if out, err := exec.Command(analyze, "calendar", spec).CombinedOutput(); err != nil {
				t.Errorf("%s: systemd-analyze calendar %q: %v\n%s", name, spec, err, out)
			}
		}
		// Exposure below 3 of 10 ("OK" is below 4.0 in systemd's scale).
		for _, name := range names {
			out, err := exec.Command(analyze, "security", "--offline=yes", "--root="+root, "--threshold=30", name).CombinedOutput()
			if bytes.Contains(out, []byte("Unknown option")) || bytes.Contains(out, []byte("unrecognized option")) {
				t.Skipf("this systemd-analyze has no offline security check: %s", out)
			}
			m := regexp.MustCompile(`Overall exposure level for \S+: (\d+\.\d+)`).FindSubmatch(out)
			if m == nil {
				t.Errorf("systemd-analyze security %s: %v\n%s", name, err, out)
				continue
			}
			if score, _ := strconv.ParseFloat(string(m[1]), 64); score >= 3 {
				t.Errorf("systemd-analyze security %s: exposure %s, want below 3", name, m[1])
			}
		}
	})
}

// copyTree copies the directory src to dst, symbolic links as links.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
		return nil
	})
}

func TestSystemdTimespan(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30": 30 * time.Second, "30s": 30 * time.Second, "1min 30s": 90 * time.Second, "2m": 2 * time.Minute, "15min": 15 * time.Minute,
	} {
		if got, err := systemdTimespan(in); err != nil || got != want {
			t.Errorf("systemdTimespan(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "soon", "30x", "1min garbage"} {
		if _, err := systemdTimespan(bad); err == nil {
			t.Errorf("systemdTimespan(%q) accepted", bad)
		}
	}
}
