package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// The soak section: `inlet dev` on its embedded defaults (one log handler),
// as a new user runs it, offered a steady rate for a long time, and sampled
// every -soak-every. What it looks for is a trend, not a rate: a resident
// set, a thread count or a number of database sessions that keeps growing,
// dead tuples in jobs that autovacuum does not keep down, a backlog that
// creeps up, or a latency that drifts. It is not in the default -only list:
// `go run ./bench -only soak` (20 minutes by default).
var (
	soakDuration = flag.Duration("soak-duration", 20*time.Minute, "soak section (not run unless named in -only): how long inlet dev is offered -soak-rate")
	soakRate     = flag.Int("soak-rate", 500, "soak section: offered webhooks per second")
	soakEvery    = flag.Duration("soak-every", 30*time.Second, "soak section: how often the process and the database are sampled")
)

const soakDatabase = "inlet_bench_soak"

// SoakSample is one sample of the soak section.
type SoakSample struct {
	AtSeconds float64 `json:"at_seconds"`
	// Acked is the webhooks answered 200 so far (the failed ones are only
	// known at the end: SoakResult.Failed).
	Acked int64 `json:"acked"`
	// Pending and Leased are the backlog; Completed the jobs done.
	Pending   int64 `json:"pending"`
	Leased    int64 `json:"leased"`
	Completed int64 `json:"completed"`
	// DeadTuples is n_dead_tup over the jobs partitions.
	DeadTuples int64 `json:"dead_tuples_jobs"`
	// Sessions is the database's client sessions, this sampler's included.
	Sessions int64   `json:"sessions"`
	RSSMiB   float64 `json:"rss_mib"`
	Threads  int64   `json:"threads"`
	// The tables' total sizes (heap, indexes, TOAST), every partition.
	JobsMiB     float64 `json:"jobs_mib"`
	EventsMiB   float64 `json:"events_mib"`
	AttemptsMiB float64 `json:"job_attempts_mib"`
	// CompleteP99ms is the p99 from the event's arrival to its job's
	// completion, over the jobs completed since the last sample.
	CompleteP99ms float64 `json:"complete_p99_ms"`
}

// SoakResult is the soak section's figures.
type SoakResult struct {
	Rate     int               `json:"offered_per_second"`
	Seconds  float64           `json:"seconds"`
	Settings map[string]string `json:"settings"`
	Samples  []SoakSample      `json:"samples"`
	// Sent, Acked and Failed are the whole offer's: requests, 200s, and
	// other answers and failed requests.
	Sent   int64 `json:"sent"`
	Acked  int64 `json:"acked"`
	Failed int64 `json:"failed"`
	// Drained says every acknowledged webhook's job completed after the
	// offer stopped (within a minute).
	Drained bool `json:"drained"`
	// The last third's mean ÷ the first third's (after the first sample):
	// about 1 when nothing grows.
	RSSTrend      float64 `json:"rss_trend"`
	ThreadsTrend  float64 `json:"threads_trend"`
	SessionsTrend float64 `json:"sessions_trend"`
	// JobsBytesPerJob is the jobs table's size per job at the end.
	JobsBytesPerJob float64 `json:"jobs_bytes_per_job"`
}

func runSoak(ctx context.Context, b *bench) (any, error) {
	if *soakRate < 1 || *soakDuration <= 0 || *soakEvery <= 0 {
		return nil, fmt.Errorf("-soak-rate %d, -soak-duration %s, -soak-every %s: each must be positive", *soakRate, *soakDuration, *soakEvery)
	}
	dir, err := os.MkdirTemp("", "inlet-bench-soak-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	url, err := freshDatabase(ctx, b, soakDatabase)
	if err != nil {
		return nil, err
	}
	s := &sustainedRun{b: b, dir: dir}
	dev, err := s.startDev(ctx, url) // inlet dev migrates the empty database itself
	if err != nil {
		return nil, err
	}
	defer dev.stop()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)

	res := SoakResult{Rate: *soakRate, Settings: devSettings()}
	res.Settings["sampled every"] = soakEvery.String()
	fmt.Printf("`inlet dev` on its embedded defaults offered %d Stripe webhooks/s for %s from %d connections, sampled every %s:\n\n",
		*soakRate, *soakDuration, sustainedConns, *soakEvery)
	var acked atomic.Int64
	offered := make(chan load, 1)
	start := time.Now()
	go func() {
		offered <- offer(ctx, offerConfig{url: dev.url, rate: *soakRate, d: *soakDuration, conns: sustainedConns, prefix: "evt_soak_",
			onAck: func(string, time.Time) { acked.Add(1) }})
	}()
	// Fixed widths: each row is printed when it is sampled.
	const row = "%6s %9s %8s %7s %10s %12s %9s %8s %8s %9s %11s %13s %16s\n"
	fmt.Printf(row, "S", "ACKED", "PENDING", "LEASED", "COMPLETED", "DEAD TUPLES", "SESSIONS", "RSS MIB", "THREADS",
		"JOBS MIB", "EVENTS MIB", "ATTEMPTS MIB", "COMPLETE P99 MS")
	num := func(v int64) string { return strconv.FormatInt(v, 10) }
	last := time.Now()
	take := func() error {
		sm, err := soakSample(ctx, conn, dev.pid, last)
		if err != nil {
			return err
		}
		last = time.Now()
		sm.AtSeconds, sm.Acked = time.Since(start).Seconds(), acked.Load()
		res.Samples = append(res.Samples, sm)
		p99 := "-" // nothing completed since the last sample
		if sm.CompleteP99ms > 0 {
			p99 = fmt.Sprintf("%.1f", sm.CompleteP99ms)
		}
		fmt.Printf(row, fmt.Sprintf("%.0f", sm.AtSeconds), num(sm.Acked), num(sm.Pending), num(sm.Leased), num(sm.Completed),
			num(sm.DeadTuples), num(sm.Sessions), fmt.Sprintf("%.1f", sm.RSSMiB), num(sm.Threads), fmt.Sprintf("%.0f", sm.JobsMiB),
			fmt.Sprintf("%.0f", sm.EventsMiB), fmt.Sprintf("%.0f", sm.AttemptsMiB), p99)
		return nil
	}
	tick := time.NewTicker(*soakEvery)
	defer tick.Stop()
	var l load
wait:
	for {
		select {
		case l = <-offered:
			break wait
		case <-tick.C:
			if err := take(); err != nil {
				return nil, err
			}
		}
	}
	res.Seconds = time.Since(start).Seconds()
	// The backlog drains: every acknowledged webhook's job completes.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		var done int64
		if err := conn.QueryRow(ctx, `/* bench-monitor */ SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'completed'`).Scan(&done); err != nil {
			return nil, err
		}
		if done >= l.Acked {
			res.Drained = true
			break
		}
		if time.Now().After(deadline) {
			break
		}
	}
	res.Sent, res.Acked, res.Failed = l.Sent, l.Acked, l.Errors
	if err := take(); err != nil {
		return nil, err
	}
	res.RSSTrend = soakTrend(res.Samples, func(s SoakSample) float64 { return s.RSSMiB })
	res.ThreadsTrend = soakTrend(res.Samples, func(s SoakSample) float64 { return float64(s.Threads) })
	res.SessionsTrend = soakTrend(res.Samples, func(s SoakSample) float64 { return float64(s.Sessions) })
	if end := res.Samples[len(res.Samples)-1]; end.Completed > 0 {
		res.JobsBytesPerJob = end.JobsMiB * (1 << 20) / float64(end.Completed)
	}
	fmt.Printf("\nacknowledged %d of %d sent (%d failed); drained: %v. Last third ÷ first third: RSS %.2f, threads %.2f, sessions %.2f; jobs table %.0f bytes per job.\n",
		res.Acked, res.Sent, res.Failed, res.Drained, res.RSSTrend, res.ThreadsTrend, res.SessionsTrend, res.JobsBytesPerJob)
	return res, nil
}

// soakSample reads the process's and the database's state; the latency is
// over the jobs completed since since.
func soakSample(ctx context.Context, conn *pgx.Conn, pid int, since time.Time) (SoakSample, error) {
	var s SoakSample
	var jobs, events, attempts int64
	var p99 *float64
	err := conn.QueryRow(ctx, `/* bench-monitor */
		SELECT c.pending, c.leased, c.completed,
		       (SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables
		         WHERE schemaname = 'webhook_ingress' AND relname LIKE 'jobs%'),
		       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND datname = current_database()),
		       (SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::bigint FROM pg_inherits WHERE inhparent = 'webhook_ingress.jobs'::regclass),
		       (SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::bigint FROM pg_inherits WHERE inhparent = 'webhook_ingress.events'::regclass),
		       (SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::bigint FROM pg_inherits WHERE inhparent = 'webhook_ingress.job_attempts'::regclass),
		       (SELECT extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY j.completed_at - j.event_received_at)) * 1000
		          FROM webhook_ingress.jobs j WHERE j.status = 'completed' AND j.completed_at >= $1)::float8
		FROM (SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
		             count(*) FILTER (WHERE status = 'leased') AS leased,
		             count(*) FILTER (WHERE status = 'completed') AS completed
		      FROM webhook_ingress.jobs) c`, since).
		Scan(&s.Pending, &s.Leased, &s.Completed, &s.DeadTuples, &s.Sessions, &jobs, &events, &attempts, &p99)
	if err != nil {
		return s, fmt.Errorf("soak sample: %w", err)
	}
	const mib = 1 << 20
	s.JobsMiB, s.EventsMiB, s.AttemptsMiB = float64(jobs)/mib, float64(events)/mib, float64(attempts)/mib
	if p99 != nil {
		s.CompleteP99ms = *p99
	}
	if kib, err := procStatusKiB(pid, "VmRSS"); err == nil {
		s.RSSMiB = float64(kib) / 1024
	}
	if n, err := procStatusKiB(pid, "Threads"); err == nil {
		s.Threads = n
	}
	return s, nil
}

// soakTrend is the mean of the last third of the samples ÷ the mean of the
// first third, the first sample left out (start-up); 0 with fewer than four.
func soakTrend(samples []SoakSample, f func(SoakSample) float64) float64 {
	if len(samples) < 4 {
		return 0
	}
	s := samples[1:]
	third := max(len(s)/3, 1)
	mean := func(xs []SoakSample) float64 {
		var sum float64
		for _, x := range xs {
			sum += f(x)
		}
		return sum / float64(len(xs))
	}
	first, last := mean(s[:third]), mean(s[len(s)-third:])
	if first == 0 {
		return 0
	}
	return last / first
}
