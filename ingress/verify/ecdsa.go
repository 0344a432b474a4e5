package verify

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// maxECDSASig bounds an ASN.1 DER ECDSA P-256 signature: a SEQUENCE of two
// INTEGERs of at most 33 bytes each.
const maxECDSASig = 72

// ecdsaVerifier checks ECDSA P-256 signatures over the SHA-256 of the
// signed string (SendGrid's Event Webhook: timestamp + body), ASN.1 DER
// encoded, with the public keys in Config.Secrets. Any key may match, so a
// new one can be added before the old one is removed.
type ecdsaVerifier struct {
	sig   *keySig
	keys  []*ecdsa.PublicKey
	ident *identity
}

func newECDSA(p *preset, cfg Config, ident *identity) (*ecdsaVerifier, error) {
	sig, err := newKeySig(p, cfg)
	if err != nil {
		return nil, err
	}
	v := &ecdsaVerifier{sig: sig, ident: ident}
	if v.keys, err = publicKeys(cfg.Secrets, parseECDSAPublicKey); err != nil {
		return nil, err
	}
	return v, nil
}

// parseECDSAPublicKey reads a P-256 public key written as base64 DER
// (PKIX, "SubjectPublicKeyInfo"), as SendGrid shows its verification key,
// or as a PEM "PUBLIC KEY" block. Its errors never quote the key.
func parseECDSAPublicKey(s string) (*ecdsa.PublicKey, error) {
	der, err := decodeDER(s)
	if err != nil {
		return nil, fmt.Errorf("not an ECDSA public key: %w", err)
	}
	key, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		if _, perr := x509.ParsePKCS8PrivateKey(der); perr == nil {
			return nil, errors.New("is a private key: configure the provider's public verification key")
		}
		return nil, errors.New("not a DER (PKIX) public key: want the base64 verification key the provider shows")
	}
	ec, ok := key.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("is a %T public key, want ECDSA P-256", key)
	}
	if ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("is an ECDSA key on %s, want P-256", ec.Curve.Params().Name)
	}
	return ec, nil
}

// decodeDER decodes a PEM block or standard base64 into DER.
func decodeDER(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if block, _ := pem.Decode([]byte(s)); block != nil {
		return block.Bytes, nil
	}
	der, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("neither base64 nor PEM")
	}
	return der, nil
}

func (v *ecdsaVerifier) checkSignature(req *Request) (int, error) {
	return v.sig.check(req, 0, maxECDSASig, len(v.keys), func(i int, msg, sig []byte) bool {
		digest := sha256.Sum256(msg)
		// VerifyASN1 takes exactly one DER SEQUENCE, nothing after it.
		return ecdsa.VerifyASN1(v.keys[i], digest[:], sig)
	})
}

func (v *ecdsaVerifier) Verify(req *Request) (Result, error) {
	index, err := v.checkSignature(req)
	if err != nil {
		return Result{}, err
	}
	return resolveEvent(v.sig.scheme, v.ident, req, index)
}

// parseECDSAPrivateKey reads a P-256 private key for `inlet send`: PKCS #8
// or SEC 1 DER in base64, or a PEM block of either. Its errors never quote
// the key.
func parseECDSAPrivateKey(s string) (*ecdsa.PrivateKey, error) {
	der, err := decodeDER(s)
	if err != nil {
		return nil, fmt.Errorf("private key: %w (want ECDSA P-256 PKCS #8 DER in base64, or PEM)", err)
	}
	var key any
	if key, err = x509.ParsePKCS8PrivateKey(der); err != nil {
		if key, err = x509.ParseECPrivateKey(der); err != nil {
			return nil, errors.New("private key: neither PKCS #8 nor SEC 1 DER")
		}
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("private key: a %T, want ECDSA P-256", key)
	}
	if ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("private key: on %s, want P-256", ec.Curve.Params().Name)
	}
	return ec, nil
}

// signECDSA signs a request of an ECDSA preset with key, the private key
// (see parseECDSAPrivateKey).
func (p *preset) signECDSA(cfg Config, key string, now time.Time, h http.Header, body []byte) ([]byte, error) {
	priv, err := parseECDSAPrivateKey(key)
	if err != nil {
		return nil, err
	}
	k, err := newKeySig(p, cfg)
	if err != nil {
		return nil, err
	}
	msg, err := k.sign(now, h, body)
	if err != nil {
		return nil, err
	}
	digest := sha256.Sum256(msg)
	sig, err := ecdsa.SignASN1(rand.Reader, priv, digest[:])
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	h.Set(k.header, k.encode(sig))
	return body, nil
}
