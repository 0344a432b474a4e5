package reporter

import "time"

// SetCursorCheck sets how often the reporter c configures asks the control
// plane for its cursor (a minute outside tests).
func SetCursorCheck(c *Config, every time.Duration) { c.cursorCheck = every }
