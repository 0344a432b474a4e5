package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// inlet events list --json prints the cursor of the next page in "next"
// (ID@TIME@SNAPSHOT: the pages it leads to show the log as of the first
// page), --before takes it back, and a malformed --before is a usage error
// found before anything connects; a bare id still pages by id.
func TestEventsListPagesWithTheCursor(t *testing.T) {
	db := operatorDatabase(t)
	for _, id := range []string{"evt_1", "evt_2", "evt_3"} {
		storeEvent(t, db, "stripe", id)
	}
	type list struct {
		Items []struct {
			ID              int64  `json:"id"`
			ExternalEventID string `json:"external_event_id"`
		} `json:"items"`
		Next *string `json:"next"`
	}
	page := func(args ...string) list {
		t.Helper()
		out, err := runInlet(t, append([]string{"events", "list", "--json"}, args...)...)
		if err != nil {
			t.Fatalf("inlet events list --json %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		var l list
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatalf("inlet events list --json %s printed %s: %v", strings.Join(args, " "), out, err)
		}
		return l
	}
	first := page("--limit", "2")
	if len(first.Items) != 2 || first.Items[0].ExternalEventID != "evt_3" || first.Next == nil ||
		!strings.Contains(*first.Next, "@") {
		t.Fatalf("first page: %+v, want evt_3, evt_2 and a cursor", first)
	}
	rest := page("--limit", "2", "--before", *first.Next)
	if len(rest.Items) != 1 || rest.Items[0].ExternalEventID != "evt_1" || rest.Next != nil {
		t.Fatalf("second page: %+v, want evt_1 and no next", rest)
	}
	byID := page("--limit", "1", "--before", "9223372036854775807")
	if len(byID.Items) != 1 || byID.Items[0].ExternalEventID != "evt_3" || byID.Next == nil {
		t.Fatalf("a bare id: %+v, want evt_3 and a cursor", byID)
	}
	for _, bad := range []string{"x", "1@2", "1@1700000000@5:2:", "1@1700000000@1:9:3,3"} {
		out, err := runInlet(t, "events", "list", "--before", bad)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--before") {
			t.Errorf("inlet events list --before %q: %v; want a usage error about --before (printed %q)", bad, err, out)
		}
	}
}
