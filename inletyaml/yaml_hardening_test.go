package inletyaml

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/config"
)

// TestMergeKeyChainHangsTheChecker (review helper-141, fixed; this describes the code before the fix):
// a 2 KB file makes `inlet config check`, and every service at
// start, spin at 100% CPU forever instead of answering. The file checker
// (internal/config/check.go:64) follows every `<<` merge key of a mapping
// into the merged mapping (aliases resolved) with no memory of what it has
// walked and no budget, so a chain of anchors each merging the previous one
// twice (&aK {<<: &aK-1 {...}, <<: *aK-1}) is walked 2^K times: 40 levels
// never finish. yaml.v3's own decoder refuses such a document (duplicate
// key "<<", and its alias-ratio guard against "billion laughs"), but the
// checker runs before root.Decode (internal/config/config.go Parse), so the
// file is never reported.
//
// Now: Parse returns promptly with a problem (duplicate key <<, or
// excessive aliasing).
//
// The Parse runs in a child process, killed after 20 s, so the spinning
// walk does not outlive the test.
func TestMergeKeyChainHangsTheChecker(t *testing.T) {
	def := `&a0 {listen: ":8080"}`
	for k := 1; k <= 40; k++ {
		def = fmt.Sprintf("&a%d {<<: %s, <<: *a%d}", k, def, k-1)
	}
	doc := "ingress: {<<: " + def + "}\n"
	if os.Getenv("INLET_REVIEW_MERGE_CHAIN") == "1" {
		_, err := Parse([]byte(doc), env(nil))
		fmt.Printf("parse returned: %v\n", err)
		return
	}
	if len(doc) > 4096 {
		t.Fatalf("the file is %d bytes, want a small one", len(doc))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMergeKeyChainHangsTheChecker$", "-test.count=1")
	cmd.Env = append(os.Environ(), "INLET_REVIEW_MERGE_CHAIN=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("Parse of a %d-byte file (a chain of 40 anchors, each merged twice) had not returned after %s (killed): "+
			"inlet config check and every service hang on it at full CPU", len(doc), time.Since(start).Round(time.Second))
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "parse returned: ") || strings.Contains(string(out), "parse returned: <nil>") {
		t.Fatalf("want a problem for the file; child said:\n%s", out)
	}
}

// TestMergeKeyListIsRefused (review helper-141, fixed; this describes the code before the fix):
// a merge key with a list of mappings (`<<: [*base, *tuning]`,
// standard YAML merge syntax that yaml.v3 decodes, and that the checker's
// own comment says is "read as if written here") is refused by `inlet
// config check` and every service with the wrong message "ingress: must be
// a mapping (indented key: value lines, or {key: value})": the checker
// (internal/config/check.go:64-66) hands the merge value to c.node with the
// struct type, and a sequence there falls to c.decode of a list into a
// struct.
//
// Now: the file is accepted and read as the decoder merges it
// (ingress.listen ":9000", ingress.store_timeout 3s).
func TestMergeKeyListIsRefused(t *testing.T) {
	t.Parallel()
	doc := "ingress:\n  <<: [{listen: \":9000\"}, {store_timeout: 3s}]\n"
	c, err := Parse([]byte(doc), env(nil))
	if err != nil {
		t.Fatalf("a merge key with a list of mappings (standard YAML, decoded by yaml.v3): %v; want it read", err)
	}
	if c.Ingress.Listen != ":9000" || c.Ingress.StoreTimeout != 3*time.Second {
		t.Fatalf("merged ingress: listen %q store_timeout %s; want :9000 and 3s", c.Ingress.Listen, c.Ingress.StoreTimeout)
	}
}

// TestListenerCollisionsAccepted (review helper-141, fixed; this describes the code before the fix):
// `inlet config check` says ok for a file whose service cannot
// start because two of its own listeners are the same address:
// ingress.metrics_listen equal to ingress.listen (docs: the metrics
// listener is "never on the webhook port"), admin.listen equal to
// ingress.metrics_listen (both served by inlet ingress / inlet dev), and
// relay.metrics_listen equal to relay.listen. inlet ingress binds the
// metrics listener first (cmd/inlet/ingress.go:70) and then fails on the
// webhook listener with "address already in use". The check exists only for
// admin.listen against ingress.listen (inletyaml/inletyaml.go:158,
// sameListener).
//
// Now: each is a problem naming the key, as admin.listen vs
// ingress.listen is.
func TestListenerCollisionsAccepted(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ what, doc string }{
		{"ingress.metrics_listen on the webhook port", "ingress: {listen: \":8080\", metrics_listen: \":8080\"}\n"},
		{"ingress.metrics_listen on every interface at the webhook port", "ingress: {listen: \"127.0.0.1:8080\", metrics_listen: \":8080\"}\n"},
		{"admin.listen on the metrics listener", "ingress: {metrics_listen: \"127.0.0.1:9000\"}\nadmin: {listen: \"127.0.0.1:9000\", token: abcdefghijklmnopqrstuvwxyz}\n"},
		{"relay.metrics_listen on the relay's webhook port", "relay: {listen: \":8080\", metrics_listen: \":8080\"}\n"},
	} {
		if got := problems(t, c.doc, env(nil), config.AllSections); len(got) == 0 {
			t.Errorf("%s: inlet config check says ok; the service fails at start (address already in use)", c.what)
		}
	}
	// The control: the one pair checked today.
	if got := problems(t, "admin: {listen: \":8080\", token: abcdefghijklmnopqrstuvwxyz}\n", env(nil), config.AllSections); len(got) == 0 {
		t.Fatal("control: admin.listen on the webhook port is accepted")
	}
}

// TestNaNIsInRange (review helper-141, fixed; this describes the code before the fix):
// `.nan` (a YAML float) passes the range checks of the float
// settings, because every comparison with NaN is false:
// monitor/section.go:68 (`s.Factor < 1`, documented "at least 1") and
// internal/tracing/section.go:29 (`<= 0 || > 1`, documented "0 < r ≤ 1").
// consumers' rate_limit already refuses NaN (consumers/handler.go:246).
// With factor NaN the silence threshold is time.Duration(NaN × median),
// which Go converts to math.MinInt64 on amd64, so max(..., min_silence)
// makes every source silent after min_silence (1m): a source whose events
// come hours apart alerts every minute of every gap.
//
// Now: a problem naming silence.factor / tracing.sample_ratio.
func TestNaNIsInRange(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		"silence: {factor: .nan}\n",
		"tracing: {sample_ratio: .nan}\n",
	} {
		if got := problems(t, doc, env(nil), config.AllSections); len(got) == 0 {
			t.Errorf("%q: inlet config check says ok; want a problem naming the key", strings.TrimSpace(doc))
		}
	}
}

// TestConsumerHealthListenUnknownPortAccepted (review helper-141, fixed; this describes the code before the fix):
// consumer.health_listen has a check of its own
// (consumers/section.go:125-129) instead of config.CheckListen, which
// streamer.health_listen, ingress.listen and the others use: a port that is
// neither a number nor a known service ("127.0.0.1:metrics") passes `inlet
// config check`, and inlet consumer then fails at start (net.Listen: unknown
// port); the same value in streamer.health_listen is a problem of the file.
//
// Now: the same problem for consumer.health_listen as for
// streamer.health_listen.
func TestConsumerHealthListenUnknownPortAccepted(t *testing.T) {
	t.Parallel()
	const addr = "127.0.0.1:inletnosuchservice"
	if got := problems(t, "streamer: {health_listen: \""+addr+"\"}\n", env(nil), config.AllSections); len(got) == 0 {
		t.Fatal("control: streamer.health_listen with an unknown port name is accepted")
	}
	got := problems(t, "consumer: {health_listen: \""+addr+"\"}\n", env(nil), config.AllSections)
	if len(got) == 0 {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			ln.Close()
		}
		t.Errorf("consumer.health_listen %q: inlet config check says ok, but the listener cannot be opened: %v", addr, err)
	}
}
