package enforce

import (
	"strconv"
	"time"
)

// WindowText names a window the way people say it ("60s" and "1h0m0s" are
// clumsy): "second", "minute", "hour", "day", then "2 days", "5 hours",
// "5 minutes" or, for anything else, whole seconds rounded up. Rejection
// messages and the generated docs both use it.
func WindowText(w time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case w == time.Second:
		return "second"
	case w == time.Minute:
		return "minute"
	case w == time.Hour:
		return "hour"
	case w == day:
		return "day"
	case w > 0 && w%day == 0:
		return strconv.FormatInt(int64(w/day), 10) + " days"
	case w > 0 && w%time.Hour == 0:
		return strconv.FormatInt(int64(w/time.Hour), 10) + " hours"
	case w > 0 && w%time.Minute == 0:
		return strconv.FormatInt(int64(w/time.Minute), 10) + " minutes"
	default:
		return strconv.FormatInt(int64(max(w+time.Second-1, 0)/time.Second), 10) + " seconds"
	}
}
