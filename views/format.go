package views

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

func statusTitle(status int) string {
	return strconv.Itoa(status) + " " + http.StatusText(status)
}

// Duration renders a window or a wait the way an operator writes it: "60s",
// "1h", "1h30m", "2d".
func Duration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
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

// Int renders a count.
func Int(n int64) string { return strconv.FormatInt(n, 10) }
