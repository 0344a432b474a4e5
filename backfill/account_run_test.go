package backfill_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/backfill"
)

// A manual Stripe run labelled with an account lists and records the scope
// of the reconcile.sources entry of that label: without types, the entry's
// types (of several entries of the label, the one without types; else an
// error naming them); with types, those, counting for the entry of the same
// types in any order, for none otherwise (helper-263).
func TestAccountRunTakesTheEntryOfItsLabel(t *testing.T) {
	t.Parallel()
	s := backfill.Section{Sources: []backfill.ReconcileSource{
		{Source: "stripe", Type: "stripe", Account: "us", Types: []string{"invoice.paid", "charge.refunded"}},
		{Source: "stripe", Type: "stripe", Account: "eu"},
		{Source: "other", Type: "stripe", Account: "us", Types: []string{"invoice.created"}},
		{Source: "twin", Type: "stripe", Account: "us", Types: []string{"a"}},
		{Source: "twin", Type: "stripe", Account: "us", Types: []string{"b"}},
		{Source: "mixed", Type: "stripe", Account: "us", Types: []string{"a"}},
		{Source: "mixed", Type: "stripe", Account: "us"},
	}}
	for _, c := range []struct {
		name, source, account string
		types                 []string
		want                  backfill.AccountRun
		err                   string
	}{
		{"entry's types taken", "stripe", "us", nil, backfill.AccountRun{Types: []string{"invoice.paid", "charge.refunded"}, Entry: 0}, ""},
		{"entry without types", "stripe", "eu", nil, backfill.AccountRun{Entry: 1}, ""},
		{"same types reordered", "stripe", "us", []string{"charge.refunded", "invoice.paid", "invoice.paid"},
			backfill.AccountRun{Types: []string{"charge.refunded", "invoice.paid", "invoice.paid"}, Entry: 0}, ""},
		{"other types: own scope", "stripe", "us", []string{"invoice.paid"}, backfill.AccountRun{Types: []string{"invoice.paid"}, Entry: -1}, ""},
		{"unknown label", "stripe", "test", nil, backfill.AccountRun{Entry: -1}, ""},
		{"other source's entry", "other", "us", nil, backfill.AccountRun{Types: []string{"invoice.created"}, Entry: 2}, ""},
		{"two typed entries: ambiguous", "twin", "us", nil, backfill.AccountRun{Entry: -1}, "pass --types"},
		{"two typed entries: types choose", "twin", "us", []string{"b"}, backfill.AccountRun{Types: []string{"b"}, Entry: 4}, ""},
		{"untyped entry of the label wins", "mixed", "us", nil, backfill.AccountRun{Entry: 6}, ""},
	} {
		got, err := s.AccountRun(c.source, c.account, c.types)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "" && (got.Entry != c.want.Entry || !slices.Equal(got.Types, c.want.Types)):
			t.Errorf("%s: AccountRun(%q, %q, %q) = %+v, want %+v", c.name, c.source, c.account, c.types, got, c.want)
		}
	}
}
