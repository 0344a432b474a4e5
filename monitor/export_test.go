package monitor

import "context"

// Show reads a setting on the Leader's own connection (nil before Leading).
func (l *Leader) Show(ctx context.Context, name string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var v string
	err := l.conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}
