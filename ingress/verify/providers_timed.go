package verify

// timedProviders are the HMAC presets that sign a timestamp, the URL or
// other headers besides the body, or sign inside the body.
var timedProviders = []*preset{}
