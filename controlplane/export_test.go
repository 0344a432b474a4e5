package controlplane

import "time"

// SetMigrateBounds sets how long each lock wait of the migration lasts, the
// pause after one, and when it gives up (3 s, 5 s and 2 minutes outside
// tests).
func SetMigrateBounds(c *MigrateConfig, lockTimeout, pause, giveUp time.Duration) {
	c.lockTimeout, c.pause, c.giveUp = lockTimeout, pause, giveUp
}
