package backfill

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/schema"
)

// Section is the reconcile: section of inlet.yaml: inlet streamer (one
// replica at a time, elected by an advisory lock) runs Reconcile for each
// listed source every Interval over the last Window. Off by default.
type Section struct {
	// Enabled turns the schedule on. Defaults to false.
	Enabled bool `yaml:"enabled"`
	// Interval is the time between runs. Defaults to 1h; 1m to 24h.
	Interval time.Duration `yaml:"interval"`
	// Window is how far back each run looks. Defaults to 24h; at least
	// Interval (or events between two windows would never be compared),
	// at most 30 days (what Stripe keeps; GitHub keeps about 3 days).
	Window time.Duration `yaml:"window"`
	// Settle leaves the newest events out of each run: a run compares up to
	// Settle ago, so a webhook still on its way (or in its provider's first
	// retries) arrives signed before the run would store the API's unsigned
	// copy in its place. Defaults to 1h or a quarter of Window, whichever
	// is less; from 0 (none: compare up to now) to less than Window. A
	// pointer, so that an explicit 0s is kept, not taken for unset.
	Settle *time.Duration `yaml:"settle"`
	// DBRole is the role events are stored as. Defaults to
	// webhook_ingress_writer, ingress's.
	DBRole string `yaml:"db_role"`
	// Sources are the sources to reconcile. Required when Enabled.
	Sources []ReconcileSource `yaml:"sources"`
}

// ReconcileSource is one source of the schedule and its provider API.
type ReconcileSource struct {
	// Source is the name events are stored under (a source's name in
	// sources:). Required.
	Source string `yaml:"source"`
	// Type is the provider: stripe or github. Required.
	Type string `yaml:"type"`
	// BaseURL is the API's origin. Defaults to the provider's.
	BaseURL string `yaml:"base_url"`
	// APIKey is Stripe's secret or restricted events:read key
	// (${STRIPE_API_KEY}). Required for stripe.
	APIKey string `yaml:"api_key"`
	// Types keeps only these Stripe event types (the webhook endpoint's).
	// Empty: every type of the account.
	Types []string `yaml:"types"`
	// Account labels the account the entry's api_key (or token and
	// base_url) lists: a short name the operator chooses (us, eu, test).
	// Required to tell apart entries of one source that would otherwise
	// list the same scope (two Stripe accounts, or live and test mode,
	// posting to one source; one hook on two GitHub servers): a run's
	// coverage counts for its entry's scope, which the label is part of
	// (account=us types=a,b), and an entry without a label or types covers
	// the whole source. Keep it when the key is rotated; renaming it starts
	// a scope whose coverage only the runs recorded under the new name
	// (and the whole-source runs) give. Never sent to the provider.
	Account string `yaml:"account"`
	// Token may read the GitHub webhook (${GITHUB_TOKEN}). Required for
	// github, with HookID and one of Repo and Org.
	Token  string `yaml:"token"`
	Repo   string `yaml:"repo"`
	Org    string `yaml:"org"`
	HookID int64  `yaml:"hook_id"`
}

// WithDefaults returns a copy with every unset field at its default.
func (s Section) WithDefaults() Section {
	s.Interval = cmp.Or(s.Interval, time.Hour)
	s.Window = cmp.Or(s.Window, 24*time.Hour)
	if s.Settle == nil {
		d := min(time.Hour, s.Window/4)
		s.Settle = &d
	}
	s.DBRole = cmp.Or(s.DBRole, schema.IngressRole)
	return s
}

// Validate checks the section (after WithDefaults) and names the first bad
// key. A disabled section is checked too: turning it on should not be the
// moment a typo shows.
func (s Section) Validate() error {
	switch {
	case s.Interval < time.Minute || s.Interval > 24*time.Hour:
		return fmt.Errorf("reconcile.interval: %s must be between 1m and 24h", s.Interval)
	case s.Window < s.Interval:
		return fmt.Errorf("reconcile.window: %s must be at least reconcile.interval (%s), or events between two windows are never compared", s.Window, s.Interval)
	case s.Window > StripeRetention:
		return fmt.Errorf("reconcile.window: %s is more than 30 days (720h), longer than the providers keep their events", s.Window)
	case s.Settle != nil && (*s.Settle < 0 || *s.Settle >= s.Window): // nil: WithDefaults sets it
		return fmt.Errorf("reconcile.settle: %s must be at least 0 and less than reconcile.window (%s)", *s.Settle, s.Window)
	case s.Enabled && len(s.Sources) == 0:
		return fmt.Errorf("reconcile.sources: enabled with no source to reconcile")
	}
	scopes := make([]string, len(s.Sources))
	for i, src := range s.Sources {
		l, err := src.Lister(time.Time{}, time.Time{})
		if err != nil {
			return fmt.Errorf("reconcile.sources[%d] %q: %w", i, src.Source, err)
		}
		scopes[i] = l.scope()
	}
	return checkScopes(s.Sources, scopes)
}

// checkScopes refuses two entries of one source whose runs would count as
// the other's coverage: the same listing scope (the same account label, or
// none, and the same types; the same repository or organization and hook),
// or an entry of the whole source (no account label, no types) beside any
// other. Their keys may list different accounts (US and EU, live and test
// mode), which the scope cannot see: one entry's catch-up after an outage
// would close the other's gap, and the other's events in it would never be
// compared. scopes[i] is Sources[i]'s.
func checkScopes(srcs []ReconcileSource, scopes []string) error {
	for j := range srcs {
		for i := range j {
			if srcs[i].Source != srcs[j].Source {
				continue
			}
			switch {
			case scopes[i] == scopes[j]:
				return fmt.Errorf("reconcile.sources[%d] and reconcile.sources[%d] (source %q) list the same scope (%s): "+
					"give each an account: label naming the account its key lists (account: us, account: eu), "+
					"or a run of one counts as compared for the other, whose events would go uncompared after an outage; "+
					"if both list the same account, remove one",
					i, j, srcs[i].Source, scopeName(scopes[i]))
			case scopes[i] == "" || scopes[j] == "":
				whole, other := i, j
				if scopes[j] == "" {
					whole, other = j, i
				}
				return fmt.Errorf("reconcile.sources[%d] and reconcile.sources[%d] (source %q): reconcile.sources[%d] has no account: and no types:, "+
					"so a run of it counts as compared for the whole source, reconcile.sources[%d] (%s) too: "+
					"give each an account: label naming the account its key lists (account: us, account: eu)",
					i, j, srcs[i].Source, whole, other, scopes[other])
			}
		}
	}
	return nil
}

// Lister is src's provider list over [since, until] (zero: unbounded).
func (src ReconcileSource) Lister(since, until time.Time) (Lister, error) {
	if src.Source == "" {
		return nil, fmt.Errorf("source: the name events are stored under is required")
	}
	// A setting of the other provider's API is refused, not ignored: types
	// on a github entry listed and stored every type the hook delivered
	// (the CLI's --types alike: review helpers 323 and 335).
	var other []string
	switch src.Type {
	case "stripe":
		for _, k := range []struct {
			key string
			set bool
		}{{"token", src.Token != ""}, {"repo", src.Repo != ""}, {"org", src.Org != ""}, {"hook_id", src.HookID != 0}} {
			if k.set {
				other = append(other, k.key)
			}
		}
	case "github":
		for _, k := range []struct {
			key string
			set bool
		}{{"api_key", src.APIKey != ""}, {"types", len(src.Types) > 0}} {
			if k.set {
				other = append(other, k.key)
			}
		}
	}
	if len(other) > 0 {
		return nil, fmt.Errorf("%s: not a setting of a %s entry (the other provider's API)", strings.Join(other, ", "), src.Type)
	}
	switch src.Type {
	case "stripe":
		return NewStripe(StripeConfig{APIKey: src.APIKey, BaseURL: src.BaseURL, Types: src.Types, Account: src.Account, Since: since, Until: until})
	case "github":
		return NewGitHub(GitHubConfig{Token: src.Token, BaseURL: src.BaseURL, Repo: src.Repo, Org: src.Org, HookID: src.HookID, Account: src.Account})
	}
	return nil, fmt.Errorf("type: %q is not stripe or github", src.Type)
}

// AccountRun is what a manual Stripe run labelled with an account (inlet
// reconcile stripe --account) lists, and which reconcile.sources entry its
// recorded scope is.
type AccountRun struct {
	// Types are the event types the run lists: its own (--types), or,
	// without them, those of the entry its label names.
	Types []string
	// Entry is the index in Sources of the entry whose scope the run
	// records, whose schedule counts its window as compared; -1 for none
	// (no entry of that label, or other types than the entry's: the run
	// records a scope of its own, which counts for no entry).
	Entry int
}

// AccountRun resolves a manual Stripe run of source labelled account (not
// ""), types its --types (empty: not given). Without types it lists the
// types of the source's Stripe entry of that label, so that it records
// exactly the entry's scope (account=us types=a,b) and closes the entry's
// gap, as the label says it catches up for that entry: recorded as
// account=us alone it would count for no typed entry, and the schedule
// would list the API over the stretch again. Of several entries of the
// label (other types each) it takes the one without types, else it is an
// error naming their types (the run must choose with --types). With types
// it lists those, and counts for the entry of the label whose types are the
// same (in any order, repeats aside), for none otherwise.
func (s Section) AccountRun(source, account string, types []string) (AccountRun, error) {
	run := AccountRun{Types: types, Entry: -1}
	var entries []int
	for i, e := range s.Sources {
		if e.Source == source && e.Type == "stripe" && e.Account == account {
			entries = append(entries, i)
		}
	}
	if len(types) > 0 {
		for _, i := range entries {
			if typesKey(s.Sources[i].Types) == typesKey(types) {
				run.Entry = i
			}
		}
		return run, nil
	}
	for _, i := range entries {
		if len(s.Sources[i].Types) == 0 {
			run.Entry = i
			return run, nil
		}
	}
	switch len(entries) {
	case 0:
		return run, nil
	case 1:
		run.Entry = entries[0]
		run.Types = slices.Clone(s.Sources[entries[0]].Types)
		return run, nil
	}
	lists := make([]string, len(entries))
	for j, i := range entries {
		lists[j] = fmt.Sprintf("reconcile.sources[%d] types %s", i, typesKey(s.Sources[i].Types))
	}
	return run, fmt.Errorf("reconcile.sources has %d stripe entries of source %q with account: %s (%s): pass --types with the types of the entry the run catches up for",
		len(entries), source, account, strings.Join(lists, "; "))
}
