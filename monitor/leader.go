package monitor

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema/queries"
)

// Leader elects one replica among those on a database: the one whose
// connection holds a session advisory lock. The connection is its own, not
// one of a pool's, so the lock is released exactly when that connection
// ends: by Close, or by the process or the network dying. A replica that
// does not lead keeps its connection and tries the lock again on it.
type Leader struct {
	cfg *pgx.ConnConfig
	key string // the lock's name; "": the monitor reporter's

	mu      sync.Mutex
	conn    *pgx.Conn
	leading bool // conn holds the lock
}

// NewLeader elects over a connection made with cfg (a pool's
// Config().ConnConfig will do), named ElectionAppName in pg_stat_activity.
// Nothing connects until Leading.
func NewLeader(cfg *pgx.ConnConfig) *Leader {
	c := cfg.Copy()
	c.RuntimeParams = maps.Clone(c.RuntimeParams)
	if c.RuntimeParams == nil {
		c.RuntimeParams = map[string]string{}
	}
	c.RuntimeParams["application_name"] = ElectionAppName
	// The lock lives as long as the server's end of the connection. A
	// leader cut off by the network (its host gone, a partition) sends no
	// FIN, and without keepalives the server keeps that session, and the
	// lock, for the operating system's keepalive time (2 h on Linux): no
	// replica could lead, and no alert be sent, meanwhile. With these the
	// server drops it within about 30 s (ignored over a Unix socket, where
	// a dead peer is seen at once). Settings given in the URL win.
	for name, v := range electionKeepalives {
		if _, set := c.RuntimeParams[name]; !set {
			c.RuntimeParams[name] = v
		}
	}
	return &Leader{cfg: c}
}

// electionKeepalives are the server's TCP keepalive settings on a Leader's
// connection: a first probe after 15 s idle, then every 5 s, the session
// dropped after 3 unanswered.
var electionKeepalives = map[string]string{
	"tcp_keepalives_idle":     "15",
	"tcp_keepalives_interval": "5",
	"tcp_keepalives_count":    "3",
}

// NewNamedLeader elects over its own lock, named key, so the replica that
// runs one job (inlet:reconcile) need not be the monitor's reporter.
func NewNamedLeader(cfg *pgx.ConnConfig, key string) *Leader {
	l := NewLeader(cfg)
	l.key = key
	return l
}

// ElectionAppName is the application_name of a Leader's connection.
const ElectionAppName = "inlet monitor election"

// Leading reports whether this replica leads, taking the lock when it is
// free. A leader whose connection was lost (and with it the lock) finds out
// here, reconnects and tries again like any other replica.
func (l *Leader) Leading(ctx context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if l.conn != nil && l.leading {
		if err := l.conn.Ping(ctx); err == nil {
			return true, nil
		}
		l.closeLocked() // the lock went with the connection
	}
	// A follower's connection may have been dropped since its last try (a
	// database restart): its failure is the connection's, so the lock is
	// tried once more on a fresh one before the election counts as failed
	// (callers then report from every replica).
	fresh := false
	for {
		if l.conn == nil || l.conn.IsClosed() {
			conn, err := pgx.ConnectConfig(ctx, l.cfg)
			if err != nil {
				return false, fmt.Errorf("leader election: connect to %s: %w", l.cfg.Host, err)
			}
			l.conn, fresh = conn, true
		}
		// Tried only while not holding it: a session lock taken twice is
		// held twice.
		var leading bool
		var err error
		if l.key == "" {
			leading, err = queries.New(l.conn).TryReporterLock(ctx)
		} else {
			leading, err = queries.New(l.conn).TryNamedLock(ctx, l.key)
		}
		if err == nil {
			l.leading = leading
			return l.leading, nil
		}
		l.closeLocked()
		if fresh || ctx.Err() != nil {
			return false, fmt.Errorf("leader election: try the reporter lock: %w", err)
		}
	}
}

// Close gives up the lead, if held, and the connection.
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
	}
	l.conn, l.leading = nil, false
}
