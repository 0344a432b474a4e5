package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/retention"
	"github.com/inlet-dev/inlet/schema"
)

var (
	sustainedSystems = flag.String("sustained-systems", "river,inlet,inlet-dev,inlet-services",
		"the configurations of the sustained section, comma-separated (river, inlet, inlet-dev, inlet-services)")
	sustainedPoints   = flag.Int("sustained-points", 4, "offered rates the sustained section tries per configuration after its saturation probe (the overload point comes on top)")
	sustainedHandlers = flag.String("sustained-handlers", "1,3", "sustained section: the handler counts River and in-process Inlet are measured with, comma-separated")
	sustainedRates    = flag.String("sustained-rates", "", "sustained section: offer exactly these rates (webhooks/s, comma-separated) to each configuration instead of searching, to look at one load closely (with -cpuprofile); no probe, no overload point, no ratios")
)

// The sustained section's method. A rate holds when, over the run's
// duration, ingress accepted at least holdAccepted of what the schedule
// offered, at most holdErrors of the requests failed, and the backlog (jobs
// created − jobs completed, sampled from the database every sustainedSample)
// did not grow over the second half: its least-squares slope stays at or
// below holdSlope of the offered jobs per second (2,000 jobs/s offered may
// grow the backlog by at most 40 jobs/s, 400 jobs over a 20s run's second
// half).
const (
	holdAccepted = 0.97
	holdErrors   = 0.005
	holdSlope    = 0.02
	// holdClose ends the search once the highest rate that held and the
	// lowest that did not are this close.
	holdClose = 1.1
	// sustainedConns is how many keep-alive connections post: the ingest
	// measurement's largest level.
	sustainedConns  = 256
	sustainedSample = 250 * time.Millisecond
	// sustainedConcurrency is each Inlet handler's Concurrency in process,
	// as the jobs section's total.
	sustainedConcurrency = 256
	sustainedPoolConns   = 64
	sustainedTemplate    = "inlet_bench_template"
	sustainedDatabase    = "inlet_bench_sustained"
)

// Sustained is one configuration's result: the highest offered rate it
// held, and what it delivered when offered twice that.
type Sustained struct {
	// System is "inlet" (in process, as the e2e section runs it), "river"
	// (the River receiver), "inlet-dev" (`inlet dev` on its embedded
	// defaults) or "inlet-services" (inlet ingress, streamer and consumer
	// processes over NATS on a default configuration).
	System   string `json:"system"`
	Handlers int    `json:"handlers"`
	// EventsPerSecond is the highest offered rate that held; 0 if none did.
	EventsPerSecond float64 `json:"events_per_second"`
	JobsPerSecond   float64 `json:"jobs_per_second"`
	// VsRiver is EventsPerSecond / the River receiver's with as many
	// handlers (1 for River itself).
	VsRiver float64 `json:"vs_river"`
	// VsIngestPeak is EventsPerSecond / IngestPeak.
	VsIngestPeak float64 `json:"vs_ingest_peak"`
	// IngestPeak is Inlet's ingress alone at saturation (group commit,
	// sustainedConns connections) with as many handlers subscribed, in this
	// run.
	IngestPeak float64 `json:"ingest_peak_per_second"`
	// The overload point: 2 × EventsPerSecond offered for the run's
	// duration; delivered is the completion rate over its second half.
	OverloadOffered   int     `json:"overload_offered_per_second"`
	OverloadAccepted  float64 `json:"overload_accepted_per_second"`
	OverloadDelivered float64 `json:"overload_delivered_per_second"`
	// OverloadRatio is OverloadDelivered / EventsPerSecond.
	OverloadRatio float64           `json:"overload_ratio"`
	Settings      map[string]string `json:"settings"`
	// Points are every run: the saturation probe, the rates tried, the
	// overload point.
	Points []SustainedPoint `json:"points"`
	// The cost of the run that held at EventsPerSecond (measured through
	// its drain, so every job it created is paid for).
	*Cost
	// Error says why the measurement of this configuration stopped.
	Error string `json:"error,omitempty"`
}

// SustainedPoint is one run of one configuration.
type SustainedPoint struct {
	// Kind is "probe" (saturation), "rate" or "overload".
	Kind string `json:"kind"`
	// Offered is the schedule's rate; 0 for the probe.
	Offered  int     `json:"offered_per_second"`
	Seconds  float64 `json:"seconds"`
	Sent     int64   `json:"sent"`
	Accepted int64   `json:"accepted"`
	Errors   int64   `json:"errors"`
	// AcceptedPerSecond is Accepted over the run.
	AcceptedPerSecond float64 `json:"accepted_per_second"`
	// DeliveredJobsPerSecond is the least-squares slope of completed jobs
	// over the run's second half; DeliveredPerSecond that / handlers.
	DeliveredJobsPerSecond float64 `json:"delivered_jobs_per_second"`
	DeliveredPerSecond     float64 `json:"delivered_per_second"`
	// DeliveredRunPerSecond is events delivered over the whole run (jobs
	// completed from its start to its end / handlers / duration): the
	// probe's estimate when its second half is noise (a system still
	// warming up, or stalling).
	DeliveredRunPerSecond float64 `json:"delivered_run_per_second"`
	// BacklogSlope is the least-squares slope of the backlog over the
	// second half, in jobs per second.
	BacklogSlope float64 `json:"backlog_slope_jobs_per_second"`
	BacklogEnd   int64   `json:"backlog_end_jobs"`
	Held         bool    `json:"held"`
	// Why says what did not hold.
	Why string `json:"why,omitempty"`
	// DrainSeconds is how long the backlog took to empty after a held run
	// (it is measured through the drain); -1 if it did not within the wait.
	DrainSeconds float64 `json:"drain_seconds,omitempty"`
	cost         *Cost
}

// configuration is one system the sustained section measures.
type configuration struct {
	system   string
	handlers int
	settings map[string]string
	counter  counter
	// start starts the system on a fresh database.
	start func(ctx context.Context, dbURL string) (started, error)
}

func (c configuration) String() string { return fmt.Sprintf("%s ×%d", c.system, c.handlers) }

// started is a running system: where to post, and how to stop it.
type started struct {
	url  string
	stop func()
	// pid is the process's when the configuration is one process (inlet
	// dev), else 0.
	pid int
}

// sustainedRun is the state of one sustained section.
type sustainedRun struct {
	b    *bench
	dir  string
	bin  string // the inlet binary, built on first use
	seq  int
	peak map[int]float64 // ingest-only peak by handler count
}

// runSustained measures, for each configuration and handler count, the
// highest offered rate the whole pipeline holds, and an overload point.
func runSustained(ctx context.Context, b *bench) (any, error) {
	systems, err := parseSystems(*sustainedSystems)
	if err != nil {
		return nil, err
	}
	if *sustainedPoints < 1 {
		return nil, fmt.Errorf("-sustained-points: %d is not a positive count", *sustainedPoints)
	}
	dir, err := os.MkdirTemp("", "inlet-bench-sustained-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	handlers, err := parseCounts("-sustained-handlers", *sustainedHandlers)
	if err != nil {
		return nil, err
	}
	var rates []int
	if *sustainedRates != "" {
		if rates, err = parseCounts("-sustained-rates", *sustainedRates); err != nil {
			return nil, err
		}
	}
	s := &sustainedRun{b: b, dir: dir, peak: map[int]float64{}}
	if err := s.createTemplate(ctx); err != nil {
		return nil, err
	}
	defer s.dropDatabases()
	fmt.Printf("A rate holds when, offered for %s from %d connections, ≥%.0f%% is accepted, ≤%.1f%% of requests fail and the backlog "+
		"(jobs created − completed, sampled every %s) grows over the second half by at most %.0f%% of the offered jobs/s "+
		"(least-squares slope). Each configuration: a saturation probe, up to %d rates (up ×1.4 while they hold, down below what a "+
		"failed one delivered, then halving the gap to %.0f%%), then 2× the rate that held. Every run starts on a fresh copy of one migrated database.\n\n",
		b.duration, sustainedConns, holdAccepted*100, holdErrors*100, sustainedSample, holdSlope*100, *sustainedPoints, (holdClose-1)*100)

	var results []Sustained
	for _, cfg := range s.configurations(systems, handlers) {
		if rates != nil {
			results = append(results, s.fixed(ctx, cfg, rates))
			continue
		}
		if _, ok := s.peak[cfg.handlers]; !ok {
			if s.peak[cfg.handlers], err = s.ingestPeak(ctx, cfg.handlers); err != nil {
				return nil, fmt.Errorf("ingest-only peak with %d handlers: %w", cfg.handlers, err)
			}
		}
		// A configuration that fails is reported and recorded; the others
		// still run.
		r, err := s.measure(ctx, cfg)
		if err != nil {
			err = fmt.Errorf("%s: %w", cfg, err)
			fmt.Fprintln(os.Stderr, "bench: sustained:", err)
			r.Error = err.Error()
		}
		results = append(results, r)
	}
	compare(results)
	printSustained(results)
	return results, nil
}

func parseSystems(list string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains([]string{"river", "inlet", "inlet-dev", "inlet-services"}, name) {
			return nil, fmt.Errorf("-sustained-systems: no configuration %q (there are: river, inlet, inlet-dev, inlet-services)", name)
		}
		out = append(out, name)
	}
	return out, nil
}

// configurations lists what to measure: River and Inlet side by side with
// each count of handlers (1 and 3 unless -sustained-handlers says), then the shipped defaults with their one handler.
func (s *sustainedRun) configurations(systems []string, handlers []int) []configuration {
	var out []configuration
	for _, h := range handlers {
		for _, system := range systems {
			switch system {
			case "river":
				rc := riverForThroughput()
				out = append(out, configuration{system: system, handlers: h, settings: rc.settings(h), counter: riverCounter,
					start: func(ctx context.Context, url string) (started, error) {
						r, err := startRiverReceiver(ctx, url, rc, h, noop, s.b.log)
						if err != nil {
							return started{}, err
						}
						return started{url: r.url, stop: r.stop}, nil
					}})
			case "inlet":
				o := inletOptions{wake: "notify", handlers: handlerNames(h), concurrency: sustainedConcurrency, handle: noop, conns: sustainedPoolConns}
				out = append(out, configuration{system: system, handlers: h, settings: inletSettings(o), counter: inletCounter,
					start: func(ctx context.Context, url string) (started, error) {
						p, err := startInlet(ctx, url, o)
						if err != nil {
							return started{}, err
						}
						return started{url: p.url, stop: p.stop}, nil
					}})
			}
		}
	}
	for _, system := range systems {
		switch system {
		case "inlet-dev":
			out = append(out, configuration{system: system, handlers: 1, settings: devSettings(), counter: inletCounter, start: s.startDev})
		case "inlet-services":
			out = append(out, configuration{system: system, handlers: 1, settings: servicesSettings(), counter: inletCounter, start: s.startServices})
		}
	}
	return out
}

func handlerNames(n int) []string {
	var names []string
	for i := range n {
		names = append(names, "bench-h"+strconv.Itoa(i+1))
	}
	return names
}

func inletSettings(o inletOptions) map[string]string {
	return map[string]string{
		"ingress":   "in process, group commit (GroupConfig defaults), NOTIFY hinter (2ms debounce)",
		"streamer":  "streamer.Config defaults, LISTEN wake, PollInterval 1s",
		"consumers": fmt.Sprintf("one consumers.Service over bus.NewGoChannel, %d handler(s), Concurrency %d each", len(o.handlers), o.concurrency),
		"pools":     fmt.Sprintf("%d connections each: ingress, streamer, worker", o.conns),
	}
}

// createTemplate makes the database every run copies: Inlet's schema with
// partitions made as inlet migrate makes them, the River receiver's schema,
// and pg_stat_statements' view.
func (s *sustainedRun) createTemplate(ctx context.Context) error {
	url, err := freshDatabase(ctx, s.b, sustainedTemplate)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := schema.Migrate(ctx, conn); err != nil {
		return fmt.Errorf("migrate the template database: %w", err)
	}
	if _, err := retention.EnsurePartitions(ctx, conn, "week", 4, 5*time.Second); err != nil {
		return fmt.Errorf("partitions of the template database: %w", err)
	}
	if s.b.statements {
		if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
			return fmt.Errorf("pg_stat_statements in the template database: %w", err)
		}
	}
	if err := conn.Close(ctx); err != nil {
		return err
	}
	return setupReceiverSchema(ctx, url)
}

// freshDatabase recreates the run database as a copy of the template.
func (s *sustainedRun) freshDatabase(ctx context.Context) (string, error) {
	conn, err := pgx.Connect(ctx, s.b.url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	for _, q := range []string{`DROP DATABASE IF EXISTS ` + sustainedDatabase + ` WITH (FORCE)`,
		`CREATE DATABASE ` + sustainedDatabase + ` TEMPLATE ` + sustainedTemplate} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("%s: %w", q, err)
		}
	}
	return s.b.cluster.URL(sustainedDatabase), nil
}

func (s *sustainedRun) dropDatabases() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.b.url)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	for _, name := range []string{sustainedDatabase, sustainedTemplate} {
		if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			s.b.log.Warn("drop database", "database", name, "error", err)
		}
	}
}

// durations of the short runs: the probe and the ingest-only peak.
func (s *sustainedRun) probeDuration() time.Duration {
	return min(max(s.b.duration/2, 3*time.Second), 10*time.Second)
}

// ingestPeak is Inlet's ingress alone at saturation, with handlers
// subscribed (so each event fans out to as many jobs) and nothing running
// them.
func (s *sustainedRun) ingestPeak(ctx context.Context, handlers int) (float64, error) {
	url, err := s.freshDatabase(ctx)
	if err != nil {
		return 0, err
	}
	p, err := startInlet(ctx, url, inletOptions{handlers: handlerNames(handlers), handle: noop, conns: sustainedPoolConns, ingressOnly: true})
	if err != nil {
		return 0, err
	}
	defer p.stop()
	ld := offer(ctx, offerConfig{url: p.url, d: s.probeDuration(), conns: sustainedConns, prefix: s.prefix("peak")})
	rate := float64(ld.Acked) / ld.Elapsed.Seconds()
	fmt.Printf("ingest only (inlet ingress in process, %d handler(s) subscribed, %d connections, %s): %.0f/s accepted, %d errors\n",
		handlers, sustainedConns, s.probeDuration(), rate, ld.Errors)
	return rate, nil
}

func (s *sustainedRun) prefix(kind string) string {
	s.seq++
	return fmt.Sprintf("evt_sus_%s_%d_%d_", kind, time.Now().UnixNano(), s.seq)
}

// fixed offers each of rates to cfg in turn (-sustained-rates): the points
// are printed and recorded, nothing is searched or compared.
func (s *sustainedRun) fixed(ctx context.Context, cfg configuration, rates []int) Sustained {
	r := Sustained{System: cfg.system, Handlers: cfg.handlers, Settings: cfg.settings}
	fmt.Printf("\n%s: %s\n", cfg, settingsLine(cfg.settings))
	for _, rate := range rates {
		p, err := s.runPoint(ctx, cfg, "rate", rate, s.b.duration)
		if err != nil {
			r.Error = fmt.Sprintf("%s at %d/s: %v", cfg, rate, err)
			fmt.Fprintln(os.Stderr, "bench: sustained:", r.Error)
			return r
		}
		r.Points = append(r.Points, p)
	}
	return r
}

// parseCounts reads a comma-separated list of positive counts for flag name.
func parseCounts(name, list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s: %q is not a positive count", name, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// measure finds cfg's sustained rate: a saturation probe says what it
// delivers flat out, then up to -sustained-points rates are tried around
// that, then the overload point.
func (s *sustainedRun) measure(ctx context.Context, cfg configuration) (Sustained, error) {
	r := Sustained{System: cfg.system, Handlers: cfg.handlers, Settings: cfg.settings, IngestPeak: s.peak[cfg.handlers]}
	fmt.Printf("\n%s: %s\n", cfg, settingsLine(cfg.settings))
	probe, err := s.runPoint(ctx, cfg, "probe", 0, s.probeDuration())
	if err != nil {
		return r, fmt.Errorf("probe: %w", err)
	}
	r.Points = append(r.Points, probe)
	var lo, hi int
	var best *Cost
	// What the probe took through says where to start.
	rate := roundRate(probe.throughput())
	for range *sustainedPoints {
		if rate <= 0 {
			break
		}
		p, err := s.runPoint(ctx, cfg, "rate", rate, s.b.duration)
		if err != nil {
			return r, fmt.Errorf("at %d/s: %w", rate, err)
		}
		r.Points = append(r.Points, p)
		if p.Held {
			lo, best = rate, p.cost
		} else {
			hi = rate
		}
		rate = nextRate(lo, hi, p, probe.AcceptedPerSecond)
	}
	if lo == 0 {
		fmt.Printf("  %s held no rate tried\n", cfg)
		return r, nil
	}
	r.EventsPerSecond, r.JobsPerSecond, r.Cost = float64(lo), float64(lo*cfg.handlers), best
	over, err := s.runPoint(ctx, cfg, "overload", 2*lo, s.b.duration)
	if err != nil {
		return r, fmt.Errorf("overload at %d/s: %w", 2*lo, err)
	}
	r.Points = append(r.Points, over)
	r.OverloadOffered, r.OverloadAccepted, r.OverloadDelivered = over.Offered, over.AcceptedPerSecond, over.DeliveredPerSecond
	r.OverloadRatio = over.DeliveredPerSecond / r.EventsPerSecond
	return r, nil
}

// nextRate is the next rate to try after p, given the highest rate that
// held (lo) and the lowest that did not (hi), 0 meaning none yet; it
// returns 0 when the search is done. ceiling is what ingress accepted at
// saturation: no rate above it can hold.
func nextRate(lo, hi int, p SustainedPoint, ceiling float64) int {
	switch {
	case lo > 0 && hi > 0:
		if float64(hi) <= float64(lo)*holdClose {
			return 0
		}
		return roundRate(float64(lo+hi) / 2)
	case hi == 0: // everything held so far: go up, not past ingress's ceiling
		// At least halfway to the ceiling: a probe that took little
		// through (the River receiver's first seconds) started the search
		// low, and 1.4× steps from there never reached the rate (from
		// 10/s, 1.4× rounds back to 10/s: the search stopped there).
		next := roundRate(min(max(float64(lo)*1.4, (float64(lo)+ceiling)/2), ceiling))
		if next <= lo {
			return 0
		}
		return next
	default: // nothing held yet: go below what this run took through
		return roundRate(min(0.9*float64(hi), 0.95*p.throughput()))
	}
}

// throughput is what a run took through, events/s: what it delivered (over
// the whole run when its second half alone is lower, as while a system
// warms up), but not above what it accepted: a receiver that accepts less
// than it delivers (the River receiver draining a probe's backlog) cannot
// hold that rate.
func (p SustainedPoint) throughput() float64 {
	return min(max(p.DeliveredPerSecond, p.DeliveredRunPerSecond), p.AcceptedPerSecond)
}

// roundRate rounds to 10/s, at least 10/s (0 stays 0).
func roundRate(r float64) int {
	if r <= 0 || math.IsNaN(r) {
		return 0
	}
	return max(10, int(math.Round(r/10))*10)
}

// runPoint runs cfg on a fresh database, offers rate for d (0: saturation)
// while sampling its backlog, and judges the run. A rate that held is
// followed by its drain, and its cost is measured through it.
func (s *sustainedRun) runPoint(ctx context.Context, cfg configuration, kind string, rate int, d time.Duration) (SustainedPoint, error) {
	p := SustainedPoint{Kind: kind, Offered: rate}
	url, err := s.freshDatabase(ctx)
	if err != nil {
		return p, err
	}
	sys, err := cfg.start(ctx, url)
	if err != nil {
		return p, fmt.Errorf("start %s: %w", cfg.system, err)
	}
	defer sys.stop()
	m, err := s.b.startMeter(ctx, url)
	if err != nil {
		return p, err
	}
	defer m.close()
	mon, err := startMonitor(ctx, url, cfg.counter)
	if err != nil {
		return p, err
	}
	defer mon.stop()
	start := time.Now()
	ld := offer(ctx, offerConfig{url: sys.url, rate: rate, d: d, conns: sustainedConns, prefix: s.prefix(kind)})
	samples, err := mon.upTo(start.Add(d))
	if err != nil {
		return p, err
	}
	p.judge(ld, samples, start, d, cfg.handlers)
	// A rate that held is measured through its drain, so every job it
	// created is paid for; the overload point without one (the system stops
	// at the end of the run), so a collapse shows which statements grew.
	measured := kind == "overload"
	if p.Held && kind == "rate" {
		drained, err := mon.waitDrained(ctx, max(10*time.Second, d/2))
		if err != nil {
			return p, err
		}
		p.DrainSeconds = -1
		if drained > 0 {
			p.DrainSeconds = drained.Seconds()
		}
		measured = true
	}
	if measured {
		last := mon.last()
		sys.stop()
		if p.cost, err = m.finish(ctx, last.created-last.backlog); err != nil {
			return p, err
		}
	}
	p.print(cfg)
	return p, nil
}

// judge fills in p from the load and the samples of the run [start,
// start+d].
func (p *SustainedPoint) judge(ld load, samples []sample, start time.Time, d time.Duration, handlers int) {
	p.Seconds, p.Sent, p.Accepted, p.Errors = ld.Elapsed.Seconds(), ld.Sent, ld.Acked, ld.Errors
	p.AcceptedPerSecond = float64(ld.Acked) / ld.Elapsed.Seconds()
	var ts, backlog, completed []float64
	var first, last *sample
	for i, s := range samples {
		t := s.at.Sub(start)
		if t >= 0 && first == nil {
			first = &samples[i]
		}
		if t <= d {
			last = &samples[i]
		}
		if t < d/2 || t > d {
			continue
		}
		ts = append(ts, t.Seconds())
		backlog = append(backlog, float64(s.backlog))
		completed = append(completed, float64(s.created-s.backlog))
	}
	if len(samples) > 0 {
		p.BacklogEnd = samples[len(samples)-1].backlog
	}
	if first != nil && last != nil && last.at.After(first.at) {
		done := (last.created - last.backlog) - (first.created - first.backlog)
		p.DeliveredRunPerSecond = float64(done) / last.at.Sub(first.at).Seconds() / float64(handlers)
	}
	p.BacklogSlope = slope(ts, backlog)
	p.DeliveredJobsPerSecond = slope(ts, completed)
	p.DeliveredPerSecond = p.DeliveredJobsPerSecond / float64(handlers)
	if p.Offered == 0 {
		return
	}
	offeredJobs := float64(p.Offered * handlers)
	var why []string
	if float64(ld.Acked) < holdAccepted*float64(ld.Target) {
		why = append(why, fmt.Sprintf("accepted %d of %d", ld.Acked, ld.Target))
	}
	if float64(ld.Errors) > holdErrors*float64(max(ld.Sent, 1)) {
		why = append(why, fmt.Sprintf("%d errors", ld.Errors))
	}
	if len(ts) < 3 {
		why = append(why, fmt.Sprintf("only %d backlog samples in the second half", len(ts)))
	} else if p.BacklogSlope > holdSlope*offeredJobs {
		why = append(why, fmt.Sprintf("backlog grew %.0f jobs/s (limit %.0f)", p.BacklogSlope, holdSlope*offeredJobs))
	}
	p.Held, p.Why = len(why) == 0, strings.Join(why, "; ")
}

// slope is the least-squares slope of y over x; 0 for fewer than 2 points.
func slope(x, y []float64) float64 {
	n := float64(len(x))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy, sxx, sxy = sx+x[i], sy+y[i], sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / den
}

func (p SustainedPoint) print(cfg configuration) {
	offered := "saturation"
	if p.Offered > 0 {
		offered = strconv.Itoa(p.Offered) + "/s"
	}
	verdict := ""
	switch {
	case p.Offered == 0 || p.Kind == "overload":
	case p.Held:
		verdict = "held"
		if p.DrainSeconds > 0 {
			verdict += fmt.Sprintf(", drained in %.1fs", p.DrainSeconds)
		}
	default:
		verdict = "did not hold: " + p.Why
	}
	fmt.Printf("  %-8s %-10s %.1fs: accepted %.0f/s (%d errors), delivered %.0f events/s (%.0f jobs/s), backlog slope %+.0f jobs/s, backlog at end %d  %s\n",
		p.Kind, offered, p.Seconds, p.AcceptedPerSecond, p.Errors, p.DeliveredPerSecond, p.DeliveredJobsPerSecond, p.BacklogSlope, p.BacklogEnd, verdict)
	p.cost.print("    ")
}

// compare fills in each result's ratios: to the River receiver with as
// many handlers, and to the ingest-only peak.
func compare(results []Sustained) {
	river := map[int]float64{}
	for _, r := range results {
		if r.System == "river" {
			river[r.Handlers] = r.EventsPerSecond
		}
	}
	for i, r := range results {
		if river[r.Handlers] > 0 {
			results[i].VsRiver = r.EventsPerSecond / river[r.Handlers]
		}
		if r.IngestPeak > 0 {
			results[i].VsIngestPeak = r.EventsPerSecond / r.IngestPeak
		}
	}
}

func printSustained(results []Sustained) {
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SYSTEM\tHANDLERS\tEVENTS/S\tJOBS/S\t/ RIVER\t/ INGEST PEAK\tOVERLOAD OFFERED\tDELIVERED/S\tRATIO\tSTMTS/JOB\tROWS/JOB\tRUNS")
	for _, r := range results {
		stmts, rows := "-", "-"
		if r.Cost != nil {
			rows = fmt.Sprintf("%.2f", r.RowsWrittenPerJob)
			if r.CostSource == "pg_stat_statements" {
				stmts = fmt.Sprintf("%.2f", r.StatementsPerJob)
			}
		}
		vsRiver := "-"
		if r.VsRiver > 0 {
			vsRiver = fmt.Sprintf("%.2f×", r.VsRiver)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%s\t%.2f× (of %.0f)\t%d\t%.0f\t%.2f\t%s\t%s\t%d\n", r.System, r.Handlers, r.EventsPerSecond,
			r.JobsPerSecond, vsRiver, r.VsIngestPeak, r.IngestPeak, r.OverloadOffered, r.OverloadDelivered, r.OverloadRatio, stmts, rows, len(r.Points))
	}
	tw.Flush()
}

func settingsLine(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+": "+m[k])
	}
	return strings.Join(parts, "; ")
}

// counter says how to count a system's jobs: created (the jobs table's id
// sequence, read without scanning) and not yet finished (a count over the
// system's own index of unfinished jobs).
type counter struct {
	table   string
	backlog string
}

var (
	// Inlet's unfinished jobs are the two partial indexes' rows
	// (idx_jobs_claimable, idx_jobs_leased).
	inletCounter = counter{table: "webhook_ingress.jobs",
		backlog: `SELECT count(*) FROM webhook_ingress.jobs WHERE status IN ('pending', 'failed', 'leased')`}
	// River's lead river_job_prioritized_fetching_index (state, …).
	riverCounter = counter{table: receiverSchema + ".river_job",
		backlog: `SELECT count(*) FROM ` + receiverSchema + `.river_job WHERE state IN ('available', 'pending', 'retryable', 'running', 'scheduled')`}
)

// sample is one reading of the backlog.
type sample struct {
	at      time.Time
	created int64 // jobs created so far
	backlog int64 // of which not yet finished
}

// monitor samples a system's backlog every sustainedSample on a connection
// of its own.
type monitor struct {
	conn  *pgx.Conn
	query string

	mu      sync.Mutex
	samples []sample
	err     error
	done    chan struct{}
	quit    chan struct{}
	once    sync.Once
}

func startMonitor(ctx context.Context, url string, c counter) (*monitor, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = "bench-monitor"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	var seq *string
	if err := conn.QueryRow(ctx, `/* bench-monitor */ SELECT pg_get_serial_sequence($1, 'id')`, c.table).Scan(&seq); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("monitor: the id sequence of %s: %w", c.table, err)
	}
	created := `SELECT count(*) FROM ` + c.table // without a sequence: a scan
	if seq != nil {
		created = `SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM ` + *seq
	}
	m := &monitor{conn: conn, query: `/* bench-monitor */ SELECT (` + created + `), (` + c.backlog + `)`,
		done: make(chan struct{}), quit: make(chan struct{})}
	if err := m.take(ctx); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	go m.run(ctx)
	return m, nil
}

func (m *monitor) run(ctx context.Context) {
	defer close(m.done)
	t := time.NewTicker(sustainedSample)
	defer t.Stop()
	for {
		select {
		case <-m.quit:
			return
		case <-t.C:
		}
		if err := m.take(ctx); err != nil {
			m.mu.Lock()
			m.err = err
			m.mu.Unlock()
			return
		}
	}
}

func (m *monitor) take(ctx context.Context) error {
	var s sample
	if err := m.conn.QueryRow(ctx, m.query).Scan(&s.created, &s.backlog); err != nil {
		return fmt.Errorf("monitor: sample the backlog: %w", err)
	}
	s.at = time.Now()
	m.mu.Lock()
	m.samples = append(m.samples, s)
	m.mu.Unlock()
	return nil
}

// upTo returns the samples taken so far, waiting for the first one at or
// after end.
func (m *monitor) upTo(end time.Time) ([]sample, error) {
	for {
		m.mu.Lock()
		samples, err := slices.Clone(m.samples), m.err
		m.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if len(samples) > 0 && !samples[len(samples)-1].at.Before(end) {
			return samples, nil
		}
		select {
		case <-m.done:
			return samples, nil
		case <-time.After(sustainedSample / 5):
		}
	}
}

func (m *monitor) last() sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.samples[len(m.samples)-1]
}

// waitDrained waits up to within for a sample with no backlog and returns
// how long after the call it came; 0 if none did.
func (m *monitor) waitDrained(ctx context.Context, within time.Duration) (time.Duration, error) {
	start := time.Now()
	for time.Since(start) < within {
		m.mu.Lock()
		last, err := m.samples[len(m.samples)-1], m.err
		m.mu.Unlock()
		if err != nil {
			return 0, err
		}
		if last.backlog == 0 && last.at.After(start) {
			return last.at.Sub(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-m.done:
			return 0, nil
		case <-time.After(sustainedSample / 5):
		}
	}
	return 0, nil
}

func (m *monitor) stop() {
	m.once.Do(func() {
		close(m.quit)
		<-m.done
		m.conn.Close(context.Background())
	})
}
