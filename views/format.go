package views

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

func statusTitle(status int) string {
	return strconv.Itoa(status) + " " + http.StatusText(status)
}

// Duration renders a window or a wait the way an operator writes it: "60s",
// "1h", "1h30m", "2d", "3d4h". From a day up it is in days and hours,
// rounded to the hour: a month's reset 743h59m17s away reads "31d".
func Duration(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d >= day:
		d = d.Round(time.Hour)
		out := strconv.FormatInt(int64(d/day), 10) + "d"
		if h := d % day / time.Hour; h > 0 {
			out += strconv.FormatInt(int64(h), 10) + "h"
		}
		return out
	}
	d = d.Round(time.Second)
	h, m, s := d/time.Hour, (d%time.Hour)/time.Minute, (d%time.Minute)/time.Second
	out := ""
	if h > 0 {
		out += fmt.Sprintf("%dh", h)
	}
	if m > 0 {
		out += fmt.Sprintf("%dm", m)
	}
	if s > 0 {
		out += fmt.Sprintf("%ds", s)
	}
	return out
}

// Time renders an optional timestamp in UTC, or a dash.
func Time(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04")
}

// Count renders n of a noun, singular for one: "1 developer", "2 developers".
func Count(n int, singular, plural string) string {
	if n == 1 {
		return "1 " + singular
	}
	return strconv.Itoa(n) + " " + plural
}

// Int renders a count.
func Int(n int64) string { return strconv.FormatInt(n, 10) }

// Expiry renders when a key stops working. A key set to expire on a day
// works through that day and stops at the next midnight UTC; showing that
// instant ("Dec 3 00:00") read as a day late, so it is shown as the day.
func Expiry(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "never"
	}
	u := t.UTC()
	if u.Equal(u.Truncate(24 * time.Hour)) {
		return "end of " + u.Add(-24*time.Hour).Format(time.DateOnly)
	}
	return Time(t)
}

// PreviousSecret says until when a rotated key's previous secret works, or
// "" when it no longer does.
func PreviousSecret(until *time.Time, now time.Time) string {
	if until == nil || !until.After(now) {
		return ""
	}
	return "previous secret works until " + Time(until) + " UTC"
}

// WindowSecondsText is a tier's window in seconds, or a dash for the
// algorithms that have none: a quota renews by its period, and a
// concurrency limit counts requests in flight.
func WindowSecondsText(a enforce.Algorithm, w time.Duration) string {
	if a == enforce.Quota || a == enforce.Concurrency {
		return "—"
	}
	return Int(int64(w.Seconds()))
}

// limitRate is a tier's figures in words: "100 per day", "4 in flight",
// "10 per 1m".
func limitRate(l plans.Limit) string {
	switch l.Algorithm {
	case enforce.Quota:
		return Int(l.Limit) + " per " + string(l.Period)
	case enforce.Concurrency:
		return Int(l.Limit) + " in flight"
	}
	return Int(l.Limit) + " per " + Duration(l.Window)
}

// BurstText is what a tier's burst means for its algorithm: a token
// bucket's capacity (0 is the limit, as the engine and the docs take it), a
// leaky bucket's queue, nothing for the windows. Showing the stored 0 made
// the table and the docs disagree.
func BurstText(a enforce.Algorithm, limit, burst int64) string {
	switch a {
	case enforce.TokenBucket:
		if burst == 0 {
			burst = limit
		}
		return Int(burst)
	case enforce.LeakyBucket:
		return Int(burst) + " queued"
	}
	return "—"
}

// CountPerText says whose state a tier counts, for a person.
func CountPerText(countPer string) string {
	if countPer == "developer" {
		return "per developer"
	}
	return "per key"
}

// archivedMark follows an archived plan's name where plans are chosen.
func archivedMark(p plans.Plan) string {
	if p.Offered() {
		return ""
	}
	return ", archived"
}

// UpgradeOutcome says what became of an upgrade request, for a person.
func UpgradeOutcome(q plans.UpgradeRequest) string {
	switch q.Status {
	case plans.UpgradeApproved:
		return "approved " + Time(q.DecidedAt)
	case plans.UpgradeRefused:
		return "refused " + Time(q.DecidedAt)
	}
	return "waiting for an operator"
}

// ScopeSummary says in a few words what a key's scope allows ("read-only ·
// 2 routes · 1 address range"), or "" for a key that may do anything.
func ScopeSummary(k apikeys.Key) string {
	var parts []string
	if k.ReadOnly {
		parts = append(parts, "read-only")
	}
	if n := len(k.AllowedRoutes); n > 0 {
		parts = append(parts, counted(n, "route", "routes"))
	}
	if n := len(k.AllowedCIDRs); n > 0 {
		parts = append(parts, counted(n, "address range", "address ranges"))
	}
	return strings.Join(parts, " · ")
}

// counted is "1 route" or "3 routes".
func counted(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
