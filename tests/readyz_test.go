package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// inlet streamer's and inlet consumer's /readyz answer 503 while NATS is
// down and 200 again once they have reconnected. They checked the database
// only: a streamer publishing into a dead server answered ready.
func TestReadyzFollowsNATS(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	dbURL := pgtest.NewDatabase(t)
	cfg, _ := servicesConfig(t, nats.URL(), "http://127.0.0.1:9/", "readyz-forward-secret-0123")
	env := cleanEnv("DATABASE_URL=" + dbURL)
	c := start(t, env, "consumer", "--config", cfg)
	c.waitLog("consumers started", 30*time.Second)
	s := start(t, env, "streamer", "--config", cfg)
	s.waitLog("streamer started", 30*time.Second)
	probes := map[string]string{"consumer": healthAddr(t, c), "streamer": healthAddr(t, s)}

	status := func(addr string) int {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	wait := func(want int, what string) {
		t.Helper()
		for name, addr := range probes {
			testwait.Eventually(t, 30*time.Second, fmt.Sprintf("%s /readyz %d %s", name, want, what), func() (bool, string) {
				got := status(addr)
				return got == want, fmt.Sprintf("%d", got)
			})
		}
	}
	wait(http.StatusOK, "with NATS up")
	nats.Stop()
	wait(http.StatusServiceUnavailable, "with NATS down")
	if err := nats.Restart(); err != nil {
		t.Fatal(err)
	}
	wait(http.StatusOK, "after NATS came back")
}

// healthAddr is the address p's health listener logged.
func healthAddr(t *testing.T, p *proc) string {
	t.Helper()
	p.waitLog(`"health listener"`, 30*time.Second)
	for line := range strings.SplitSeq(p.errOut(), "\n") {
		var l struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "health listener" && l.Addr != "" {
			return l.Addr
		}
	}
	t.Fatalf("no health listener address in the log:\n%s", p.errOut())
	return ""
}
