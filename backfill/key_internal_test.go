package backfill

import "testing"

// The state file's key names a backfill's query: the same types in another
// order (or repeated) are the same backfill, so its cursor resumes (noticed
// by review helper-72: --types a,b then b,a was refused as "a different
// backfill").
func TestStripeKeyIgnoresTypeOrder(t *testing.T) {
	t.Parallel()
	a, err := NewStripe(StripeConfig{APIKey: "sk_test_key", Types: []string{"invoice.paid", "charge.*"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewStripe(StripeConfig{APIKey: "sk_test_key", Types: []string{"charge.*", "invoice.paid", "charge.*"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.key() != b.key() {
		t.Fatalf("keys differ for the same types: %q, %q", a.key(), b.key())
	}
	c, err := NewStripe(StripeConfig{APIKey: "sk_test_key", Types: []string{"invoice.paid"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.key() == c.key() {
		t.Fatalf("other types, same key %q", a.key())
	}
}
