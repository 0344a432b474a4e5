package ingress

// Queued is how many events wait for a committer of g: a test orders its
// requests by it.
func (g *GroupStore) Queued() int { return g.group.Queued() }
