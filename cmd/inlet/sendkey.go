package main

import "github.com/inlet-dev/inlet/ingress/verify"

// signTestKey signs a test event of a provider that signs with a key pair
// (the source holds the public key) with the private key of --private-key,
// as SignTest does with a secret.
var signTestKey = verify.SignTestKey

// handshakeTestKey builds the handshake probe of such a provider (Discord's
// PING is signed with the key), as HandshakeTest does.
var handshakeTestKey = verify.HandshakeTestKey
