package backfill_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/inlet-dev/inlet/backfill"
)

// A delivery whose fetch fails in the middle of a page stops the run after
// the deliveries before it were stored (each is stored as it is fetched);
// the page's cursor is not saved, so the next run reads that page again:
// what was stored is a duplicate, nothing is skipped.
func TestGitHubDeliveryFailureMidPageKeepsWhatWasStoredAndResumes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fake := &fakeGitHub{t: t, pageSize: 2} // pages [5 4] [3 2] [1]
	for i := 5; i >= 1; i-- {
		fake.deliveries = append(fake.deliveries, ghDelivery{id: int64(1000 + i), guid: fmt.Sprintf("guid-%d", i),
			event: "push", payload: fmt.Sprintf(`{"n":%d}`, i)})
	}
	var failed atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == ghPath+"/1002" && failed.CompareAndSwap(false, true) {
			// A refused permission: a final 4xx, not retried (a 404 or
			// 410 would be a delivery gone, skipped; review helper-296).
			w.WriteHeader(http.StatusForbidden)
			return
		}
		fake.ServeHTTP(w, r)
	}))
	defer srv.Close()
	l, err := backfill.NewGitHub(backfill.GitHubConfig{Token: "ghp_backfill", BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stats, err := backfill.Run(ctx, b.config("github", "github"), l)
	if !errors.Is(err, backfill.ErrStatus) || !strings.Contains(err.Error(), "page 2") {
		t.Fatalf("run with a delivery that fails: %v, want ErrStatus on page 2", err)
	}
	if stats.Pages != 1 || stats.Stored != 3 {
		t.Fatalf("interrupted run: %+v, want 1 page and 3 stored (guid-5, guid-4, and guid-3 before the failed guid-2)", stats)
	}
	if n := len(b.events(t, "github")); n != 3 {
		t.Fatalf("%d events stored by the interrupted run, want 3", n)
	}
	state, err := os.ReadFile(b.state)
	if err != nil || !strings.Contains(string(state), `"cursor": "v1_2"`) {
		t.Fatalf("state after the interrupted run: %s %v, want the cursor of page 2", state, err)
	}

	fake.mu.Lock()
	fake.listCursors = nil
	fake.mu.Unlock()
	stats, err = backfill.Run(ctx, b.config("github", "github"), l)
	if err != nil {
		t.Fatal(err)
	}
	if !stats.Resumed || stats.Pages != 3 || stats.Seen != 3 || stats.Stored != 2 || stats.Duplicates != 1 {
		t.Errorf("resumed run: %+v, want page 2 read again: 3 seen, 2 stored, 1 duplicate (guid-3)", stats)
	}
	if got := strings.Join(fake.listCursors, ","); got != "v1_2,v1_4" {
		t.Errorf("resumed run listed cursors %q, want v1_2,v1_4", got)
	}
	if n := len(b.events(t, "github")); n != 5 {
		t.Errorf("%d events, want 5", n)
	}
}

// GitHub answers a token that may not read the hook a bare 404, as if the
// hook did not exist: the error says so and names the scope it needs, for
// a repository and for an organization hook.
func TestGitHub404NamesTheScopeTheTokenNeeds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-GitHub-Request-Id", "CAFE:404:1")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"message":"Not Found","documentation_url":"https://docs.github.com/rest","status":"404"}`))
	}))
	defer srv.Close()
	for _, tc := range []struct {
		cfg   backfill.GitHubConfig
		scope string
	}{
		{backfill.GitHubConfig{Repo: "acme/widgets"}, "admin:repo_hook"},
		{backfill.GitHubConfig{Org: "acme"}, "admin:org_hook"},
	} {
		tc.cfg.Token, tc.cfg.BaseURL, tc.cfg.HookID = "github_pat_11SECRET404token", srv.URL, 42
		l, err := backfill.NewGitHub(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = backfill.Run(context.Background(), b.config("github", "github"), l)
		if err == nil {
			t.Fatal("a 404 was accepted")
		}
		for _, want := range []string{"404 Not Found", `the provider says "Not Found"`, tc.scope, "Webhooks permission"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error does not say %q:\n%v", tc.scope, want, err)
			}
		}
		if strings.Contains(err.Error(), "SECRET404") {
			t.Errorf("the error shows the token: %v", err)
		}
	}
}

// A saved Stripe cursor the provider refuses (the event aged out of its 30
// days) stops the run saying to remove the state file or run with
// --restart, not to run the same command again (which fails the same way
// forever); the file is kept, and --restart starts over. A refused key on a
// resumed cursor is not taken for a refused cursor.
func TestResumedStripeCursorRefusedSaysToStartOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fake := newFakeStripe(t, 10, 2)
	fake.failAfter = 1
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx := context.Background()
	if _, err := backfill.Run(ctx, b.config("stripe", "stripe"), stripeLister(t, srv.URL)); !errors.Is(err, backfill.ErrStatus) {
		t.Fatalf("run against a failing provider: %v, want ErrStatus", err)
	}
	if state, err := os.ReadFile(b.state); err != nil || !strings.Contains(string(state), `"cursor": "evt_0009"`) {
		t.Fatalf("state after the interrupted run: %s %v", state, err)
	}

	// Another key of the same mode that Stripe refuses: a credential
	// fault, not the cursor's.
	other, err := backfill.NewStripe(backfill.StripeConfig{APIKey: "sk_test_rotatedaway", BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	fake.failAfter = 0
	fake.mu.Unlock()
	if _, err := backfill.Run(ctx, b.config("stripe", "stripe"), other); !errors.Is(err, backfill.ErrStatus) || errors.Is(err, backfill.ErrCursorRefused) {
		t.Errorf("a refused key on a resumed cursor: %v, want ErrStatus and not ErrCursorRefused", err)
	}

	// The cursor's event ages out of Stripe's history.
	fake.mu.Lock()
	fake.ids, fake.events = fake.ids[4:], fake.events[4:]
	fake.mu.Unlock()
	_, err = backfill.Run(ctx, b.config("stripe", "stripe"), stripeLister(t, srv.URL))
	if !errors.Is(err, backfill.ErrCursorRefused) || !errors.Is(err, backfill.ErrStatus) {
		t.Fatalf("resumed run at an aged-out cursor: %v, want ErrCursorRefused", err)
	}
	for _, want := range []string{"400 Bad Request", "--restart", b.state} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	if _, serr := os.Stat(b.state); serr != nil {
		t.Errorf("the state file was removed: %v", serr)
	}
	cfg := b.config("stripe", "stripe")
	cfg.Restart = true
	if stats, err := backfill.Run(ctx, cfg, stripeLister(t, srv.URL)); err != nil || stats.Seen != 6 {
		t.Errorf("restart: %+v %v, want the 6 events Stripe keeps", stats, err)
	}
}

// A cursor saved by a run with a test-mode key is not resumed with a
// live-mode key (its event ids are of the other mode: Stripe would refuse
// every run): the state file's key names the mode, never the key.
func TestStripeCursorOfAnotherModeIsNotResumed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fake := newFakeStripe(t, 6, 2)
	fake.failAfter = 1
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx := context.Background()
	if _, err := backfill.Run(ctx, b.config("stripe", "stripe"), stripeLister(t, srv.URL)); !errors.Is(err, backfill.ErrStatus) {
		t.Fatalf("run against a failing provider: %v, want ErrStatus", err)
	}
	state, err := os.ReadFile(b.state)
	if err != nil || !strings.Contains(string(state), "mode=test") || strings.Contains(string(state), "sk_test_backfill") {
		t.Fatalf("state file: %s %v, want the mode and not the key", state, err)
	}
	live, err := backfill.NewStripe(backfill.StripeConfig{APIKey: "sk_live_backfill", BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backfill.Run(ctx, b.config("stripe", "stripe"), live); !errors.Is(err, backfill.ErrStateMismatch) {
		t.Errorf("a live key resuming a test key's cursor: %v, want ErrStateMismatch", err)
	} else if strings.Contains(err.Error(), "sk_live_backfill") {
		t.Errorf("the error shows the key: %v", err)
	}
}
