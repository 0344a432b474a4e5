// Package dashboard is the operator's web dashboard, served under /dashboard/
// on the admin listener (package admin mounts it; same token as the admin
// API). It is server-rendered HTML (html/template) with no script at all and
// no external asset: one stylesheet served by itself, and the event-rate plot
// drawn as inline SVG on the server.
//
// Pages:
//
//	GET  /dashboard/             events per source per hour over the last 24h, the last
//	                             reconcile run of each source and listing scope (the scopes
//	                             not run for 24h before their source's newest run apart), source
//	                             activity (silent sources flagged), handlers with lag and failure
//	                             rate, dead letters with a Replay button, recent events
//	GET  /dashboard/events       the event log, newest first (?source= &before=)
//	GET  /dashboard/events/{id}  one event: metadata, headers, the body as escaped text
//	                             (hex when it is not UTF-8), jobs with their attempts
//	POST /dashboard/replay       re-queue one job (admin.Replay) while it has the status and replay
//	                             count shown, then back with a message
//	GET  /dashboard/login        the token form; POST checks it and starts a session
//	POST /dashboard/logout       ends the session
//
// # Authentication
//
// Browsers cannot send a bearer header when they navigate, so the login form
// takes the admin token once (compared in constant time, as the API does) and
// sets a session cookie: a random id kept in this process's memory (a
// restart logs everyone out), never the token, HttpOnly, SameSite=Strict,
// Path=/dashboard/, Secure over TLS (this server's, or a TLS-terminating
// proxy's that sends X-Forwarded-Proto or Forwarded proto=https). A script's
// request with a valid Authorization: Bearer header passes too (no dashboard
// cookie, not a browser navigation); a wrong one counts against the
// AuthLimiter as on the admin API. From a browser the header is not read:
// behind a live session cookie, with a stale one (expired, or from before a
// restart), or on a navigation (Sec-Fetch-Mode: navigate or Sec-Fetch-Dest:
// document), since a browser cannot send a bearer itself and an SSO proxy in
// front may send its own with every request. Without a session, pages
// redirect to the login form (a form post is a 401 whose page links to it).
//
// The replay form is a POST protected against cross-site requests three
// ways: the SameSite=Strict cookie, a per-session CSRF token in the form, and
// an Origin (or Referer) that must name this host. Every response carries a
// Content-Security-Policy that allows no script, frame or foreign resource.
//
// Silent-source flags come from a [Silence] implementation (the silence
// detector) when one is configured; without one the dashboard shows each source's last event from
// the database and flags nothing.
package dashboard
