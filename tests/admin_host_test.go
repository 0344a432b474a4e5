package tests

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestDevAdminAPIRefusesARebindingHost: inlet dev's admin listener, whose
// token is public, answers only requests for localhost (421 for any other
// Host, dashboard included), so a web page cannot reach it by DNS
// rebinding.
//
// Regression test (review helper-111; fixed by
// admin.APIConfig.LoopbackHostsOnly: the text describes the behaviour
// before the fix). The API and the dashboard accepted any Host header: a
// page the developer opened could rebind its name to 127.0.0.1, be
// same-origin with the listener, send the well-known token, read every raw
// body and re-queue jobs.
func TestDevAdminAPIRefusesARebindingHost(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	adminAddr := freeAddr(t)
	env := cleanEnv("DATABASE_URL="+url, "INLET_ADMIN_TOKEN=", "INLET_LISTEN="+freeAddr(t),
		"INLET_METRICS_LISTEN="+freeAddr(t), "INLET_ADMIN_LISTEN="+adminAddr)
	p := start(t, env, "dev")
	p.waitLog("admin API listening", 2*time.Minute)

	_, port, _ := net.SplitHostPort(adminAddr)
	for _, path := range []string{"/api/events", "/api/dlq", "/dashboard/"} {
		req, err := http.NewRequest("GET", "http://"+adminAddr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "rebind.attacker.example:" + port // what a rebinding page's browser sends
		req.Header.Set("Origin", "http://rebind.attacker.example:"+port)
		req.Header.Set("Authorization", "Bearer inlet-dev-admin-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("GET %s with Host %s and the public dev token: %d %s\n  want it refused (421): a foreign Host on the loopback admin listener is DNS rebinding",
				path, req.Host, resp.StatusCode, body)
		}
	}
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "LOCALHOST"} {
		req, err := http.NewRequest("GET", "http://"+adminAddr+"/api/events", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Authorization", "Bearer inlet-dev-admin-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /api/events with Host %s: %d, want 200", host, resp.StatusCode)
		}
	}
}
