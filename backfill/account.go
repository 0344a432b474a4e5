package backfill

import "fmt"

// maxAccountLen bounds an account label: a short name, not a description.
const maxAccountLen = 40

// CheckAccount checks an account label (StripeConfig.Account,
// GitHubConfig.Account, reconcile.sources[].account, --account): empty, or
// 1 to 40 lower-case letters, digits, '.', '_' and '-', starting with a
// letter or digit (us, eu, live, test-mode). It is a word of the scope a
// reconcile run records (account=us types=a,b), so neither a space nor '='
// may be in it, and one spelling per account: "US" and "us" would be two
// scopes, each without the other's coverage.
func CheckAccount(label string) error {
	if label == "" {
		return nil
	}
	if len(label) > maxAccountLen {
		return fmt.Errorf("account label %q: longer than %d characters", label, maxAccountLen)
	}
	for i, r := range label {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case i > 0 && (r == '.' || r == '_' || r == '-'):
		default:
			return fmt.Errorf("account label %q: want lower-case letters, digits, '.', '_' and '-', starting with a letter or digit (us, eu, test)", label)
		}
	}
	return nil
}
