package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

// Usage errors are found before any database is needed: these run with none.
func TestEventsDlqReplayUsageErrors(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Chdir(t.TempDir())
	cases := [][]string{
		{"events"},
		{"events", "frobnicate"},
		{"events", "list", "extra"},
		{"events", "list", "--since", "yesterday"},
		{"events", "list", "--until", "3/3/2026"},
		{"events", "list", "--nope"},
		{"events", "show"},
		{"events", "show", "abc"},
		{"events", "show", "0"},
		{"events", "show", "1", "2"},
		{"events", "show", "1", "--raw", "--json"},
		{"events", "verify"},
		{"events", "verify", "--since", "soon"},
		{"dlq"},
		{"dlq", "show"},
		{"dlq", "show", "x"},
		{"dlq", "list", "--since", "-1h"},
		{"replay"},
		{"replay", "--handler", "billing"},
		{"replay", "--job", "1", "--handler", "billing"},
		{"replay", "--handler", "billing", "--dead-letters", "--source", "stripe"},
		{"replay", "--job", "1", "--max-jobs", "0"},
		{"replay", "--handler", "billing", "--since", "later"},
		{"replay", "extra"},
		{"subscriptions"},
		{"subscriptions", "disable"},
		{"subscriptions", "enable", "--handler", "h", "other"},
		{"subscriptions", "disable", "h", "extra"},
		{"subscriptions", "list", "extra"},
	}
	for _, args := range cases {
		var out, errOut bytes.Buffer
		err := run(context.Background(), &environment{stdout: &out, stderr: &errOut}, args)
		if !errors.Is(err, errUsage) {
			t.Errorf("inlet %s: error %v, want a usage error", strings.Join(args, " "), err)
		}
	}
}

func TestEventsDlqReplayHelp(t *testing.T) {
	for _, args := range [][]string{
		{"events", "--help"}, {"events", "list", "--help"}, {"events", "show", "--help"}, {"events", "verify", "--help"},
		{"dlq", "--help"}, {"dlq", "list", "--help"}, {"dlq", "show", "--help"}, {"replay", "--help"},
		{"subscriptions", "--help"}, {"subscriptions", "list", "--help"}, {"subscriptions", "disable", "--help"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), &environment{stdout: &out, stderr: &errOut}, args)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("inlet %s: %v, want help", strings.Join(args, " "), err)
		}
		name := strings.Join(args[:len(args)-1], " ")
		if s := out.String(); !strings.Contains(s, "Usage: inlet "+name) || !strings.Contains(s, "-config") || !strings.Contains(s, "webhook_operator") {
			t.Errorf("inlet %s --help:\n%s", name, s)
		}
	}
}

func TestParseBodyPrintable(t *testing.T) {
	for body, want := range map[string]bool{
		"":                        true,
		`{"a":"b"}`:               true,
		"line\r\nline\ttab\n":     true,
		"grüße ✓":                 true,
		"\x00":                    false,
		"\x1b[31mred":             false,
		"\xff\xfe":                false,
		"c1 \u0085 control":       false,
		"bidi \u202e reversed":    false,
		"del \x7f":                false,
		"form=1&feed=%0A&x=%1B[m": true,
	} {
		if got := printableText([]byte(body)); got != want {
			t.Errorf("printableText(%q) = %v", body, got)
		}
	}
	if safe("evt_1") != "evt_1" || safe("a\x1b[2Jb") != `"a\x1b[2Jb"` || cell("") != "-" {
		t.Errorf("safe/cell: %q %q", safe("a\x1b[2Jb"), cell(""))
	}
	var out bytes.Buffer
	printBody(&out, 7, []byte("\x00\x01binary"))
	if s := out.String(); !strings.Contains(s, "inlet events show 7 --raw") || !strings.Contains(s, "00 01 62 69") {
		t.Errorf("binary body shown as:\n%s", s)
	}
}

// inlet events show and inlet dlq show list a job's successful attempt with
// its failures: number, consumer and completion time; an expired lease has
// no consumer.
func TestPrintJobShowsEveryAttempt(t *testing.T) {
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	str := func(s string) *string { return &s }
	done := at("2026-11-24T10:00:07Z")
	j := admin.Job{ID: 9, Handler: "billing", Status: "completed", AttemptCount: 2, MaxAttempts: 5, WorkerID: str("consumer-b"), CompletedAt: &done,
		Attempts: []admin.Attempt{
			{ID: 3, Attempt: 1, StartedAt: at("2026-11-24T10:00:00Z"), FinishedAt: at("2026-11-24T10:00:05Z"), Outcome: "lease_expired",
				ErrorClass: str("lease_expired"), DurationMS: 5000},
			{ID: 8, Attempt: 2, WorkerID: str("consumer-b"), StartedAt: at("2026-11-24T10:00:06Z"), FinishedAt: done, Outcome: "completed", DurationMS: 1000},
		}}
	var out bytes.Buffer
	printJob(&out, j)
	s := out.String()
	for _, want := range []string{
		"completed at:       2026-11-24T10:00:07Z (attempt 2, worker consumer-b)",
		"#  OUTCOME        STARTED               FINISHED              DURATION  WORKER",
		"1  lease_expired  2026-11-24T10:00:00Z  2026-11-24T10:00:05Z  5000ms    -           lease_expired",
		"2  completed      2026-11-24T10:00:06Z  2026-11-24T10:00:07Z  1000ms    consumer-b  -",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("printJob lacks %q:\n%s", want, s)
		}
	}
}

// A job completed, replayed and completed again, twice: each run has an
// attempt 1, so the table numbers the runs and each replay marker says which
// run it starts (today's issue: three attempts all numbered 1).
func TestPrintJobNumbersTheRunsOfAReplayedJob(t *testing.T) {
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	str := func(s string) *string { return &s }
	done := at("2026-11-24T12:00:01Z")
	j := admin.Job{ID: 9, Handler: "billing", Status: "completed", AttemptCount: 1, MaxAttempts: 5, WorkerID: str("c3"), CompletedAt: &done,
		Attempts: []admin.Attempt{
			{ID: 3, Run: 1, Attempt: 1, WorkerID: str("c1"), StartedAt: at("2026-11-24T10:00:00Z"), FinishedAt: at("2026-11-24T10:00:01Z"), Outcome: "completed", DurationMS: 1000},
			{ID: 4, Run: 2, Attempt: 1, WorkerID: str("alice"), StartedAt: at("2026-11-24T11:00:00Z"), FinishedAt: at("2026-11-24T11:00:00Z"), Outcome: "replayed"},
			{ID: 5, Run: 2, Attempt: 1, WorkerID: str("c2"), StartedAt: at("2026-11-24T11:00:00Z"), FinishedAt: at("2026-11-24T11:00:01Z"), Outcome: "completed", DurationMS: 1000},
			{ID: 6, Run: 3, Attempt: 1, WorkerID: str("alice"), StartedAt: at("2026-11-24T12:00:00Z"), FinishedAt: at("2026-11-24T12:00:00Z"), Outcome: "replayed"},
			{ID: 7, Run: 3, Attempt: 1, WorkerID: str("c3"), StartedAt: at("2026-11-24T12:00:00Z"), FinishedAt: done, Outcome: "completed", DurationMS: 1000},
		}}
	var out bytes.Buffer
	printJob(&out, j)
	s := out.String()
	for _, want := range []string{
		"job 9  handler billing  completed  attempts 1/5 (run 3)",
		"RUN  #  OUTCOME    STARTED",
		"1    1  completed  2026-11-24T10:00:00Z",
		"2    -  replayed   2026-11-24T11:00:00Z  -                     -         alice   -            replay: run 2 starts at attempt 1 (run 1 ended after 1 attempt)",
		"2    1  completed  2026-11-24T11:00:00Z",
		"3    -  replayed   2026-11-24T12:00:00Z",
		"3    1  completed  2026-11-24T12:00:00Z",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("printJob lacks %q:\n%s", want, s)
		}
	}
}
