package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/inletyaml"
)

var eventsVerbs = map[string]subcommand{
	"list":   {"list stored events, newest first, by source, type, time and external id", runEventsList},
	"show":   {"show one event: metadata, headers, the exact body, its jobs and their attempts", runEventsShow},
	"types":  {"every event type seen per source: first and last seen, events, unrouted ones (no job), unrouted first", runEventsTypes},
	"verify": {"re-verify stored events' signatures from their stored bytes; exit 1 if any fails", runEventsVerify},
}

func runEvents(ctx context.Context, env *environment, args []string) error {
	return runVerbs(ctx, env, "events", `
Query the event log: what arrived, exactly as it was signed, and what each
handler did with it. Read-only.`+operatorHelp, eventsVerbs, args)
}

func runEventsList(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "events list", "", `
List stored events, newest first: id, time received, when the provider says
it happened (occurred_at; - when it gives none), source, type, external id,
body size and each handler's job status. Bodies are never listed (see inlet
events show). When more events match, the --before to pass for the next page
is printed on stderr (with --json, it is the list's "next"): a cursor,
ID@TIME@SNAPSHOT, whose pages show only the events the first page's
snapshot held, so that all pages together are the log at one moment (ids
are drawn before commit, so a later commit can land below a page already
read; list again to see it). --before with a bare id pages by id alone, in
a fresh snapshot per page.

--where takes a PostgreSQL JSON path predicate over the parsed body
(events.payload, kept for sources with store_json), passed to PostgreSQL as
a parameter and evaluated with @@; a path PostgreSQL rejects is a usage
error with its message. A path that selects values instead of answering
true or false ('$.livemode', '$.data.object ? (@.customer == "cus_123")')
matches an event when it selects something other than false or null (an
array by its elements).
Events without a payload never match.

A --source that is neither configured nor seen in the database (events or
event_types) is a usage error (exit 2) that lists the known sources: a typo,
not an empty list. A source removed from the configuration whose events are
kept still lists them.

  inlet events list --source stripe --type 'invoice.*' --since 24h
  inlet events list --since 2026-03-03 --until 2026-03-04 --json
  inlet events list --where '$.data.object.customer == "cus_123"'
  inlet events list --occurred-before 2026-03-03 --since 2026-03-04   # delivered a day late`+operatorHelp)
	cfgPath := configFlag(fs)
	source := fs.String("source", "", "only events of this source (events.provider): a configured source, or one whose events are stored; another name is a usage error listing the known ones")
	typ := fs.String("type", "", "only events whose type matches this glob ('*' matches anything: invoice.*)")
	since := fs.String("since", "", "only events received at or after: RFC 3339, a date, now, or a duration back (24h, 7d)")
	until := fs.String("until", "", "only events received before (same forms as --since)")
	external := fs.String("external-id", "", "only the event with this provider event id")
	occAfter := fs.String("occurred-after", "", "only events the provider says happened at or after (same forms as --since)")
	occBefore := fs.String("occurred-before", "", "only events the provider says happened before (same forms as --since)")
	where := fs.String("where", "", fmt.Sprintf(`only events whose payload matches this JSON path predicate ('$.data.object.amount > 1000'; at most %d bytes)`, admin.MaxWhereBytes))
	limit := fs.Int("limit", admin.DefaultLimit, fmt.Sprintf("most events to print (at most %d)", admin.MaxLimit))
	before := fs.String("before", "", `the next page: the cursor a page printed ("next"), or an event id (only events with a smaller one)`)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: inlet events list takes no arguments, got %q", errUsage, fs.Args())
	}
	if err := limitFlag(*limit); err != nil {
		return err
	}
	if err := admin.CheckEventCursor(*before); err != nil {
		return fmt.Errorf("%w: --%v", errUsage, err)
	}
	f := admin.EventFilter{Provider: *source, EventType: *typ, ExternalEventID: *external, Limit: *limit, Cursor: *before, Where: *where}
	var err error
	if f.OccurredAfter, err = timeFlag("occurred-after", *occAfter); err != nil {
		return err
	}
	if f.OccurredBefore, err = timeFlag("occurred-before", *occBefore); err != nil {
		return err
	}
	if f.Since, err = timeFlag("since", *since); err != nil {
		return err
	}
	if f.Until, err = timeFlag("until", *until); err != nil {
		return err
	}
	return withOperator(ctx, env, *cfgPath, func(pool *pgxpool.Pool, cfg inletyaml.Config, from string) error {
		if err := checkSource(ctx, pool, cfg, from, f.Provider); err != nil {
			return err
		}
		page, err := admin.ListEvents(ctx, pool, f)
		if err != nil {
			return err
		}
		if *asJSON {
			// next is the cursor (a string with the snapshot), not
			// printList's id.
			return printJSON(env.stdout, jsonList[admin.EventSummary]{Items: page.Events, Next: page.Next})
		}
		if len(page.Events) == 0 {
			fmt.Fprintln(env.stdout, "no events match")
			return nil
		}
		tw := newTable(env.stdout)
		fmt.Fprintln(tw, "ID\tRECEIVED\tOCCURRED\tSOURCE\tTYPE\tEXTERNAL ID\tBYTES\tJOBS")
		for _, e := range page.Events {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", e.ID, stamp(e.ReceivedAt), occurred(e.OccurredAt), cell(e.Provider), cell(e.EventType),
				cell(e.ExternalEventID), e.BodySize, jobStates(e.Jobs))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if page.Next != "" {
			fmt.Fprintf(env.stderr, "more events match: add --before %s for the next page\n", page.Next)
		}
		return nil
	})
}

func jobStates(js []admin.JobState) string {
	if len(js) == 0 {
		return "-"
	}
	parts := make([]string, len(js))
	for i, j := range js {
		parts[i] = safe(j.Handler) + ":" + j.Status
	}
	return strings.Join(parts, " ")
}

func runEventsShow(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "events show", " ID", `
Show event ID: its metadata, the headers as received, the body, and each
handler's job with its attempt history (error text included). A body that is
not printable text is shown as a hex dump; --raw writes the exact stored bytes
to stdout and nothing else:

  inlet events show 42 --raw > event-42.bin`+operatorHelp)
	cfgPath := configFlag(fs)
	raw := fs.Bool("raw", false, "write only the stored body, byte for byte")
	asJSON := fs.Bool("json", false, "print JSON (raw_body in base64)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	id, err := idArg(fs, "event ID")
	if err != nil {
		return err
	}
	if *raw && *asJSON {
		return fmt.Errorf("%w: --raw and --json exclude each other", errUsage)
	}
	return withOperator(ctx, env, *cfgPath, func(pool *pgxpool.Pool, _ inletyaml.Config, _ string) error {
		e, err := admin.GetEvent(ctx, pool, id)
		if err != nil {
			return err
		}
		switch {
		case *raw:
			_, err := env.stdout.Write(e.RawBody)
			return err
		case *asJSON:
			return printJSON(env.stdout, e)
		}
		return printEvent(env.stdout, e)
	})
}

func printEvent(w io.Writer, e admin.EventDetail) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "Event %d\n", e.ID)
	printMeta(tw, e.EventMeta)
	fmt.Fprintf(tw, "  request uri:\t%s\n", cell(e.RequestURI))
	fmt.Fprintln(tw, "\nHeaders")
	names := make([]string, 0, len(e.Headers))
	for n := range e.Headers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, v := range e.Headers[n] {
			fmt.Fprintf(tw, "  %s:\t%s\n", safe(n), safe(v))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nBody (%d bytes)\n", len(e.RawBody))
	printBody(w, e.ID, e.RawBody)
	fmt.Fprintln(w, "\nJobs")
	if len(e.Jobs) == 0 {
		fmt.Fprintln(w, "  none (no handler subscribed when it arrived)")
	}
	for _, j := range e.Jobs {
		printJob(w, j)
	}
	return nil
}

// deliveryLag says how long after the provider's time the event arrived:
// to the second, or to the millisecond under a second (a provider's time in
// whole seconds is often less than one before the arrival, which rounding
// to the second would call "1s later"); a provider's time after the
// arrival is its clock running ahead.
func deliveryLag(d time.Duration) string {
	switch {
	case d < 0:
		return fmt.Sprintf("received %s before it: the provider's clock runs ahead", lagRound(-d))
	default:
		return fmt.Sprintf("received %s later", lagRound(d))
	}
}

func lagRound(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

func printMeta(tw io.Writer, e admin.EventMeta) {
	fmt.Fprintf(tw, "  source:\t%s (scheme %s)\n", cell(e.Provider), cell(e.Scheme))
	fmt.Fprintf(tw, "  external id:\t%s\n", cell(e.ExternalEventID))
	fmt.Fprintf(tw, "  type:\t%s\n", cell(e.EventType))
	fmt.Fprintf(tw, "  received at:\t%s\n", stamp(e.ReceivedAt))
	if e.OccurredAt != nil {
		fmt.Fprintf(tw, "  occurred at:\t%s (provider's time; %s)\n", stamp(*e.OccurredAt), deliveryLag(e.ReceivedAt.Sub(*e.OccurredAt)))
	} else {
		fmt.Fprintf(tw, "  occurred at:\t- (the provider gives no event time)\n")
	}
	sig := "not verified"
	if e.SignatureVerified {
		sig = "verified at ingress"
		if e.SecretIndex != nil {
			sig += fmt.Sprintf(" (secret index %d)", *e.SecretIndex)
		}
	}
	fmt.Fprintf(tw, "  signature:\t%s\n", sig)
	fmt.Fprintf(tw, "  body:\t%d bytes, sha256 %s\n", e.BodySize, e.BodySHA256)
}

// maxDump is how much of a binary body the text view dumps.
const maxDump = 4096

// printBody writes text bodies as they are and others as a hex dump, so
// nothing stored can drive the terminal.
func printBody(w io.Writer, id int64, body []byte) {
	if printableText(body) {
		_, _ = w.Write(body)
		if len(body) > 0 && body[len(body)-1] != '\n' {
			fmt.Fprintln(w)
		}
		return
	}
	fmt.Fprintf(w, "(not printable text; inlet events show %d --raw writes the exact bytes)\n", id)
	dump := body
	if len(dump) > maxDump {
		dump = dump[:maxDump]
	}
	fmt.Fprint(w, hex.Dump(dump))
	if len(body) > maxDump {
		fmt.Fprintf(w, "… %d more bytes\n", len(body)-maxDump)
	}
}

// printableText reports whether b can go to a terminal as it is: UTF-8
// without control characters other than tab, newline and a carriage return
// that ends a CRLF. A lone carriage return moves the cursor back to the start
// of the line, so what follows it would overwrite what the operator sees.
func printableText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for i, r := range string(b) {
		switch {
		case r == '\n' || r == '\t':
		case r == '\r':
			if i+1 == len(b) || b[i+1] != '\n' {
				return false
			}
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || unicode.Is(unicode.Bidi_Control, r):
			return false
		}
	}
	return true
}

func printJob(w io.Writer, j admin.Job) {
	// A replay sets the attempt count back to 0, so a replayed job has an
	// attempt 1 in every run: then the runs are numbered (RUN), each replay
	// marker starting the next.
	run := 0
	for _, a := range j.Attempts {
		run = max(run, a.Run)
	}
	replayed := slices.ContainsFunc(j.Attempts, func(a admin.Attempt) bool { return a.Outcome == "replayed" })
	runNote := ""
	if replayed {
		runNote = fmt.Sprintf(" (run %d)", run)
	}
	fmt.Fprintf(w, "\n  job %d  handler %s  %s  attempts %d/%d%s\n", j.ID, safe(j.Handler), j.Status, j.AttemptCount, j.MaxAttempts, runNote)
	tw := newTable(w)
	switch j.Status {
	case "pending", "failed":
		fmt.Fprintf(tw, "    next attempt:\t%s\n", stamp(j.NextAttemptAt))
	case "leased":
		fmt.Fprintf(tw, "    leased by:\t%s until %s (worker %s)\n", optCell(j.LeaseHolderID), optStamp(j.LeaseExpiresAt), optCell(j.WorkerID))
	case "completed":
		fmt.Fprintf(tw, "    completed at:\t%s (attempt %d, worker %s)\n", optStamp(j.CompletedAt), j.AttemptCount, optCell(j.WorkerID))
	}
	if j.LastErrorClass != nil || j.LastError != nil {
		fmt.Fprintf(tw, "    last error:\t%s: %s\n", optCell(j.LastErrorClass), optCell(j.LastError))
	}
	fmt.Fprintf(tw, "    created / updated:\t%s / %s\n", stamp(j.CreatedAt), stamp(j.UpdatedAt))
	_ = tw.Flush()
	if len(j.Attempts) == 0 {
		return
	}
	tw = newTable(w)
	// A success is listed with the failures (admin reads it from its job
	// row): its number, consumer (WORKER) and completion time (FINISHED).
	// A replay marker is no attempt: it shows who re-queued the job (WORKER)
	// and when (STARTED), and how many attempts the run before it had.
	header, runCol := "    #", func(admin.Attempt) string { return "    " }
	if replayed {
		header, runCol = "    RUN\t#", func(a admin.Attempt) string { return "    " + strconv.Itoa(a.Run) + "\t" }
	}
	fmt.Fprintln(tw, header+"\tOUTCOME\tSTARTED\tFINISHED\tDURATION\tWORKER\tERROR CLASS\tERROR")
	for _, a := range j.Attempts {
		num, dur, finished, errText := strconv.Itoa(a.Attempt), fmt.Sprintf("%.0fms", a.DurationMS), stamp(a.FinishedAt), optCell(a.Error)
		if a.Outcome == "replayed" {
			num, dur, finished, errText = "-", "-", "-", fmt.Sprintf("replay: run %d starts at attempt 1", a.Run)
			if a.Attempt > 0 && a.Run > 1 {
				errText += fmt.Sprintf(" (run %d ended after %s)", a.Run-1, plural(a.Attempt, "attempt"))
			}
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", runCol(a), num, a.Outcome, stamp(a.StartedAt), finished, dur,
			optCell(a.WorkerID), optCell(a.ErrorClass), errText)
	}
	_ = tw.Flush()
}

func runEventsVerify(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "events verify", " [ID]", `
Re-verify stored events: recompute each signature from the stored body,
headers and request URI with the source's secrets in the config file, as
ingress did, but ignoring the timestamp tolerance. Reports every event that no
longer verifies (body or headers changed, secret gone, source missing or of
another type now, id or type no longer matching) and exits 1 if there is one.
An event stored without a signature (backfilled, reconciled) has none to
re-check: a time range leaves it out, and asked for by ID it is an error
(exit 1) saying so, not "no such event".

  inlet events verify 42
  inlet events verify --since 7d --source stripe

Limits: a retired secret must stay listed for older events to verify; twilio
signs the URL it called, of which only the path and query are stored, so a
twilio source needs public_url to be re-verified.`+operatorHelp)
	cfgPath := configFlag(fs)
	source := fs.String("source", "", "only events of this source (a configured source, or one whose events are stored)")
	since := fs.String("since", "", "re-verify every event received at or after (RFC 3339, a date, now, or 24h, 7d)")
	until := fs.String("until", "", "and before")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var req admin.VerifyRequest
	var err error
	switch {
	case fs.NArg() > 0:
		if req.ID, err = idArg(fs, "event ID"); err != nil {
			return err
		}
	case *since == "":
		return fmt.Errorf("%w: give an event ID or --since", errUsage)
	}
	req.Provider = *source
	if req.Since, err = timeFlag("since", *since); err != nil {
		return err
	}
	if req.Until, err = timeFlag("until", *until); err != nil {
		return err
	}
	return withOperator(ctx, env, *cfgPath, func(pool *pgxpool.Pool, cfg inletyaml.Config, from string) error {
		if err := checkSource(ctx, pool, cfg, from, req.Provider); err != nil {
			return err
		}
		if from == "embedded defaults" {
			fmt.Fprintln(env.stderr, "note: no config file, so the embedded dev sources' secrets are used (pass --config)")
		}
		rep, err := admin.Reverify(ctx, pool, sourcesOf(cfg), req)
		if err != nil {
			return err
		}
		if *asJSON {
			if err := printJSON(env.stdout, rep); err != nil {
				return err
			}
		} else {
			if len(rep.Failures) > 0 {
				tw := newTable(env.stdout)
				fmt.Fprintln(tw, "EVENT\tSOURCE\tEXTERNAL ID\tREASON\tDETAIL")
				for _, f := range rep.Failures {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", f.EventID, cell(f.Provider), cell(f.ExternalEventID), f.Reason, safe(f.Detail))
				}
				_ = tw.Flush()
			}
			fmt.Fprintf(env.stdout, "checked %s: %d verified, %d failed\n", plural(rep.Checked, "event"), rep.Verified, rep.Failed)
			if rep.Failed > len(rep.Failures) {
				fmt.Fprintf(env.stdout, "(the first %d listed)\n", len(rep.Failures))
			}
		}
		if rep.Failed > 0 {
			return fmt.Errorf("%d of %s no longer verify", rep.Failed, plural(rep.Checked, "event"))
		}
		return nil
	})
}

func occurred(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}
