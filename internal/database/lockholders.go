package database

import (
	"fmt"
	"strings"
	"time"
)

// LockHolder is a session holding a lock another one waited for in vain,
// as read from pg_locks and pg_stat_activity (inlet retention's periods,
// the control plane's migrations).
type LockHolder struct {
	PID         int
	Application string
	Role        string
	// State and XactSeconds are empty and negative when the reading role
	// may not see them (no pg_read_all_stats).
	State       string
	XactSeconds float64
	Modes       string
}

// DescribeLockHolders is what an operator told "its locks were not
// granted" needs next, to append to that message: ", held by pid 4242
// (inlet-streamer, role inlet_streamer, idle in transaction, in a
// transaction for 31s, AccessShareLock)", the holders separated by "; ".
// Empty for none.
func DescribeLockHolders(holders []LockHolder) string {
	if len(holders) == 0 {
		return ""
	}
	held := make([]string, 0, len(holders))
	for _, h := range holders {
		var what []string
		if h.Application != "" {
			what = append(what, h.Application)
		}
		if h.Role != "" {
			what = append(what, "role "+h.Role)
		}
		switch {
		case h.State != "" && h.XactSeconds >= 0:
			what = append(what, fmt.Sprintf("%s, in a transaction for %s", h.State, time.Duration(h.XactSeconds*float64(time.Second)).Round(time.Millisecond)))
		case h.State != "":
			what = append(what, h.State)
		}
		what = append(what, h.Modes)
		held = append(held, fmt.Sprintf("pid %d (%s)", h.PID, strings.Join(what, ", ")))
	}
	return ", held by " + strings.Join(held, "; ")
}
