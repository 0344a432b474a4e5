package schema_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// migrationsSum pins the text of every committed migration.
const migrationsSum = "migrations.sum"

// A committed migration never changes: `inlet migrate` applies only the
// versions above the highest one a database records, so a database
// migrated by a migration's first text never runs its second. 076 was
// rewritten after its first commit, and a database migrated by the first
// one had no limited claim at all (review helper-307; 077 mends it).
// migrations.sum holds each migration's SHA-256; a new migration is pinned
// with -update (`go test -run '^TestCommittedMigrationsAreUnchanged$'
// ./schema -update`), which adds the files not yet listed and never
// rewrites a listed one: to change a migration, write the next one.
func TestCommittedMigrationsAreUnchanged(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("migrations", "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		got[filepath.Base(f)] = hex.EncodeToString(sum[:])
	}
	pinned, order := readMigrationsSum(t)
	for _, name := range order {
		want := pinned[name]
		switch have, ok := got[name]; {
		case !ok:
			t.Errorf("migration %s is pinned in %s but gone: a committed migration is never removed", name, migrationsSum)
		case have != want:
			t.Errorf("migration %s changed since it was pinned (sha256 %s, pinned %s): a database migrated by its old text never runs the new one; restore it and put the change in a new migration", name, have, want)
		}
	}
	var unpinned []string
	for name := range got {
		if _, ok := pinned[name]; !ok {
			unpinned = append(unpinned, name)
		}
	}
	slices.Sort(unpinned)
	if len(unpinned) == 0 {
		return
	}
	if !*updateSQLCSchema {
		t.Fatalf("migrations %v are not pinned in %s: run go test -run '^TestCommittedMigrationsAreUnchanged$' ./schema -update before committing them", unpinned, migrationsSum)
	}
	f, err := os.OpenFile(migrationsSum, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, name := range unpinned {
		if _, err := fmt.Fprintf(f, "%s  %s\n", got[name], name); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("pinned %v in %s", unpinned, migrationsSum)
}

func readMigrationsSum(t *testing.T) (map[string]string, []string) {
	t.Helper()
	pinned := map[string]string{}
	var order []string
	f, err := os.Open(migrationsSum)
	if os.IsNotExist(err) {
		return pinned, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != sha256.Size*2 || name == "" {
			t.Fatalf("%s line %d: want \"<sha256>  <file>\"", migrationsSum, n)
		}
		if _, dup := pinned[name]; dup {
			t.Fatalf("%s line %d: %s pinned twice", migrationsSum, n, name)
		}
		pinned[name] = sum
		order = append(order, name)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return pinned, order
}
