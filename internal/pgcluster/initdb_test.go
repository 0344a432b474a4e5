package pgcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// An initdb cancelled midway (the operator's Ctrl-C during the first inlet
// dev) leaves nothing the next New takes for a cluster, and the next New
// makes one that starts. initdb writes PG_VERSION early, and New used to
// take it as the sign of a finished cluster (review helper-184).
func TestInitdbCancelledLeavesNoCluster(t *testing.T) {
	dir, err := os.MkdirTemp("", "inlet-pgcluster-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the postgres user enters it (as root)
		t.Fatal(err)
	}
	cfg := Config{Dir: filepath.Join(dir, "pg"), Install: true, Settings: map[string]string{"fsync": "off"}}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // cancel once initdb is under way
		version := filepath.Join(cfg.Dir, "data.partial", "PG_VERSION")
		for ctx.Err() == nil {
			if _, err := os.Stat(version); err == nil {
				cancel()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if _, err := New(ctx, cfg); err == nil {
		t.Log("initdb finished before the cancel reached it: this run proves less")
	} else {
		for _, d := range []string{"data", "data.partial"} {
			if _, err := os.Stat(filepath.Join(cfg.Dir, d)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after a cancelled initdb, %s is there (%v): want nothing a next start takes for a cluster", d, err)
			}
		}
	}

	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New after a cancelled initdb: %v", err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	if err := c.Start(sctx); err != nil {
		t.Fatalf("Start after a cancelled initdb: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
}
