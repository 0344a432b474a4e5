package relay

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/config"
)

// Section is the relay: section of inlet.yaml, for `inlet relay`, the pass-through mode: it verifies each
// webhook against its source (the sources section) exactly as ingress does,
// and forwards the exact bytes and headers, signed with its own
// Inlet-Relay-Signature, to the customer's ingress (whose source lists the
// same secrets as relay_secrets). It stores nothing.
type Section struct {
	// Listen is the address of the relay's webhook listener
	// (POST /webhooks/{source}, GET /healthz). Defaults to ":8080".
	Listen string `yaml:"listen"`
	// Target is the base URL of the customer's ingress; a webhook for
	// source S goes to Target + "/webhooks/S" with the query it came with.
	// An https:// URL. Required by inlet relay.
	Target string `yaml:"target"`
	// AllowInsecureTarget accepts an http:// Target, for tests and local
	// development only: the bytes would cross the network in clear.
	// Defaults to false.
	AllowInsecureTarget bool `yaml:"allow_insecure_target"`
	// Secrets sign every forwarded request (one v1 per secret in
	// Inlet-Relay-Signature, so the ingress side can rotate before or after
	// the relay). Required by inlet relay: at least one, each at least 16
	// bytes.
	Secrets []string `yaml:"secrets"`
	// CAFile is a PEM file of CA certificates trusted for Target, in place
	// of the system pool (a private CA, tests). TLS verification is never
	// off. Defaults to "": the system pool.
	CAFile string `yaml:"ca_file"`
	// Timeout bounds forwarding one webhook, the ingress's answer included
	// (and the one retry after a connection error). Providers wait less for
	// some (Slack 3s, Shopify 5s): keep it below theirs. Defaults to 8s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxBodyBytes is the largest body accepted; larger requests get 413
	// without being read whole. Keep it at most the ingress's
	// max_body_bytes. Defaults to 1 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxInflightBytes bounds the request bodies the relay holds in memory
	// at once (read, verified, being forwarded), as ingress's
	// max_inflight_bytes: past it a request waits unread (TCP holds its
	// sender back) for up to Timeout, then gets 503 overloaded with
	// Retry-After. A public endpoint needs the bound: any sender can open
	// connections. Defaults to 32 MiB (at least max_body_bytes).
	MaxInflightBytes int64 `yaml:"max_inflight_bytes"`
	// MetricsListen serves GET /metrics (inlet_relay_*: requests by outcome,
	// refusals by reason, forward time, bodies held) with /healthz and
	// /readyz on a listener of its own, never the public webhook port.
	// Defaults to "127.0.0.1:8085": this machine only; "off" disables it.
	MetricsListen string `yaml:"metrics_listen"`
	// UnsignedHeaders are request headers the relay neither forwards nor
	// signs, beside the hop-by-hop ones and the defaults (those proxies and
	// CDN edges set about each hop: X-Forwarded-*, Forwarded, X-Real-Ip,
	// Via, X-Amzn-Trace-Id, X-Cloud-Trace-Context, Cloudflare's CF-Ray,
	// CF-Connecting-IP and the rest, CDN-Loop, True-Client-IP,
	// X-Request-Id, X-Envoy-*, Traceparent, Tracestate, B3, X-B3-*,
	// Fastly-*, X-Azure-*, Akamai-*): for an edge in front of the relay and
	// one in front of the ingress that set a header of their own, which
	// signed would get every relayed delivery refused
	// (relay_headers_mismatch). Each is a header name, or a prefix followed
	// by '*' (X-Edge-*); names match in any case. A header a source's
	// configuration reads (its event_id_header, signature header, ...) is
	// forwarded and signed all the same. Defaults to none.
	UnsignedHeaders []string `yaml:"unsigned_headers"`
}

// DefaultMaxInflightBytes is relay.max_inflight_bytes when unset (and
// max_body_bytes is not larger).
const DefaultMaxInflightBytes = 32 << 20

// WithDefaults returns r with every unset field at its default.
func (r Section) WithDefaults() Section {
	r.Listen = cmp.Or(r.Listen, ":8080")
	r.Timeout = cmp.Or(r.Timeout, 8*time.Second)
	r.MaxBodyBytes = cmp.Or(r.MaxBodyBytes, 1<<20)
	r.MaxInflightBytes = cmp.Or(r.MaxInflightBytes, max(DefaultMaxInflightBytes, r.MaxBodyBytes))
	r.MetricsListen = cmp.Or(r.MetricsListen, "127.0.0.1:8085")
	return r
}

// ValidateForServe is Validate plus what running inlet relay needs: a
// target and secrets.
func (r Section) ValidateForServe() error {
	if r.Target == "" {
		return errors.New("relay.target: required (the https:// base URL of the customer's ingress)")
	}
	if len(r.Secrets) == 0 {
		return errors.New("relay.secrets: at least one secret is required to sign forwarded webhooks")
	}
	return r.Validate()
}

// Validate checks what is set and names the first bad key; every service
// that reads the file runs it, inlet relay runs ValidateForServe.
func (r Section) Validate() error {
	if err := config.CheckListen("relay.listen", r.Listen, ""); err != nil {
		return err
	}
	if err := config.CheckListen("relay.metrics_listen", r.MetricsListen, "", "off"); err != nil {
		return err
	}
	if r.Target != "" {
		u, err := url.Parse(r.Target)
		switch {
		case err != nil || u.Host == "":
			// url's message would quote the URL, credentials and all.
			return errors.New("relay.target: want an https:// URL with a host")
		case u.User != nil:
			return errors.New("relay.target: must not carry credentials")
		case u.RawQuery != "" || u.Fragment != "":
			return errors.New("relay.target: must not have a query or fragment")
		case u.Scheme == "http" && !r.AllowInsecureTarget:
			return errors.New("relay.target: http:// sends the webhook bytes in clear; use https:// (or allow_insecure_target: true, for tests only)")
		case u.Scheme != "https" && u.Scheme != "http":
			return fmt.Errorf("relay.target: scheme %q must be https", u.Scheme)
		}
	}
	for i, s := range r.Secrets {
		if len(s) < sources.MinRelaySecretBytes {
			return fmt.Errorf("relay.secrets[%d]: at least %d bytes required", i, sources.MinRelaySecretBytes)
		}
	}
	if r.Timeout < 0 {
		return fmt.Errorf("relay.timeout: must not be negative, got %s", r.Timeout)
	}
	if r.MaxBodyBytes < 0 {
		return errors.New("relay.max_body_bytes: must be positive")
	}
	if r.MaxInflightBytes < 0 {
		return errors.New("relay.max_inflight_bytes: must be positive")
	}
	if _, err := verify.NewRelayUnsigned(r.UnsignedHeaders); err != nil {
		return fmt.Errorf("relay.unsigned_headers%w", err)
	}
	if mb := r.WithDefaults().MaxBodyBytes; r.MaxInflightBytes > 0 && r.MaxInflightBytes < mb {
		return fmt.Errorf("relay.max_inflight_bytes: %d is less than relay.max_body_bytes (%d), so a body of the largest size could never be read",
			r.MaxInflightBytes, mb)
	}
	return nil
}
