package tests

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// collector is an OTLP/HTTP trace receiver: it keeps every span it is sent.
type collector struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	svc   map[string]string // span id → service.name
	raw   bytes.Buffer
}

func newCollector(t *testing.T) (*collector, string) {
	c := &collector{svc: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want protobuf on /v1/traces", http.StatusBadRequest)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.raw.Write(b)
		for _, rs := range req.GetResourceSpans() {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					c.spans = append(c.spans, s)
					c.svc[hex.EncodeToString(s.GetSpanId())] = service
				}
			}
		}
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return c, srv.URL
}

func (c *collector) named(name string) []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range c.spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

// attr is span attribute key as text ("" when absent).
func attr(s *tracepb.Span, key string) string {
	for _, a := range s.GetAttributes() {
		if a.GetKey() != key {
			continue
		}
		if v, ok := a.GetValue().GetValue().(*commonpb.AnyValue_IntValue); ok {
			return strconv.FormatInt(v.IntValue, 10)
		}
		return a.GetValue().GetStringValue()
	}
	return ""
}

// One webhook through inlet ingress, inlet streamer and inlet consumer, each
// its own process, over a real NATS, with tracing on: one trace, with the
// ingress span as the root, the streamer's publish span its child, and the
// consumer's attempt span the publish span's child, each from its own
// service and naming the job and event ids the database holds. No span
// carries the body or the provider's event id.
func TestTracingFollowsAWebhookAcrossServices(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	dbURL := pgtest.NewDatabase(t)
	col, colURL := newCollector(t)
	const secret = "tracing-forward-secret"
	target, targetURL := newCountingTarget(t, secret)
	cfg, addr := servicesConfig(t, nats.URL(), targetURL, secret)
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, append(b, []byte("tracing:\n  otlp_endpoint: "+colURL+"\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	env := cleanEnv("DATABASE_URL=" + dbURL)
	c := start(t, env, "consumer", "--config", cfg)
	c.waitLog("consumers started", 30*time.Second)
	st := start(t, env, "streamer", "--config", cfg)
	st.waitLog("streamer started", 30*time.Second)
	ing := start(t, env, "ingress", "--config", cfg)
	ing.waitLog("ingress listening", 30*time.Second)

	const canary = "tracing-canary-body-5e1"
	sendGitHub(t, "http://"+addr, "e2e-services-secret", "trace-delivery-canary-1", []byte(`{"zen":"`+canary+`"}`))
	target.waitDistinct(t, 1, 30*time.Second)
	// Spans are batched: stopping the services flushes them.
	for _, p := range []*proc{ing, st, c} {
		if err := p.stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
	}

	var jobID, eventID string
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), `SELECT j.id::text, j.event_id::text FROM webhook_ingress.jobs j`).Scan(&jobID, &eventID); err != nil {
		t.Fatal(err)
	}

	ingSpans, pubSpans, attSpans := col.named("inlet.ingress.webhook"), col.named("inlet.streamer.publish"), col.named("inlet.consumer.attempt")
	if len(ingSpans) != 1 || len(pubSpans) != 1 || len(attSpans) != 1 {
		t.Fatalf("spans: %d ingress, %d publish, %d attempt; want one each", len(ingSpans), len(pubSpans), len(attSpans))
	}
	in, pub, att := ingSpans[0], pubSpans[0], attSpans[0]
	if !bytes.Equal(in.GetTraceId(), pub.GetTraceId()) || !bytes.Equal(pub.GetTraceId(), att.GetTraceId()) {
		t.Fatal("the three spans are not one trace")
	}
	if len(in.GetParentSpanId()) != 0 || !bytes.Equal(pub.GetParentSpanId(), in.GetSpanId()) || !bytes.Equal(att.GetParentSpanId(), pub.GetSpanId()) {
		t.Fatal("want ingress → publish → attempt as parent and children")
	}
	col.mu.Lock()
	services := []string{col.svc[hex.EncodeToString(in.GetSpanId())], col.svc[hex.EncodeToString(pub.GetSpanId())], col.svc[hex.EncodeToString(att.GetSpanId())]}
	raw := col.raw.String()
	col.mu.Unlock()
	if strings.Join(services, " ") != "inlet-ingress inlet-streamer inlet-consumer" {
		t.Fatalf("services: %v", services)
	}
	for _, s := range []*tracepb.Span{pub, att} {
		if attr(s, "inlet.job_id") != jobID || attr(s, "inlet.event_id") != eventID || attr(s, "inlet.handler") != "forward" {
			t.Fatalf("%s: job %q event %q handler %q; want job %s event %s", s.GetName(),
				attr(s, "inlet.job_id"), attr(s, "inlet.event_id"), attr(s, "inlet.handler"), jobID, eventID)
		}
	}
	if attr(in, "inlet.outcome") != "stored" || attr(att, "inlet.outcome") != "completed" || attr(in, "inlet.source") != "github" {
		t.Fatalf("outcomes: ingress %q, attempt %q", attr(in, "inlet.outcome"), attr(att, "inlet.outcome"))
	}
	if strings.Contains(raw, canary) || strings.Contains(raw, "trace-delivery-canary-1") {
		t.Fatal("a span carries the body or the provider's event id")
	}
}
