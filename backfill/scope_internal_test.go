package backfill

import "testing"

// A run's scope names what its lister lists within its source, the same
// for the same listing however it is written: Stripe's types sorted and
// without repeats ("" without types: the whole source), GitHub's
// repository or organization (in lower case, as GitHub reads the names) and
// hook id (review helper-241).
func TestListerScope(t *testing.T) {
	t.Parallel()
	stripe := func(types ...string) Lister {
		l, err := NewStripe(StripeConfig{APIKey: "sk_test_key", Types: types})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	github := func(repo, org string, hook int64) Lister {
		l, err := NewGitHub(GitHubConfig{Token: "ghp_test", Repo: repo, Org: org, HookID: hook})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, c := range []struct {
		l    Lister
		want string
	}{
		{stripe(), ""},
		{stripe("invoice.paid", "charge.*", "invoice.paid"), "types=charge.*,invoice.paid"},
		{stripe("charge.*", "invoice.paid"), "types=charge.*,invoice.paid"},
		{github("Acme/App", "", 123), "repo=acme/app hook=123"},
		{github("", "acme", 7), "org=acme hook=7"},
	} {
		if got := c.l.scope(); got != c.want {
			t.Errorf("%s: scope %q, want %q", c.l.key(), got, c.want)
		}
	}
}
