package streamer

import (
	"testing"
	"time"
)

// A stream's receive timeout follows the server's wal_sender_timeout: a
// walsender decoding a large transaction reads the status that asks it for
// a reply only every half wal_sender_timeout, so a fixed 60 s ended healthy
// streams behind a server set to 300 s, again on each retry of the same
// transaction (review helper-160).
func TestReceiveTimeoutFollowsWalSenderTimeout(t *testing.T) {
	for _, c := range []struct {
		show string
		want time.Duration
	}{
		{"60s", 100 * time.Second},
		{"1min", 100 * time.Second},
		{"5min", 340 * time.Second},
		{"300000ms", 340 * time.Second},
		{"10s", minReceiveTimeout},
		{"0", maxReceiveTimeout},
		{"1h", maxReceiveTimeout},
	} {
		d, ok := parsePGDuration(c.show)
		if !ok {
			t.Fatalf("parsePGDuration(%q) failed", c.show)
		}
		if got := receiveTimeout(d); got != c.want {
			t.Errorf("wal_sender_timeout %s: receive timeout %s, want %s", c.show, got, c.want)
		}
	}
	for _, bad := range []string{"", "abc", "5 weeks", "-1s"} {
		if _, ok := parsePGDuration(bad); ok {
			t.Errorf("parsePGDuration(%q) accepted", bad)
		}
	}
}
