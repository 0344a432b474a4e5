package backfill

import "testing"

// A run's scope names what its lister lists within its source, the same
// for the same listing however it is written: Stripe's types sorted and
// without repeats ("" without types: the whole source), GitHub's
// repository or organization (in lower case, as GitHub reads the names) and
// hook id (review helper-241); the operator's account label first, when
// set (review helper-251): a labelled run without types is not the whole
// source.
func TestListerScope(t *testing.T) {
	t.Parallel()
	stripeOf := func(account string, types ...string) Lister {
		l, err := NewStripe(StripeConfig{APIKey: "sk_test_key", Types: types, Account: account})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	stripe := func(types ...string) Lister { return stripeOf("", types...) }
	githubOf := func(account, repo, org string, hook int64) Lister {
		l, err := NewGitHub(GitHubConfig{Token: "ghp_test", Repo: repo, Org: org, HookID: hook, Account: account})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	github := func(repo, org string, hook int64) Lister { return githubOf("", repo, org, hook) }
	for _, c := range []struct {
		l    Lister
		want string
	}{
		{stripe(), ""},
		{stripe("invoice.paid", "charge.*", "invoice.paid"), "types=charge.*,invoice.paid"},
		{stripe("charge.*", "invoice.paid"), "types=charge.*,invoice.paid"},
		{github("Acme/App", "", 123), "repo=acme/app hook=123"},
		{github("", "acme", 7), "org=acme hook=7"},
		{stripeOf("us"), "account=us"},
		{stripeOf("eu", "invoice.paid", "charge.*"), "account=eu types=charge.*,invoice.paid"},
		{githubOf("ghe", "Acme/App", "", 123), "account=ghe repo=acme/app hook=123"},
	} {
		if got := c.l.scope(); got != c.want {
			t.Errorf("%s: scope %q, want %q", c.l.key(), got, c.want)
		}
	}
}

// An account label is a word of the scope: lower-case letters, digits,
// '.', '_' and '-', at most 40, so no space or '=' can make two labels'
// scopes alike, and one spelling per account (review helper-251).
func TestCheckAccount(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "us", "eu", "live-test", "acct_1.2", "0"} {
		if err := CheckAccount(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"US", "u s", "us types=a", "-us", "a=b", "é", "abcdefghijabcdefghijabcdefghijabcdefghijx"} {
		if err := CheckAccount(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
	if _, err := NewStripe(StripeConfig{APIKey: "sk_test_key", Account: "US"}); err == nil {
		t.Error("NewStripe: account label US accepted")
	}
	if _, err := NewGitHub(GitHubConfig{Token: "t", Repo: "a/b", HookID: 1, Account: "a b"}); err == nil {
		t.Error("NewGitHub: account label \"a b\" accepted")
	}
}
