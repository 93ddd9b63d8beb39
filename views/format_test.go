package views

import (
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for _, tt := range []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{-time.Second, "0s"},
		{250 * time.Millisecond, "250ms"},
		{time.Second, "1s"},
		{90 * time.Second, "1m30s"},
		{time.Hour, "1h"},
		{time.Hour + 1500*time.Millisecond, "1h2s"},
		{48 * time.Hour, "2d"},
		{25 * time.Hour, "1d1h"},
		{743*time.Hour + 59*time.Minute + 17*time.Second, "31d"},
		{30*24*time.Hour + 5*time.Hour + 20*time.Minute, "30d5h"},
		{23*time.Hour + 59*time.Minute, "23h59m"},
	} {
		if got := Duration(tt.in); got != tt.want {
			t.Errorf("Duration(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestNavByRole(t *testing.T) {
	for _, tt := range []struct {
		name   string
		viewer *Viewer
		want   []string
	}{
		{"Anonymous", nil, []string{"docs", "signin", "signup"}},
		{"Operator", &Viewer{Role: "operator"}, []string{"usage", "history", "requests", "analytics", "services", "plans", "playground", "keys", "developers", "orgs", "operators", "tokens", "audit", "docs"}},
		{"Developer", &Viewer{Role: "developer"}, []string{"app", "app-history", "app-requests", "app-analytics", "app-keys", "app-plan", "app-alerts", "app-org", "docs"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			items := Nav(tt.viewer)
			if len(items) != len(tt.want) {
				t.Fatalf("%d items, want %d", len(items), len(tt.want))
			}
			for i, it := range items {
				if it.Section != tt.want[i] || it.Href == "" || it.Label == "" {
					t.Errorf("item %d = %+v, want section %q with a label and a link", i, it, tt.want[i])
				}
			}
		})
	}
}
