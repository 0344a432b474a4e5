//go:build !fuzzonly

package verify

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sendgrid/sendgrid-go/helpers/eventwebhook"
)

// SendGrid's own test vector, from sendgrid-go v3.16.1
// helpers/eventwebhook/eventwebhook_test.go (TestVerifySignature): the
// verification key, the signature and timestamp SendGrid sent, and the
// payload, which that test builds by JSON-encoding one event (keys sorted,
// HTML not escaped) and ending it with "\r\n".
const (
	sendgridVectorKey = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g=="
	sendgridVectorSig = "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM="
	sendgridVectorTS  = "1600112502"
)

var sendgridVectorBody = []byte(`[{"email":"hello@world.com","event":"dropped","reason":"Bounced Address","sg_event_id":"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA","sg_message_id":"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0","smtp-id":"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>","timestamp":1600112492}]` + "\r\n")

const (
	sendgridSigHeader = "X-Twilio-Email-Event-Webhook-Signature"
	sendgridTSHeader  = "X-Twilio-Email-Event-Webhook-Timestamp"
)

func sendgridHeaders(sig, ts string) http.Header {
	h := http.Header{}
	if sig != "" {
		h.Set(sendgridSigHeader, sig)
	}
	if ts != "" {
		h.Set(sendgridTSHeader, ts)
	}
	return h
}

// sendgridSigned signs as SendGrid documents it, with the standard
// library: base64(DER(ECDSA-P256(SHA-256(timestamp + body)))).
func sendgridSigned(t testing.TB, key *ecdsa.PrivateKey, ts time.Time, body []byte) http.Header {
	t.Helper()
	tss := strconv.FormatInt(ts.Unix(), 10)
	digest := sha256.Sum256(append([]byte(tss), body...))
	sig, err := ecdsa.SignASN1(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	return sendgridHeaders(base64.StdEncoding.EncodeToString(sig), tss)
}

// sendgridAccepts is the oracle: sendgrid-go's VerifySignature.
func sendgridAccepts(t testing.TB, publicKey string, h http.Header, body []byte) bool {
	t.Helper()
	key, err := eventwebhook.ConvertPublicKeyBase64ToECDSA(publicKey)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := eventwebhook.VerifySignature(key, body, h.Get(sendgridSigHeader), h.Get(sendgridTSHeader))
	return ok && err == nil
}

func TestSendGridVector(t *testing.T) {
	t.Parallel()
	h := sendgridHeaders(sendgridVectorSig, sendgridVectorTS)
	if !sendgridAccepts(t, sendgridVectorKey, h, sendgridVectorBody) {
		t.Fatal("sendgrid-go rejects its own vector: the payload bytes differ from its test's")
	}
	cfg := Config{Type: "sendgrid", Secrets: []string{ecdsaPublicB64(sendgridOldKey), sendgridVectorKey}}
	at, _ := strconv.ParseInt(sendgridVectorTS, 10, 64)
	req := &Request{Header: h, Body: sendgridVectorBody, Now: time.Unix(at+30, 0)}
	res, err := mustNew(t, cfg).Verify(req)
	if err != nil {
		t.Fatalf("Verify(SendGrid's vector): %v", err)
	}
	if res.EventID != syntheticID(sendgridVectorBody) || res.EventType != "" || res.SecretIndex != 1 {
		t.Errorf("Verify = %+v", res)
	}
	// Its test's negative cases.
	for name, c := range map[string]struct {
		h    http.Header
		body []byte
	}{
		"other payload":     {h, []byte("this is not valid payload for the given signature")},
		"bad signature":     {sendgridHeaders(sendgridVectorSig+"causing failure", sendgridVectorTS), sendgridVectorBody},
		"bad timestamp":     {sendgridHeaders(sendgridVectorSig, "invalid timestamp"), sendgridVectorBody},
		"no timestamp":      {sendgridHeaders(sendgridVectorSig, ""), sendgridVectorBody},
		"body without CRLF": {h, sendgridVectorBody[:len(sendgridVectorBody)-2]},
	} {
		r := &Request{Header: c.h, Body: c.body, Now: req.Now}
		if _, err := mustNew(t, cfg).Verify(r); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			checkErrorSafe(t, err, cfg.Secrets, r)
		}
	}
	// occurred_at is the first event's timestamp.
	if got := NewOccurredAt(cfg)(h, sendgridVectorBody); !got.Equal(time.Unix(1600112492, 0)) {
		t.Errorf("occurred_at = %v", got)
	}
}

func TestSendGridVerify(t *testing.T) {
	t.Parallel()
	cfg := Config{Type: "sendgrid", Secrets: []string{ecdsaPublicB64(sendgridOldKey), ecdsaPublicB64(sendgridTestKey)}}
	v := mustNew(t, cfg)
	body := sendgridVectorBody
	valid := sendgridSigned(t, sendgridTestKey, testNow, body)
	sig := valid.Get(sendgridSigHeader)
	der, _ := base64.StdEncoding.DecodeString(sig)
	trailing := ErrSignatureMismatch
	if len(der) == maxECDSASig {
		trailing = ErrSignatureMalformed // too long for any P-256 signature
	}
	with := func(name, value string) http.Header {
		h := valid.Clone()
		if value == "" {
			h.Del(name)
		} else {
			h.Set(name, value)
		}
		return h
	}
	tests := []struct {
		name   string
		header http.Header
		body   []byte
		want   error
		index  int
	}{
		{"valid, new key", valid, body, nil, 1},
		{"valid, old key", sendgridSigned(t, sendgridOldKey, testNow, body), body, nil, 0},
		{"tampered body", valid, append(slices.Clone(body), ' '), ErrSignatureMismatch, 0},
		{"timestamp changed", with(sendgridTSHeader, unixString(testNow.Add(time.Second))), body, ErrSignatureMismatch, 0},
		{"stale", sendgridSigned(t, sendgridTestKey, testNow.Add(-6*time.Minute), body), body, ErrTimestampOutsideTolerance, 0},
		{"future", sendgridSigned(t, sendgridTestKey, testNow.Add(6*time.Minute), body), body, ErrTimestampOutsideTolerance, 0},
		{"wrong key", sendgridSigned(t, mustECDSAKey(), testNow, body), body, ErrSignatureMismatch, 0},
		{"no signature", with(sendgridSigHeader, ""), body, ErrSignatureMissing, 0},
		{"no timestamp", with(sendgridTSHeader, ""), body, ErrSignatureMissing, 0},
		{"signature not base64", with(sendgridSigHeader, "***"+sig[3:]), body, ErrSignatureMalformed, 0},
		{"signature too long", with(sendgridSigHeader, base64.StdEncoding.EncodeToString(make([]byte, 80))), body, ErrSignatureMalformed, 0},
		{"signature not DER", with(sendgridSigHeader, base64.StdEncoding.EncodeToString([]byte("not a DER sequence"))), body, ErrSignatureMismatch, 0},
		// sendgrid-go ignores bytes after the DER sequence; Inlet does
		// not, so each signature has one accepted spelling.
		{"trailing bytes after DER", with(sendgridSigHeader, base64.StdEncoding.EncodeToString(append(slices.Clone(der), 0))), body, trailing, 0},
		{"timestamp not a number", with(sendgridTSHeader, "17e8"), body, ErrSignatureMalformed, 0},
	}
	for _, tt := range tests {
		req := &Request{Header: tt.header, Body: tt.body, Now: testNow}
		res, err := v.Verify(req)
		if tt.want != nil {
			checkErr(t, err, tt.want, cfg.Secrets, req)
		} else if err != nil {
			t.Errorf("%s: %v", tt.name, err)
		} else if res.EventID != syntheticID(tt.body) || res.EventType != "" || res.SecretIndex != tt.index {
			t.Errorf("%s: %+v", tt.name, res)
		}
		// The oracle agrees (it checks no time window and accepts bytes
		// after the DER sequence).
		if tt.want == ErrTimestampOutsideTolerance || tt.name == "trailing bytes after DER" {
			continue
		}
		key := cfg.Secrets[1]
		if tt.want == nil {
			key = cfg.Secrets[tt.index]
		}
		if got := sendgridAccepts(t, key, tt.header, tt.body); got != (tt.want == nil) {
			t.Errorf("%s: sendgrid-go = %v, Inlet's error %v", tt.name, got, err)
		}
	}
	// A stored batch re-verifies without the time window.
	old := sendgridSigned(t, sendgridTestKey, testNow.Add(-72*time.Hour), body)
	if res, err := Reverify(cfg, old, body, ""); err != nil || res.SecretIndex != 1 {
		t.Errorf("Reverify = %+v, %v", res, err)
	}
	// The source may take the id of the first event.
	c := cfg
	c.EventIDJSON = "0.sg_event_id"
	c.EventTypeJSON = "0.event"
	res, err := mustNew(t, c).Verify(&Request{Header: valid, Body: body, Now: testNow})
	if err != nil || res.EventID != "ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA" || res.EventType != "dropped" {
		t.Errorf("event_id_json 0.sg_event_id: %+v, %v", res, err)
	}
}

// TestSendGridOracle: Inlet's signer (SignTestKey) makes what sendgrid-go
// verifies, and Inlet verifies the standard library's signatures, for the
// sample batch and for given bodies.
func TestSendGridOracle(t *testing.T) {
	t.Parallel()
	cfg := Config{Type: "sendgrid", Secrets: []string{ecdsaPublicB64(sendgridTestKey)}}
	v := mustNew(t, cfg)
	now := time.Now()
	for _, body := range [][]byte{nil, sendgridVectorBody, []byte(`[]`), []byte("[{\"event\":\"open\",\"x\":\"\u00e9\"}]\r\n")} {
		h, b, err := SignTestKey(cfg, ecdsaPrivateB64(t, sendgridTestKey), "evt_sg", body, "", now)
		if err != nil {
			t.Fatal(err)
		}
		if !sendgridAccepts(t, cfg.Secrets[0], h, b) {
			t.Errorf("sendgrid-go rejects Inlet's signature of %q", b)
		}
		if _, err := v.Verify(&Request{Header: h, Body: b, Now: now}); err != nil {
			t.Errorf("Verify(SignTestKey): %v", err)
		}
		std := sendgridSigned(t, sendgridTestKey, now, b)
		if _, err := v.Verify(&Request{Header: std, Body: b, Now: now}); err != nil {
			t.Errorf("Verify(standard library signature): %v", err)
		}
	}
	// The sample carries the id in sg_event_id, for a source that takes it.
	c := cfg
	c.EventIDJSON = "0.sg_event_id"
	h, b, err := SignTestKey(c, ecdsaPrivateB64(t, sendgridTestKey), "evt_sg_id", nil, "", now)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := mustNew(t, c).Verify(&Request{Header: h, Body: b, Now: now}); err != nil || res.EventID != "evt_sg_id" {
		t.Errorf("sample with event_id_json: %+v, %v", res, err)
	}
}

func TestSendGridKeys(t *testing.T) {
	t.Parallel()
	der, _ := x509.MarshalPKIXPublicKey(&sendgridTestKey.PublicKey)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	der384, _ := x509.MarshalPKIXPublicKey(&p384.PublicKey)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	derRSA, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	priv, _ := x509.MarshalPKCS8PrivateKey(sendgridTestKey)
	tests := []struct {
		name, secret, want string
	}{
		{"base64 DER", base64.StdEncoding.EncodeToString(der), ""},
		{"PEM", "-----BEGIN PUBLIC KEY-----\n" + base64.StdEncoding.EncodeToString(der) + "\n-----END PUBLIC KEY-----\n", ""},
		{"SendGrid's vector key", sendgridVectorKey, ""},
		{"not base64", "not*base64", "secrets[0]: not an ECDSA public key: neither base64 nor PEM"},
		{"not DER", base64.StdEncoding.EncodeToString([]byte("some bytes that are not DER")), "secrets[0]: not a DER (PKIX) public key"},
		{"P-384", base64.StdEncoding.EncodeToString(der384), "secrets[0]: is an ECDSA key on P-384, want P-256"},
		{"RSA", base64.StdEncoding.EncodeToString(derRSA), "secrets[0]: is a *rsa.PublicKey public key, want ECDSA P-256"},
		{"private key", base64.StdEncoding.EncodeToString(priv), "secrets[0]: is a private key"},
	}
	for _, tt := range tests {
		checkKeySecret(t, "sendgrid", tt.name, tt.secret, tt.want)
	}
}

// FuzzSendGrid: no input panics, every error carries a sentinel and no
// secret, anything accepted sendgrid-go accepts, and a genuine request
// with a flipped body bit is refused.
func FuzzSendGrid(f *testing.F) {
	f.Add(sendgridVectorSig, sendgridVectorTS, sendgridVectorBody, uint(0))
	f.Add("MAYCAQECAQE=", "1", []byte(`[]`), uint(3))
	f.Add("", "", []byte(nil), uint(1<<20))
	f.Add(strings.Repeat("A", 96), "01", []byte("["), uint(9))
	cfg := Config{Type: "sendgrid", Secrets: []string{ecdsaPublicB64(sendgridTestKey), sendgridVectorKey}}
	v := mustNew(f, cfg)
	f.Fuzz(func(t *testing.T, sig, ts string, body []byte, flip uint) {
		h := sendgridHeaders(sig, ts)
		req := &Request{Header: h, Body: body, IgnoreTolerance: true}
		res, err := v.Verify(req)
		if err == nil {
			if !sendgridAccepts(t, cfg.Secrets[res.SecretIndex], h, body) {
				t.Fatalf("accepted what sendgrid-go rejects: %q %q %q", sig, ts, body)
			}
		} else {
			if Reason(err) == "unknown" {
				t.Fatalf("error without sentinel: %v", err)
			}
			checkErrorSafe(t, err, cfg.Secrets, req)
		}
		if len(body) > 0 {
			genuine := sendgridSigned(t, sendgridTestKey, testNow, body)
			_, err := v.Verify(&Request{Header: genuine, Body: flipBit(body, flip), Now: testNow})
			if !errors.Is(err, ErrSignatureMismatch) {
				t.Fatalf("flipped body: %v", err)
			}
		}
	})
}
