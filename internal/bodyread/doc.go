// Package bodyread reads webhook request bodies within a memory budget
// shared by every request of a server (ingress.max_inflight_bytes,
// relay.max_inflight_bytes): room for a body's head is reserved before it is
// read, the rest a step at a time as it arrives, and requests past the budget
// wait unread (TCP holds their senders back) for a bounded time. A sender
// that declares a large body and trickles it holds about what it sent. A
// request's headers are held within the budget with its head, and those
// waiting for room are bounded too (half the budget of their headers; past
// it a request is refused at once), so requests that send headers and no
// body cannot grow the memory held for them.
package bodyread
