package monitor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
)

// Leader elects one replica among those on a database: the one whose
// connection holds a session advisory lock. Its connection is its own, not
// one of a pool's, so the lock is released exactly when that connection
// ends: by Close, or by the process or the network dying.
type Leader struct {
	cfg *pgx.ConnConfig

	mu   sync.Mutex
	conn *pgx.Conn // non-nil while leading
}

// NewLeader elects over connections made with cfg (a pool's
// Config().ConnConfig will do). Nothing connects until Leading.
func NewLeader(cfg *pgx.ConnConfig) *Leader { return &Leader{cfg: cfg.Copy()} }

var tryReporterLockSQL = schema.Query("TryReporterLock")

// Leading reports whether this replica leads, taking the lock when it is
// free. A leader whose connection was lost (and with it the lock) finds out
// here and tries again like any other replica.
func (l *Leader) Leading(ctx context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		if err := l.conn.Ping(ctx); err == nil {
			return true, nil
		}
		l.closeLocked()
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return false, fmt.Errorf("leader election: connect to %s: %w", l.cfg.Host, err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, tryReporterLockSQL).Scan(&ok); err != nil {
		conn.Close(context.Background())
		return false, fmt.Errorf("leader election: try the reporter lock: %w", err)
	}
	if !ok {
		conn.Close(context.Background())
		return false, nil
	}
	l.conn = conn
	return true, nil
}

// Close gives up the lead, if held.
func (l *Leader) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closeLocked()
}

func (l *Leader) closeLocked() {
	if l.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.conn.Close(ctx)
		l.conn = nil
	}
}
