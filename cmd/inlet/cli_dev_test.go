package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/freeport"
)

// DEFECT: checkSource (cmd/inlet/common.go, the admin.EventTypes call) looks
// a --source up in event_types through admin.EventTypes, which first runs
// webhook_ingress.fold_event_types in a write transaction. webhook_auditor,
// the documented read-only role ("SELECT everything, write nothing",
// docs/database.md) that "inlet events list" is for ("the event log for
// auditors", docs/operations.md), has no EXECUTE on fold_event_types. So an
// auditor (admin.db_role: webhook_auditor) who types a source name that is
// not configured and not in events gets "permission denied for function
// fold_event_types" (exit 1) instead of the promised usage error listing
// the known sources; and a source whose events retention dropped (known
// only from event_types) cannot be listed at all, while the unfiltered
// listing works fine as that role.
// EXPECTED: the usage error naming the known sources (exit 2), and no
// failure for a name event_types knows.
func TestAuditorSourceTypoIsPermissionDeniedNotUsageError(t *testing.T) {
	db := operatorDatabase(t)
	storeEvent(t, db, "stripe", "evt_seen_by_auditor")
	cfg := "admin:\n  db_role: webhook_auditor\nsources:\n  - name: stripe\n    type: stripe\n    secrets: [\"whsec_review_auditor\"]\n"
	if err := os.WriteFile("inlet.yaml", []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// The role is otherwise enough to list the log.
	if out, err := runInlet(t, "events", "list"); err != nil || !strings.Contains(out, "evt_seen_by_auditor") {
		t.Fatalf("events list as webhook_auditor: %v\n%s", err, out)
	}
	_, err := runInlet(t, "events", "list", "--source", "strpe")
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "stripe") {
		t.Fatalf("events list --source strpe as webhook_auditor: %v; want the usage error listing the known sources", err)
	}
}

// Found by review helper-220 (fixed; this describes the code before the fix; the file it
// writes now carries the writer's pid, which the test's stale file names): after inlet dev is killed with kill -9 its .inlet/ingress_url
// stays behind (the docs admit it), and ingressURL (cmd/inlet/common.go,
// ingressURL) trusts it without checking that the inlet dev that wrote it
// still runs, although the means are right there: .inlet/lock, whose flock
// inlet dev holds for its whole life and the kernel released at the kill.
// When another process has since taken that port (another project's inlet
// dev, any local server), "inlet send" posts the signed test webhook there
// and reports success: nothing says the URL is stale. The docs' "inlet
// send's error names it" only covers the case where nothing listens.
// EXPECTED: inlet send refuses (or at least warns on stderr) when the
// ingress_url it found belongs to an inlet dev that no longer runs.
func TestSendPostsToStaleIngressURLAfterKill9Silently(t *testing.T) {
	clearDevEnv(t)
	t.Chdir(t.TempDir())
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	got := recordingIngress(t, port) // someone else listens on the dead inlet dev's port now
	if err := os.MkdirAll(devDataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// What a killed inlet dev leaves: its lock file (pid inside, lock
	// released by the kernel) and its ingress_url.
	if err := os.WriteFile(filepath.Join(devDataDir, "lock"), []byte("2147483646\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(devDataDir, "ingress_url"), []byte(fmt.Sprintf("http://localhost:%d 2147483646\n", port)) /* URL and the writer's pid, as inlet dev writes it */, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut syncBuffer
	err = run(context.Background(), &environment{stdout: &out, stderr: &errOut}, []string{"send", "stripe"})
	if err == nil && len(got()) > 0 && !strings.Contains(errOut.String(), "ingress_url") {
		t.Errorf("inlet send posted to the stale .inlet/ingress_url of an inlet dev that no longer runs, to whatever took its port, "+
			"and said nothing (stdout %q, stderr %q)", out.String(), errOut.String())
	}
}

// DEFECT (a judgement call, but data of two projects get mixed): findDevFile
// (cmd/inlet/common.go, findDevFile) walks up past a directory that is a
// project of its own (its own inlet.yaml and its own .git) into a parent
// project's .inlet/database_url. In that subproject, whose inlet.yaml has
// no database_url and where inlet dev has not run yet, every operator
// command (events list, dlq replay, retention, migrate ...) silently runs
// against the other project's database, mixing the subproject's config
// (its sources and handlers) with another project's data. Git, the model
// the docs cite, never looks past the repository it is in.
// EXPECTED: the walk stops at a directory holding inlet.yaml or .git, so
// the command says "no database ... start inlet dev in this directory".
func TestSubprojectUsesParentProjectsDatabase(t *testing.T) {
	top, db := devTree(t) // top/.inlet/database_url: project A's inlet dev; cwd top/a/b
	storeEvent(t, db, "stripe", "evt_of_project_a")
	// top/a/b is project B: its own repository and configuration.
	if err := os.Mkdir(".git", 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := "sources:\n  - name: stripe\n    type: stripe\n    secrets: [\"whsec_project_b\"]\n"
	if err := os.WriteFile("inlet.yaml", []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runInlet(t, "events", "list")
	if strings.Contains(out, "evt_of_project_a") {
		t.Errorf("inlet events list in project B (own inlet.yaml and .git) listed project A's events from %s/.inlet/database_url (err %v):\n%s", top, err, out)
	}
}
