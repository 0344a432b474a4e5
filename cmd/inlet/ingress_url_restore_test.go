package main

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStoppingASecondInletDevGivesTheFirstsURLBack: two inlet dev in one
// directory on an external database (no lock on the data directory): the
// second overwrote .inlet/ingress_url, and its stop removed the file while
// the first still ran, so inlet send no longer found the first (noted by
// review helper-220). The second's stop now writes the first's URL back
// while the first's process lives, and removes the file once it is gone.
func TestStoppingASecondInletDevGivesTheFirstsURLBack(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ingress_url")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	first := exec.Command("sleep", "60") // stands in for the first inlet dev's process
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Process.Kill(); _ = first.Wait() })
	firstURL := "http://localhost:18080 " + strconv.Itoa(first.Process.Pid)
	if err := os.WriteFile(path, []byte(firstURL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	remove := recordIngressURL(dir, "127.0.0.1:19090", log)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); !strings.HasPrefix(got, "http://127.0.0.1:19090 ") {
		t.Fatalf("while the second runs, ingress_url holds %q, want the second's URL", got)
	}
	remove()
	b, err = os.ReadFile(path)
	if err != nil {
		t.Fatalf("the second inlet dev's stop removed ingress_url while the first (pid %d) still runs: %v", first.Process.Pid, err)
	}
	if got := strings.TrimSpace(string(b)); got != firstURL {
		t.Fatalf("after the second's stop, ingress_url holds %q, want the first's %q", got, firstURL)
	}

	// The first gone, a later one's stop leaves nothing behind.
	_ = first.Process.Kill()
	_ = first.Wait()
	remove = recordIngressURL(dir, "127.0.0.1:19091", log)
	remove()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		b, _ := os.ReadFile(path)
		t.Fatalf("with the overwritten inlet dev gone, the stop left ingress_url %q behind (err %v)", b, err)
	}
}
