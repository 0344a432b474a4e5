package main

import (
	"errors"
	"net/http"
	"time"

	"github.com/inlet-dev/inlet/ingress/verify"
)

// errKeySigning is what --private-key answers until signing with a private
// key is wired in.
var errKeySigning = errors.New("--private-key: not supported yet: signing with a provider's private key (discord, sendgrid) is not built into this inlet")

// signTestKey signs a test event of a provider that signs with a key pair
// (the source holds the public key) with the private key of --private-key,
// as SignTest does with a secret.
//
// Wire: signTestKey = verify.SignTestKey.
var signTestKey = func(_ verify.Config, _, _ string, _ []byte, _ string, _ time.Time) (http.Header, []byte, error) {
	return nil, nil, errKeySigning
}

// handshakeTestKey builds the handshake probe of such a provider (Discord's
// PING is signed with the key), as HandshakeTest does.
//
// Wire: to the verify function that signs HandshakeTest's probe with a
// private key.
var handshakeTestKey = func(_ verify.Config, _, _ string, _ time.Time) (*verify.HandshakeProbe, error) {
	return nil, errKeySigning
}
