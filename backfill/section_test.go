package backfill_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/monitor"
)

// A reconcile: setting out of range stops the service at start, naming the
// key.
func TestReconcileSectionNamesTheBadKey(t *testing.T) {
	t.Parallel()
	stripe := backfill.ReconcileSource{Source: "stripe", Type: "stripe", APIKey: "sk_test"}
	for _, c := range []struct {
		name string
		s    backfill.Section
		want string // "" valid
	}{
		{"defaults", backfill.Section{}, ""},
		{"enabled", backfill.Section{Enabled: true, Sources: []backfill.ReconcileSource{stripe}}, ""},
		{"interval too short", backfill.Section{Interval: 30 * time.Second}, "reconcile.interval"},
		{"interval too long", backfill.Section{Interval: 25 * time.Hour, Window: 48 * time.Hour}, "reconcile.interval"},
		{"window shorter than interval", backfill.Section{Interval: 2 * time.Hour, Window: time.Hour}, "reconcile.window"},
		{"window past Stripe's 30 days", backfill.Section{Window: 31 * 24 * time.Hour}, "reconcile.window"},
		{"no settle", backfill.Section{Settle: new(time.Duration(0))}, ""},
		{"negative settle", backfill.Section{Settle: new(-time.Second)}, "reconcile.settle"},
		{"settle as long as the window", backfill.Section{Window: 2 * time.Hour, Settle: new(2 * time.Hour)}, "reconcile.settle"},
		{"enabled without sources", backfill.Section{Enabled: true}, "reconcile.sources"},
		{"unknown type", backfill.Section{Sources: []backfill.ReconcileSource{{Source: "x", Type: "paddle"}}}, `reconcile.sources[0] "x": type`},
		{"stripe without a key", backfill.Section{Sources: []backfill.ReconcileSource{{Source: "stripe", Type: "stripe"}}}, `reconcile.sources[0] "stripe"`},
		{"github without a hook", backfill.Section{Sources: []backfill.ReconcileSource{{Source: "gh", Type: "github", Token: "t", Repo: "a/b"}}}, `reconcile.sources[0] "gh"`},
	} {
		err := c.s.WithDefaults().Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("%s: err %v, want it to start with %q", c.name, err, c.want)
		}
	}
}

// settle: 0s in inlet.yaml means no settle (a run compares up to now), as
// Validate allows; only a missing key takes the default. Before, WithDefaults
// (cmp.Or) turned 0s into 1h: the setting could not be had (the "0s" case
// failed). A bare 0 is refused as for every duration key.
func TestReconcileSettleZeroIsKept(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, yaml string
		want       time.Duration
	}{
		{"unset", "reconcile:\n  enabled: false\n", time.Hour},
		{"unset, short window", "reconcile:\n  window: 2h\n", 30 * time.Minute},
		{"0s", "reconcile:\n  settle: 0s\n", 0},
		{"5m", "reconcile:\n  settle: 5m\n", 5 * time.Minute},
	} {
		doc := "database_url: postgres://localhost/inlet\n" + c.yaml
		cfg, err := inletyaml.ParseFor([]byte(doc), func(string) (string, bool) { return "", false }, config.StreamerService)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := cfg.Reconcile.Settle; got == nil || *got != c.want {
			t.Errorf("%s: reconcile.settle = %v, want %s", c.name, got, c.want)
		}
	}
}

// countingLeader counts the elections asked of a monitor.Leader.
type countingLeader struct {
	*monitor.Leader
	asked *atomic.Int32
}

func (c countingLeader) Leading(ctx context.Context) (bool, error) {
	defer c.asked.Add(1)
	return c.Leader.Leading(ctx)
}

// Of two streamers scheduling reconcile on one database, one runs it: one
// run is recorded, the missing events are stored once.
func TestScheduleRunsOnOneReplica(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	now := time.Now().UTC()
	var events []reconcileEvent
	for i := range 5 {
		events = append(events, reconcileEvent{id: fmt.Sprintf("evt_s%d", i), typ: "invoice.paid", at: now.Add(-time.Duration(i+1) * time.Minute), delivered: i%2 == 0})
	}
	b.deliver(t, "stripe", "stripe", events, stripeEventJSON)
	srv := httptest.NewServer(&listStripe{events: events, pageSize: 2})
	defer srv.Close()
	section := backfill.Section{Enabled: true, Settle: new(time.Second), Sources: []backfill.ReconcileSource{
		{Source: "stripe", Type: "stripe", APIKey: "sk_test_reconcile", BaseURL: srv.URL}}}.WithDefaults()
	if err := section.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var asked atomic.Int32
	var wg sync.WaitGroup
	for range 2 {
		leader := monitor.NewNamedLeader(b.pool.Config().ConnConfig, "inlet:reconcile")
		defer leader.Close()
		wg.Go(func() {
			backfill.Schedule(ctx, backfill.ScheduleConfig{Section: section, Store: b.store, DB: b.pool,
				Leader: countingLeader{leader, &asked}, Metrics: b.metrics})
		})
	}
	testwait.Eventually(t, 30*time.Second, "both replicas elected and a run finished", func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE finished_at IS NOT NULL`)
		return asked.Load() == 2 && n >= 1, fmt.Sprintf("%d elections, %d finished runs", asked.Load(), n)
	})
	cancel()
	wg.Wait()
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.reconcile_runs`); n != 1 {
		t.Errorf("%d runs, want 1: only the leader reconciles", n)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'stripe' AND headers ? 'Inlet-Reconcile'`); n != 2 {
		t.Errorf("%d reconciled events, want the 2 missing", n)
	}
	if got := b.missingMetric(t, "stripe"); got != 2 {
		t.Errorf("inlet_reconcile_missing_total = %v, want 2", got)
	}
}

// A reconcile.sources entry with a setting of the other provider's API is
// refused naming the key, as the CLI refuses the flag: types on a github
// entry was accepted and ignored, every type the hook delivered listed and
// stored (review helper-335).
func TestReconcileSourceRefusesTheOtherProvidersSettings(t *testing.T) {
	for _, c := range []struct {
		src  backfill.ReconcileSource
		want string
	}{
		{backfill.ReconcileSource{Source: "gh", Type: "github", Token: "ghp_x", Repo: "acme/app", HookID: 7, Types: []string{"push"}}, "types"},
		{backfill.ReconcileSource{Source: "gh", Type: "github", Token: "ghp_x", Repo: "acme/app", HookID: 7, APIKey: "sk_test_x"}, "api_key"},
		{backfill.ReconcileSource{Source: "st", Type: "stripe", APIKey: "sk_test_x", Repo: "acme/app"}, "repo"},
		{backfill.ReconcileSource{Source: "st", Type: "stripe", APIKey: "sk_test_x", Token: "ghp_x", HookID: 7}, "token, hook_id"},
	} {
		err := backfill.Section{Sources: []backfill.ReconcileSource{c.src}}.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), c.want+": not a setting of a "+c.src.Type+" entry") {
			t.Errorf("%+v: %v; want an error naming %s", c.src, err, c.want)
		}
	}
	ok := backfill.Section{Sources: []backfill.ReconcileSource{
		{Source: "gh", Type: "github", Token: "ghp_x", Repo: "acme/app", HookID: 7},
		{Source: "st", Type: "stripe", APIKey: "sk_test_x", Types: []string{"invoice.*"}},
	}}.WithDefaults()
	if err := ok.Validate(); err != nil {
		t.Errorf("entries with their own provider's settings only: %v", err)
	}
}
