package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/inletyaml"
)

func runSend(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "send", " SOURCE", `
Sign a test webhook exactly as SOURCE's provider would (with the source's first
secret from the config file, or the embedded dev defaults) and POST it to a
running ingress. Prints the answer's status, the event id the ingress stores
(read from what is sent by the source's own verifier: a --body's own id where
the source takes the id from the body, --id where it travels in a header, a
sha256: of the body where the source has none) and the answer's body.

`+ingressURLHelp+`

With --handshake it sends instead the endpoint check SOURCE's provider makes
(Meta's hub.challenge, Slack's url_verification, Zoom's url_validation, ...),
signed where the provider signs it, and checks the answer as the provider
would: it prints the handshake's kind and OK, or why the answer would fail
the provider's check (exit 1). Nothing is stored.

With --curl it prints the signed request as a ready curl command instead of
sending it (for any source whose request does not carry the secret itself).

  inlet send stripe
  inlet send acme --body '{"type":"order.created","data":{"id":1}}'
  inlet send meta --handshake
  inlet send discord --private-key @discord-test.key`)
	cfgPath := configFlag(fs)
	target := fs.String("url", "", "base URL of the ingress (default: the inlet dev running here, from .inlet/ingress_url, else ingress.listen of the config file; see above)")
	body := fs.String("body", "", "JSON body to send (default: a small sample event)")
	bodyFile := fs.String("body-file", "", "file whose bytes are sent as the body")
	eventID := fs.String("id", "", "event id to use (default: random; repeat one to see a duplicate); a --body that carries its own id, where the source reads it from the body, keeps that one")
	handshake := fs.Bool("handshake", false, "send the provider's endpoint check (handshake) instead of an event, and check the answer")
	printCurl := fs.Bool("curl", false, "print a ready curl command of the signed request instead of sending it (valid within the source's tolerance where the provider signs a timestamp, else as long as the secret)")
	privateKey := fs.String("private-key", "", "the private key to sign with (the `KEY` itself, or @FILE), for a provider that signs with a key pair (discord: Ed25519, sendgrid: ECDSA P-256), whose source holds only the public key")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: inlet send takes one SOURCE, got %d arguments", errUsage, fs.NArg())
	}
	if *body != "" && *bodyFile != "" {
		return fmt.Errorf("%w: --body and --body-file: give one", errUsage)
	}
	if *handshake && (*body != "" || *bodyFile != "" || *eventID != "") {
		return fmt.Errorf("%w: --handshake sends the provider's own check: --body, --body-file and --id do not apply", errUsage)
	}
	name := fs.Arg(0)
	cfg, from, err := loadConfig(*cfgPath, inletyaml.Dev)
	if err != nil {
		return err
	}
	// origin says where a default URL came from, in the error of a send
	// that reaches nothing there.
	base, origin := *target, ""
	if base == "" {
		if base, origin, err = ingressURL(cfg, from); err != nil {
			return err
		}
		origin = " (from " + origin + "; pass --url to send elsewhere)"
	}
	src, ok := cfg.Source(name)
	if !ok {
		return fmt.Errorf("%w: no source named %q in the configuration", errUsage, name)
	}
	key := ""
	if *privateKey != "" {
		if key, err = readPrivateKey(*privateKey); err != nil {
			return err
		}
	}
	url := strings.TrimRight(base, "/") + "/webhooks/" + name
	if *handshake {
		return sendHandshake(ctx, env, name, src.Config, key, url, origin, *printCurl)
	}
	id := *eventID
	if id == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		id = "evt_test_" + hex.EncodeToString(b)
	}
	payload := []byte(*body)
	if *bodyFile != "" {
		if payload, err = os.ReadFile(*bodyFile); err != nil {
			return fmt.Errorf("read --body-file: %w", err)
		}
	}
	now := time.Now()
	var hdr http.Header
	if key != "" {
		hdr, payload, err = signTestKey(src.Config, key, id, payload, url, now)
	} else {
		hdr, payload, err = verify.SignTest(src.Config, id, payload, url, now)
	}
	if err != nil {
		return fmt.Errorf("sign a test webhook for source %q: %w", name, err)
	}
	if *printCurl {
		cmd, err := curlCommand(http.MethodPost, url, hdr, payload, src.Config.Secrets)
		if err != nil {
			return fmt.Errorf("--curl for source %q: %w", name, err)
		}
		fmt.Fprintln(env.stdout, cmd)
		return nil
	}
	// The id ingress will store is the one its verifier reads from what is
	// sent: --id where the scheme carries it in a header, the body's own id
	// where it reads it from the body (a --body keeps its id), or a hash of
	// the body. Ask the same verifier.
	stored := "unknown: " + id
	if v, err := verify.New(src.Config); err == nil {
		if res, err := v.Verify(&verify.Request{Header: hdr.Clone(), Body: payload, URL: url, Now: now}); err == nil {
			stored = res.EventID
			if verify.PerDeliveryID(src.Config) {
				stored = "a new delivery: id, chosen by ingress (this provider sends no event id)"
			}
		} else {
			stored = fmt.Sprintf("none: ingress will refuse it: %v", err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header = hdr
	resp, err := sendClient.Do(req)
	if err != nil {
		return fmt.Errorf("send to %s%s: %w", redactURL(url), origin, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Fprintf(env.stdout, "%s %s (event id %s)\n%s", resp.Status, redactURL(url), safe(stored), answer)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("ingress answered %s", resp.Status)
	}
	return nil
}

// sendHandshake sends the handshake probe of a source's provider to the
// ingress at url and checks the answer as the provider would. The probe's
// URL is never printed: it may carry the source's verify token. origin says
// where a default url came from ("" for --url).
func sendHandshake(ctx context.Context, env *environment, name string, src verify.Config, key, url, origin string, printCurl bool) error {
	now := time.Now()
	var probe *verify.HandshakeProbe
	var err error
	if key != "" {
		probe, err = handshakeTestKey(src, key, url, now)
	} else {
		probe, err = verify.HandshakeTest(src, url, now)
	}
	if err != nil {
		return fmt.Errorf("handshake for source %q: %w", name, err)
	}
	if printCurl {
		// The verify token is a secret too (Meta's probe carries it in its
		// URL: review helper-161).
		cmd, err := curlCommand(probe.Method, probe.URL, probe.Header, probe.Body, append(slices.Clone(src.Secrets), src.VerifyToken))
		if err != nil {
			return fmt.Errorf("--curl for the %s handshake of source %q: %w", probe.Kind, name, err)
		}
		fmt.Fprintln(env.stdout, cmd)
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, probe.Method, probe.URL, bytes.NewReader(probe.Body))
	if err != nil {
		return fmt.Errorf("build the %s request: %w", probe.Kind, err)
	}
	req.Header = probe.Header
	resp, err := sendClient.Do(req)
	if err != nil {
		return fmt.Errorf("send the %s handshake to %s%s: %w", probe.Kind, redactURL(url), origin, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("read the answer to the %s handshake: %w", probe.Kind, err)
	}
	if err := probe.Check(resp.StatusCode, resp.Header, answer); err != nil {
		return fmt.Errorf("%s %s handshake %s: the provider would not accept the %w", probe.Method, redactURL(url), probe.Kind, err)
	}
	fmt.Fprintf(env.stdout, "%s %s %s handshake %s: OK\n", resp.Status, probe.Method, redactURL(url), probe.Kind)
	return nil
}

// readPrivateKey reads --private-key: the key itself, or @FILE for a file
// holding it. The key is never part of an error.
func readPrivateKey(v string) (string, error) {
	path, ok := strings.CutPrefix(v, "@")
	if !ok {
		return strings.TrimSpace(v), nil
	}
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator names the key file on the command line
	if err != nil {
		return "", fmt.Errorf("--private-key: read %s: %w", path, err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("--private-key: %s is empty", path)
	}
	return key, nil
}

// sendClient posts inlet send's requests: an ingress that takes the
// connection and never answers fails the command within a minute (ingress
// answers within its store_timeout and write_timeout, seconds).
var sendClient = &http.Client{Timeout: time.Minute}
