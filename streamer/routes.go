package streamer

import (
	"strings"
	"time"

	"github.com/inlet-dev/inlet/consumers/bus"
)

// jobRoute is one scope of a scoped consumer role of a shared handler
// (ListJobRoutes): globs over the job's source and event type.
type jobRoute struct {
	role, provider, eventType string
}

// routesRefresh is how often the recount reads the route table: a role's
// consumers starting are routed within it (they read their role's topic
// before they say their role), and the table costs a recount (every 100 ms
// by default) nothing in between.
const routesRefresh = time.Second

// jobRoutes is the table of the last recount (ListJobRoutes), replaced whole
// by each recount, never changed in place.
type jobRoutes map[string][]jobRoute

// routeTable returns the route table of the last recount.
func (f *inFlight) routeTable() jobRoutes {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.routes
}

// topicOf is the topic a job of handler from provider with eventType is
// published on: for a handler whose consumers run as two roles or more,
// one of them scoped, the topic of the first route (ListJobRoutes: roles
// with a live consumer first, scoped before unrestricted, then by name)
// whose scope covers the job, which only that role's consumers read; else,
// and when none covers it, the handler's own. Published on the handler's
// topic alone, a shared handler's references reached either role's
// consumers, which could not see the other's jobs and left their leases
// to expire as spent attempts (review helper-163).
func (rt jobRoutes) topicOf(handler, provider, eventType string) string {
	for _, r := range rt[handler] {
		if globMatch(r.provider, provider) && globMatch(r.eventType, eventType) {
			return bus.RoleTopic(handler, r.role)
		}
	}
	return bus.Topic(handler)
}

// globMatch reports whether s matches pattern, where '*' matches any run of
// characters and nothing else is special: the scopes' globs, which the
// database matches through their LIKE forms (038_consumer_role_scopes).
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return s == pattern
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

// hasTopic reports whether t is the topic of a route in rt, or the own topic
// of a handler rt routes.
func (rt jobRoutes) hasTopic(t string) bool {
	for h, routes := range rt {
		if t == bus.Topic(h) {
			return true
		}
		for _, r := range routes {
			if t == bus.RoleTopic(h, r.role) {
				return true
			}
		}
	}
	return false
}
