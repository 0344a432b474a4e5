// Package log is a ready consumer that logs each event it receives, metadata
// only: job and event ids, provider, event type, attempt and body size. It
// never logs the body, a header value or the provider's event id, so its
// output may go wherever the service's logs go. Useful as a first handler
// while wiring a pipeline, and as an audit trail of deliveries.
//
//	consumers.Handler{Name: "log", Func: log.New(logger)}
package log
