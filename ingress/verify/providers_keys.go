package verify

// keyProviders are the presets over the other schemes: public-key
// signatures (Ed25519, ECDSA), token compare, and Standard Webhooks.
var keyProviders = []*preset{}
