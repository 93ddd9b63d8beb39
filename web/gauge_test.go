package web

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/views"
)

// TestGaugeInEachAlgorithmsTerms: what a person reads for each kind of
// limit, rendered: a concurrency limit says how many requests are in
// flight and that it frees as they end, never "resets in 0s".
func TestGaugeInEachAlgorithmsTerms(t *testing.T) {
	for _, tt := range []struct {
		name  string
		layer enforce.LayerResult
		text  string // the gauge's words
		reset string // the "Resets in" cell
	}{
		{"Window", enforce.LayerResult{Limit: enforce.Limit{Algorithm: enforce.FixedWindow, Limit: 60}, Remaining: 50, ResetAfter: 30 * time.Second},
			"10 of 60 requests used in the window", "30s"},
		{"TokenBucket", enforce.LayerResult{Limit: enforce.Limit{Algorithm: enforce.TokenBucket, Limit: 600, Burst: 50}, Remaining: 50},
			"50 of 50 tokens left", "0s"},
		{"LeakyBucket", enforce.LayerResult{Limit: enforce.Limit{Algorithm: enforce.LeakyBucket, Limit: 10, Burst: 4}, Remaining: 5},
			"5 of 5 queue places free", "0s"},
		{"Concurrency", enforce.LayerResult{Limit: enforce.Limit{Algorithm: enforce.Concurrency, Limit: 4}, Remaining: 1},
			"3 of 4 requests in flight", "as requests end"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := gaugeOf(tt.layer)
			if got := render(t, views.GaugeText(g, "usage")); got != tt.text {
				t.Errorf("gauge reads %q, want %q", got, tt.text)
			}
			if got := render(t, views.ResetText(g, tt.layer.ResetAfter)); got != tt.reset {
				t.Errorf("reset cell reads %q, want %q", got, tt.reset)
			}
		})
	}
}

// render is c's text with the tags taken out and spaces collapsed.
func render(t *testing.T, c templ.Component) string {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	inTag := false
	for _, r := range buf.String() {
		switch {
		case r == '<':
			inTag = true
		case r == '>':
			inTag = false
		case !inTag:
			out.WriteRune(r)
		}
	}
	return strings.Join(strings.Fields(out.String()), " ")
}
