//go:build knownlimits

package consumers_test

import (
	"context"
	"testing"

	"github.com/inlet-dev/inlet/consumers"
)

// Known limit (review helper-84; fails by design, under the knownlimits
// tag). Migration 046 keeps a consumer role's registration from switching
// off another role's subscription rows of a shared handler only in the
// SDK's own statement. During a rolling upgrade to 046, a consumer of the
// version before it that (re)starts still switches them off, until the
// other role's service registers again. Enforcing it in the policy
// (USING in_registrant_scope) was tried and kept out: it also takes from a
// role the right 038 gives it, to switch off its own rows that fell outside
// its scopes. Drain or replace the consumers of shared handlers together.
func TestKnownLimitPreviousVersionRegistrationDisablesOtherScope(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	cfgA := scopedRolePool(t, b, "stripe", "shared")
	cfgB := scopedRolePool(t, b, "github", "shared")

	// Role B's consumer (this version) registers its scope's pattern.
	cfgB.Handlers = []consumers.Handler{{Name: "shared", Provider: "github", Func: ok}}
	svcB, err := consumers.New(*cfgB)
	if err != nil {
		t.Fatal(err)
	}
	if err := svcB.Register(ctx); err != nil {
		t.Fatal(err)
	}

	// Role A's consumer of the previous version (before 046) restarts and
	// registers its own pattern: its upsert is unchanged, its
	// DisableOtherSubscriptions is the one of 13c64fd.
	cfgA.Handlers = []consumers.Handler{{Name: "shared", Provider: "stripe", Func: ok}}
	svcA, err := consumers.New(*cfgA)
	if err != nil {
		t.Fatal(err)
	}
	if err := svcA.Register(ctx); err != nil {
		t.Fatal(err)
	}
	const previousDisableOther = `UPDATE webhook_ingress.subscriptions s
SET enabled = false, updated_at = now()
WHERE s.handler = $1
  AND s.enabled
  AND (s.provider_pattern, s.event_type_pattern) NOT IN (
      SELECT p, t FROM ROWS FROM (unnest($2::text[]), unnest($3::text[])) AS u(p, t))`
	tag, err := cfgA.Pool.Exec(ctx, previousDisableOther, "shared", []string{"stripe"}, []string{"*"})
	if err != nil {
		t.Fatalf("previous version's DisableOtherSubscriptions as role A: %v", err)
	}

	var enabled bool
	if err := b.Admin.QueryRow(ctx, `SELECT enabled FROM webhook_ingress.subscriptions
		WHERE handler = 'shared' AND provider_pattern = 'github' AND event_type_pattern = '*'`).Scan(&enabled); err != nil {
		t.Fatal(err)
	}
	if !enabled {
		t.Fatalf("after 046, role A (scope stripe) running the previous version's registration switched off %d row(s), "+
			"among them role B's (scope github) subscription of the shared handler: github events get no job of it", tag.RowsAffected())
	}
}
