//go:build !fuzzonly

package verify

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

const (
	standardMsgID = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
)

var standardBody = []byte(`{"type":"invoice.paid","timestamp":"2023-11-14T22:13:20Z","data":{"id":"in_1","amount":2000}}`)

// standardOracle is the webhook-signature value the standard-webhooks
// library produces.
func standardOracle(t testing.TB, secret, msgID string, ts time.Time, body []byte) string {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatalf("NewWebhook: %v", err)
	}
	sig, err := wh.Sign(msgID, ts, body)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return sig
}

// standardHeadersOf builds headers of the given family ("webhook" or
// "svix"); empty values are left out.
func standardHeadersOf(family, id, ts, sig string) http.Header {
	h := http.Header{}
	for name, v := range map[string]string{"-id": id, "-timestamp": ts, "-signature": sig} {
		if v != "" {
			h.Set(family+name, v)
		}
	}
	return h
}

func unixString(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

func TestStandardWebhooksVerify(t *testing.T) {
	t.Parallel()

	ts := unixString(testNow)
	valid := standardOracle(t, standardSecret, standardMsgID, testNow, standardBody)
	validB64 := strings.TrimPrefix(valid, "v1,")
	wrong := "v1," + changeBase64At(validB64, 5)
	at := func(d time.Duration) http.Header {
		tm := testNow.Add(d)
		return standardHeadersOf("webhook", standardMsgID, unixString(tm), standardOracle(t, standardSecret, standardMsgID, tm, standardBody))
	}
	ours, err := SignStandardWebhooks(standardSecret, standardMsgID, testNow, standardBody)
	if err != nil {
		t.Fatal(err)
	}
	signedBody := func(body string) http.Header {
		return standardHeadersOf("webhook", standardMsgID, ts, standardOracle(t, standardSecret, standardMsgID, testNow, []byte(body)))
	}
	mixed := standardHeadersOf("webhook", "", "", valid)
	mixed.Set("svix-id", standardMsgID)
	mixed.Set("svix-timestamp", ts)
	both := standardHeadersOf("svix", standardMsgID, ts, wrong)
	for k, v := range standardHeadersOf("webhook", standardMsgID, ts, valid) {
		both[k] = v
	}

	ok := Result{EventID: standardMsgID, EventType: "invoice.paid"}
	tests := []struct {
		name      string
		secrets   []string
		tolerance time.Duration
		header    http.Header
		body      string // "" means standardBody
		ignore    bool
		wantErr   error
		wantRes   Result
	}{
		{name: "sdk signed", header: standardHeadersOf("webhook", standardMsgID, ts, valid), wantRes: ok},
		{name: "svix headers", header: standardHeadersOf("svix", standardMsgID, ts, valid), wantRes: ok},
		{name: "webhook family wins over svix", header: both, wantRes: ok},
		{name: "our signer", header: ours, wantRes: ok},
		{name: "plain base64 secret", secrets: []string{strings.TrimPrefix(standardSecret, "whsec_")}, header: standardHeadersOf("webhook", standardMsgID, ts, valid), wantRes: ok},
		{name: "body byte changed", header: standardHeadersOf("webhook", standardMsgID, ts, valid), body: strings.Replace(string(standardBody), "2000", "2001", 1), wantErr: ErrSignatureMismatch},
		{name: "timestamp plus one second", header: standardHeadersOf("webhook", standardMsgID, unixString(testNow.Add(time.Second)), valid), wantErr: ErrSignatureMismatch},
		{name: "timestamp minus one second", header: standardHeadersOf("webhook", standardMsgID, unixString(testNow.Add(-time.Second)), valid), wantErr: ErrSignatureMismatch},
		{name: "id changed", header: standardHeadersOf("webhook", standardMsgID+"x", ts, valid), wantErr: ErrSignatureMismatch},
		{name: "one base64 char changed", header: standardHeadersOf("webhook", standardMsgID, ts, wrong), wantErr: ErrSignatureMismatch},
		{name: "first base64 char changed", header: standardHeadersOf("webhook", standardMsgID, ts, "v1,"+changeBase64At(validB64, 0)), wantErr: ErrSignatureMismatch},
		{name: "wrong secret", secrets: []string{standardOldSecret}, header: standardHeadersOf("webhook", standardMsgID, ts, valid), wantErr: ErrSignatureMismatch},

		{name: "stale beyond tolerance", header: at(-5*time.Minute - time.Second), wantErr: ErrTimestampOutsideTolerance},
		{name: "future beyond tolerance", header: at(5*time.Minute + time.Second), wantErr: ErrTimestampOutsideTolerance},
		{name: "stale at tolerance edge", header: at(-5 * time.Minute), wantRes: ok},
		{name: "future at tolerance edge", header: at(5 * time.Minute), wantRes: ok},
		{name: "custom tolerance", tolerance: time.Hour, header: at(-59 * time.Minute), wantRes: ok},
		{name: "stale ignored when re-verifying", header: at(-30 * 24 * time.Hour), ignore: true, wantRes: ok},
		{name: "re-verifying still checks the signature", header: standardHeadersOf("webhook", standardMsgID, unixString(testNow.Add(-time.Hour)), valid), ignore: true, wantErr: ErrSignatureMismatch},

		{name: "rotation new secret", secrets: []string{standardOldSecret, standardSecret}, header: standardHeadersOf("webhook", standardMsgID, ts, valid), wantRes: Result{EventID: standardMsgID, EventType: "invoice.paid", SecretIndex: 1}},
		{name: "rotation old secret", secrets: []string{standardOldSecret, standardSecret}, header: standardHeadersOf("webhook", standardMsgID, ts, standardOracle(t, standardOldSecret, standardMsgID, testNow, standardBody)), wantRes: ok},
		{name: "several v1 second valid", header: standardHeadersOf("webhook", standardMsgID, ts, wrong+" "+valid), wantRes: ok},
		{name: "several v1 first valid", header: standardHeadersOf("webhook", standardMsgID, ts, valid+" "+wrong), wantRes: ok},
		{name: "several v1 none valid", header: standardHeadersOf("webhook", standardMsgID, ts, wrong+" v1,"+changeBase64At(validB64, 9)), wantErr: ErrSignatureMismatch},
		{name: "v1a ignored", header: standardHeadersOf("webhook", standardMsgID, ts, "v1a,"+validB64+" "+valid), wantRes: ok},
		{name: "valid sig only under v1a", header: standardHeadersOf("webhook", standardMsgID, ts, "v1a,"+validB64), wantErr: ErrSignatureMalformed},
		{name: "undecodable entry beside a valid one", header: standardHeadersOf("webhook", standardMsgID, ts, "v1,!!! "+valid), wantRes: ok},
		{name: "double space", header: standardHeadersOf("webhook", standardMsgID, ts, wrong+"  "+valid), wantRes: ok},

		{name: "no headers", header: http.Header{}, wantErr: ErrSignatureMissing},
		{name: "no signature", header: standardHeadersOf("webhook", standardMsgID, ts, ""), wantErr: ErrSignatureMissing},
		{name: "no id", header: standardHeadersOf("webhook", "", ts, valid), wantErr: ErrSignatureMissing},
		{name: "no timestamp", header: standardHeadersOf("svix", standardMsgID, "", valid), wantErr: ErrSignatureMissing},
		{name: "families not mixed", header: mixed, wantErr: ErrSignatureMissing},
		{name: "bad timestamp", header: standardHeadersOf("webhook", standardMsgID, "yesterday", valid), wantErr: ErrSignatureMalformed},
		{name: "negative timestamp", header: standardHeadersOf("webhook", standardMsgID, "-"+ts, valid), wantErr: ErrSignatureMalformed},
		{name: "milliseconds timestamp", header: standardHeadersOf("webhook", standardMsgID, ts+"000", valid), wantErr: ErrSignatureMismatch},
		{name: "not base64", header: standardHeadersOf("webhook", standardMsgID, ts, "v1,"+strings.Repeat("*", 43)+"="), wantErr: ErrSignatureMalformed},
		{name: "unpadded base64", header: standardHeadersOf("webhook", standardMsgID, ts, strings.TrimSuffix(valid, "=")), wantErr: ErrSignatureMalformed},
		{name: "short signature", header: standardHeadersOf("webhook", standardMsgID, ts, "v1,"+base64.StdEncoding.EncodeToString([]byte("short"))), wantErr: ErrSignatureMalformed},
		// Found by FuzzStandardWebhooks: 44 characters without padding
		// decode to 33 bytes and once overran the MAC buffer.
		{name: "unpadded 44 characters", header: standardHeadersOf("webhook", standardMsgID, ts, "v1,"+strings.Repeat("0", 44)), wantErr: ErrSignatureMalformed},
		{name: "no version", header: standardHeadersOf("webhook", standardMsgID, ts, validB64), wantErr: ErrSignatureMalformed},
		{name: "non-canonical base64", header: standardHeadersOf("webhook", standardMsgID, ts, "v1,"+validB64[:42]+string(validB64[42]+1)+"="), wantErr: ErrSignatureMalformed},

		{name: "type absent", header: signedBody(`{"data":{}}`), body: `{"data":{}}`, wantRes: Result{EventID: standardMsgID}},
		{name: "type not a string", header: signedBody(`{"type":7}`), body: `{"type":7}`, wantRes: Result{EventID: standardMsgID}},
		{name: "body not JSON", header: signedBody("plain text"), body: "plain text", wantRes: Result{EventID: standardMsgID}},
		{name: "body JSON array", header: signedBody(`[{"type":"x"}]`), body: `[{"type":"x"}]`, wantRes: Result{EventID: standardMsgID}},
		{name: "body invalid JSON object", header: signedBody(`{"type":"x",`), body: `{"type":"x",`, wantRes: Result{EventID: standardMsgID}},
		{name: "leading whitespace", header: signedBody(" \n{\"type\":\"x\"}"), body: " \n{\"type\":\"x\"}", wantRes: Result{EventID: standardMsgID, EventType: "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			secrets := tt.secrets
			if secrets == nil {
				secrets = []string{standardSecret}
			}
			v := mustNew(t, Config{Type: "standard-webhooks", Secrets: secrets, Tolerance: tt.tolerance})
			body := standardBody
			if tt.body != "" {
				body = []byte(tt.body)
			}
			req := &Request{Header: tt.header, Body: body, Now: testNow, IgnoreTolerance: tt.ignore}
			res, err := v.Verify(req)
			checkErr(t, err, tt.wantErr, secrets, req)
			if res != tt.wantRes {
				t.Errorf("Verify = %+v, want %+v", res, tt.wantRes)
			}
		})
	}
}

func TestStandardWebhooksSvixAlias(t *testing.T) {
	t.Parallel()
	v := mustNew(t, Config{Type: "svix", Secrets: []string{standardSecret}})
	sig := standardOracle(t, standardSecret, standardMsgID, testNow, standardBody)
	res, err := v.Verify(&Request{Header: standardHeadersOf("svix", standardMsgID, unixString(testNow), sig), Body: standardBody, Now: testNow})
	if err != nil || res.EventID != standardMsgID {
		t.Fatalf("Verify = %+v, %v", res, err)
	}
}

// TestStandardWebhooksSignerAcceptedBySDK checks SignStandardWebhooks
// against the standard-webhooks library: same signature, and its Verify
// accepts our headers.
func TestStandardWebhooksSignerAcceptedBySDK(t *testing.T) {
	t.Parallel()
	wh, err := standardwebhooks.NewWebhook(standardSecret)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{standardBody, {}, []byte("\x00\xff not json")} {
		h, err := SignStandardWebhooks(standardSecret, standardMsgID, testNow, body)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := h.Get("webhook-signature"), standardOracle(t, standardSecret, standardMsgID, testNow, body); got != want {
			t.Errorf("webhook-signature = %q, library = %q", got, want)
		}
		if h.Get("webhook-id") != standardMsgID || h.Get("webhook-timestamp") != unixString(testNow) {
			t.Errorf("headers = %q", h)
		}
		now, err := SignStandardWebhooks(standardSecret, standardMsgID, time.Now(), body)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(body, now); err != nil {
			t.Errorf("library rejects SignStandardWebhooks output: %v", err)
		}
	}
	// Plain base64 secrets sign the same as whsec_ ones.
	a, _ := SignStandardWebhooks(standardSecret, standardMsgID, testNow, standardBody)
	b, _ := SignStandardWebhooks(strings.TrimPrefix(standardSecret, "whsec_"), standardMsgID, testNow, standardBody)
	if a.Get("webhook-signature") != b.Get("webhook-signature") {
		t.Error("whsec_ prefix changes the signature")
	}
}

func TestSignStandardWebhooksErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, secret, msgID, want string
	}{
		{"bad base64", "whsec_not*base64!", standardMsgID, "secret: not valid base64"},
		{"empty key", "whsec_", standardMsgID, "secret: decodes to an empty key"},
		{"empty secret", "", standardMsgID, "secret: decodes to an empty key"},
		{"empty id", standardSecret, "", "msgID: must not be empty"},
	}
	for _, tt := range tests {
		h, err := SignStandardWebhooks(tt.secret, tt.msgID, testNow, standardBody)
		if err == nil || h != nil {
			t.Errorf("%s: SignStandardWebhooks = %q, %v; want error", tt.name, h, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %q, want it to contain %q", tt.name, err, tt.want)
		}
		checkErrorSafe(t, err, []string{tt.secret}, nil)
	}
}

// standardReallySigned is the fuzz oracle, independent of the code under
// test: some space-separated entry equals "v1," + base64 of the HMAC.
func standardReallySigned(t *testing.T, secret, id, ts, list string, body []byte) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, e := range strings.Split(list, " ") {
		if e == want {
			return true
		}
	}
	return false
}

func FuzzStandardWebhooks(f *testing.F) {
	ts := unixString(testNow)
	valid := standardOracle(f, standardSecret, standardMsgID, testNow, standardBody)
	f.Add(standardMsgID, ts, valid, standardBody, false, testNow.Unix(), uint(0))
	f.Add(standardMsgID, ts, "v1a,xx v1,"+strings.Repeat("A", 43)+"= "+valid, standardBody, true, int64(0), uint(5))
	f.Add("", "", "", []byte{}, false, int64(-1), uint(1))
	f.Add("a", "0", "v1,", []byte("x"), true, int64(1<<50), uint(1<<20))
	f.Add("id", "12", "v1,AAAA\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", []byte("{"), false, int64(12), uint(9))

	secrets := []string{standardOldSecret, standardSecret}
	v := mustNew(f, Config{Type: "standard-webhooks", Secrets: secrets})

	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte, svix bool, unix int64, flip uint) {
		family := "webhook"
		if svix {
			family = "svix"
		}
		h := http.Header{}
		for name, val := range map[string]string{"-id": id, "-timestamp": ts, "-signature": sig} {
			h[http.CanonicalHeaderKey(family+name)] = []string{val}
		}
		req := &Request{Header: h, Body: body, IgnoreTolerance: true}
		res, err := v.Verify(req)
		if err == nil {
			if !standardReallySigned(t, secrets[res.SecretIndex], id, ts, sig, body) {
				t.Fatalf("accepted id %q ts %q sig %q for body %q without a genuine signature", id, ts, sig, body)
			}
			if res.EventID != id {
				t.Fatalf("EventID = %q, want %q", res.EventID, id)
			}
		} else {
			if Reason(err) == "unknown" {
				t.Fatalf("error without sentinel: %v", err)
			}
			checkErrorSafe(t, err, secrets, req)
		}

		// A library signature over the fuzzed body is accepted, also by the
		// library itself; any one-bit change of the body or one character of
		// the signature fails.
		if unix < 0 {
			unix = -(unix + 1)
		}
		at := time.Unix(unix%(1<<40), 0)
		good := standardOracle(t, standardSecret, "msg_1", at, body)
		req = &Request{Header: standardHeadersOf(family, "msg_1", unixString(at), good), Body: body, Now: at}
		// A body type that is not text ("\u0000") is refused as a
		// malformed payload, after the signature passed.
		if res, err := v.Verify(req); err != nil && !errors.Is(err, ErrMalformedPayload) || err == nil && res.SecretIndex != 1 {
			t.Fatalf("genuine signature: %+v, %v", res, err)
		}
		if len(body) > 0 {
			bad := bytes.Clone(body)
			bad[flip%uint(len(bad))] ^= 1 << (flip / uint(len(bad)) % 8)
			if _, err := v.Verify(&Request{Header: req.Header, Body: bad, Now: at}); !errors.Is(err, ErrSignatureMismatch) {
				t.Fatalf("flipped body bit: error = %v, want mismatch", err)
			}
		}
		changed := "v1," + changeBase64At(strings.TrimPrefix(good, "v1,"), int(flip%42))
		if _, err := v.Verify(&Request{Header: standardHeadersOf(family, "msg_1", unixString(at), changed), Body: body, Now: at}); !errors.Is(err, ErrSignatureMismatch) {
			t.Fatalf("changed signature character: error = %v, want mismatch", err)
		}
	})
}

func BenchmarkStandardWebhooksVerify(b *testing.B) {
	body := benchBody()
	v := mustNew(b, Config{Type: "standard-webhooks", Secrets: []string{standardSecret}})
	h, err := SignStandardWebhooks(standardSecret, standardMsgID, testNow, body)
	if err != nil {
		b.Fatal(err)
	}
	req := &Request{Header: h, Body: body, Now: testNow}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := v.Verify(req); err != nil {
			b.Fatal(err)
		}
	}
}

// standardEdKeys generates an Ed25519 key pair in the test and returns the
// private key and the whpk_ secret a receiver configures.
func standardEdKeys(t testing.TB) (ed25519.PrivateKey, string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv, "whpk_" + base64.StdEncoding.EncodeToString(pub)
}

// standardEdOracle signs with crypto/ed25519 directly, independently of
// the package: "v1a," + base64(Ed25519(priv, "{id}.{ts}.{body}")). The
// standard-webhooks Go library has no v1a to use as the oracle.
func standardEdOracle(priv ed25519.PrivateKey, id, ts string, body []byte) string {
	return "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(priv, []byte(id+"."+ts+"."+string(body))))
}

func TestStandardWebhooksEd25519Verify(t *testing.T) {
	t.Parallel()
	priv, whpk := standardEdKeys(t)
	oldPriv, oldWhpk := standardEdKeys(t)
	ts := unixString(testNow)
	valid := standardEdOracle(priv, standardMsgID, ts, standardBody)
	hmacValid := standardOracle(t, standardSecret, standardMsgID, testNow, standardBody)
	wrong := "v1a," + changeBase64At(strings.TrimPrefix(valid, "v1a,"), 10)
	at := func(d time.Duration) http.Header {
		s := unixString(testNow.Add(d))
		return standardHeadersOf("webhook", standardMsgID, s, standardEdOracle(priv, standardMsgID, s, standardBody))
	}
	ours, err := SignStandardWebhooksEd25519(priv, standardMsgID, testNow, standardBody)
	if err != nil {
		t.Fatal(err)
	}
	ok := Result{EventID: standardMsgID, EventType: "invoice.paid"}
	h := func(sig string) http.Header { return standardHeadersOf("webhook", standardMsgID, ts, sig) }

	runVerifyCases(t, Config{Type: "standard-webhooks", Secrets: []string{whpk}}, standardBody, []verifyCase{
		{name: "v1a", header: h(valid), wantRes: ok},
		{name: "our signer", header: ours, wantRes: ok},
		{name: "svix headers", header: standardHeadersOf("svix", standardMsgID, ts, valid), wantRes: ok},
		{name: "rotation new key", secrets: []string{oldWhpk, whpk}, header: h(valid), wantRes: Result{EventID: standardMsgID, EventType: "invoice.paid", SecretIndex: 1}},
		{name: "rotation old key", secrets: []string{oldWhpk, whpk}, header: h(standardEdOracle(oldPriv, standardMsgID, ts, standardBody)), wantRes: ok},
		{name: "mixed secrets, v1 matches", secrets: []string{whpk, standardSecret}, header: h(hmacValid), wantRes: Result{EventID: standardMsgID, EventType: "invoice.paid", SecretIndex: 1}},
		{name: "mixed secrets, v1a matches", secrets: []string{standardSecret, whpk}, header: h(valid), wantRes: Result{EventID: standardMsgID, EventType: "invoice.paid", SecretIndex: 1}},
		{name: "mixed secrets, both entries", secrets: []string{standardSecret, whpk}, header: h(valid + " " + hmacValid), wantRes: ok},
		{name: "several v1a second valid", header: h(wrong + " " + valid), wantRes: ok},
		{name: "v1 entry ignored without whsec", header: h(hmacValid + " " + valid), wantRes: ok},

		{name: "body byte changed", header: h(valid), body: flipBit(standardBody, 11), wantErr: ErrSignatureMismatch},
		{name: "timestamp plus one second", header: standardHeadersOf("webhook", standardMsgID, unixString(testNow.Add(time.Second)), valid), wantErr: ErrSignatureMismatch},
		{name: "id changed", header: standardHeadersOf("webhook", standardMsgID+"x", ts, valid), wantErr: ErrSignatureMismatch},
		{name: "signature char changed", header: h(wrong), wantErr: ErrSignatureMismatch},
		{name: "other key", secrets: []string{oldWhpk}, header: h(valid), wantErr: ErrSignatureMismatch},
		{name: "v1a signature under v1", header: h("v1," + strings.TrimPrefix(valid, "v1a,")), wantErr: ErrSignatureMalformed},
		{name: "only v1 entries", header: h(hmacValid), wantErr: ErrSignatureMalformed},
		{name: "short v1a", header: h("v1a," + base64.StdEncoding.EncodeToString(make([]byte, 63))), wantErr: ErrSignatureMalformed},
		{name: "unpadded v1a", header: h(strings.TrimSuffix(valid, "==")), wantErr: ErrSignatureMalformed},

		{name: "stale beyond tolerance", header: at(-5*time.Minute - time.Second), wantErr: ErrTimestampOutsideTolerance},
		{name: "future beyond tolerance", header: at(5*time.Minute + time.Second), wantErr: ErrTimestampOutsideTolerance},
		{name: "stale ignored when re-verifying", header: at(-72 * time.Hour), ignore: true, wantRes: ok},
		{name: "no signature", header: standardHeadersOf("webhook", standardMsgID, ts, ""), wantErr: ErrSignatureMissing},
		{name: "no id", header: standardHeadersOf("webhook", "", ts, valid), wantErr: ErrSignatureMissing},
	})
}

func TestSignStandardWebhooksEd25519Errors(t *testing.T) {
	t.Parallel()
	priv, _ := standardEdKeys(t)
	if _, err := SignStandardWebhooksEd25519(priv[:32], "m", testNow, nil); err == nil || !strings.Contains(err.Error(), "key:") {
		t.Errorf("short key: %v", err)
	}
	if _, err := SignStandardWebhooksEd25519(priv, "", testNow, nil); err == nil || !strings.Contains(err.Error(), "msgID") {
		t.Errorf("empty id: %v", err)
	}
	h, err := SignStandardWebhooksEd25519(priv, "m", testNow, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.Get("webhook-signature"), standardEdOracle(priv, "m", unixString(testNow), nil); got != want {
		t.Errorf("signature = %s, want %s", got, want)
	}
}

// standardEdReallySigned is the fuzz oracle for v1a: some entry is a valid
// Ed25519 signature of "{id}.{ts}.{body}" under pub.
func standardEdReallySigned(pub ed25519.PublicKey, id, ts, list string, body []byte) bool {
	for _, e := range strings.Split(list, " ") {
		b64, ok := strings.CutPrefix(e, "v1a,")
		if !ok {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && base64.StdEncoding.EncodeToString(sig) == b64 && len(sig) == ed25519.SignatureSize &&
			ed25519.Verify(pub, []byte(id+"."+ts+"."+string(body)), sig) {
			return true
		}
	}
	return false
}

func FuzzStandardWebhooksEd25519(f *testing.F) {
	// A fixed seed keeps the keys, and so the corpus, stable across runs.
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	oldPriv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize))
	pubs := []ed25519.PublicKey{oldPriv.Public().(ed25519.PublicKey), priv.Public().(ed25519.PublicKey)}
	secrets := []string{
		"whpk_" + base64.StdEncoding.EncodeToString(pubs[0]),
		"whpk_" + base64.StdEncoding.EncodeToString(pubs[1]),
		standardSecret,
	}
	ts := unixString(testNow)
	f.Add(standardMsgID, ts, standardEdOracle(priv, standardMsgID, ts, standardBody), standardBody, uint(0))
	f.Add("id", "1", "v1a,"+strings.Repeat("A", 86)+"== v1,x", []byte{}, uint(3))
	f.Add("", "", "v1a,", []byte("x"), uint(1<<22))
	v := mustNew(f, Config{Type: "standard-webhooks", Secrets: secrets})

	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte, flip uint) {
		h := http.Header{"Webhook-Id": {id}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {sig}}
		req := &Request{Header: h, Body: body, IgnoreTolerance: true}
		res, err := v.Verify(req)
		if err == nil {
			genuine := false
			if res.SecretIndex < 2 {
				genuine = standardEdReallySigned(pubs[res.SecretIndex], id, ts, sig, body)
			} else {
				genuine = standardReallySigned(t, standardSecret, id, ts, sig, body)
			}
			if !genuine {
				t.Fatalf("accepted id %q ts %q sig %q body %q: not genuine", id, ts, sig, body)
			}
		} else {
			if Reason(err) == "unknown" {
				t.Fatalf("error without sentinel: %v", err)
			}
			checkErrorSafe(t, err, secrets, req)
		}
		good, err := SignStandardWebhooksEd25519(priv, "msg_1", testNow, body)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := v.Verify(&Request{Header: good, Body: body, Now: testNow}); err != nil && !errors.Is(err, ErrMalformedPayload) || err == nil && res.SecretIndex != 1 {
			t.Fatalf("genuine: %+v, %v", res, err)
		}
		if len(body) > 0 {
			if _, err := v.Verify(&Request{Header: good, Body: flipBit(body, flip), Now: testNow}); !errors.Is(err, ErrSignatureMismatch) {
				t.Fatalf("flipped body: %v", err)
			}
		}
	})
}
