package views

import (
	"fmt"
	"strings"
	"time"
)

// chartPalette colours a chart's series in order (SVG fill and stroke
// attributes, which the page's Content-Security-Policy allows where it
// refuses style attributes); the last colour is "other".
var chartPalette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f", "#ff9da7"}

const otherColour = "#9a9a9a"

// ChartSeries is one band of a stacked chart.
type ChartSeries struct {
	Label  string
	Points []int64
	Total  int64
	// Href, when set, narrows the page to this series.
	Href string
}

// StackedChart is bars per bucket, each stacked from its series.
type StackedChart struct {
	TestID string
	Title  string
	Start  time.Time
	Bucket time.Duration
	Series []ChartSeries
}

// colour is series i's colour.
func (c StackedChart) colour(i int) string {
	if c.Series[i].Label == "other" {
		return otherColour
	}
	return chartPalette[i%len(chartPalette)]
}

func (c StackedChart) buckets() int {
	n := 0
	for _, s := range c.Series {
		n = max(n, len(s.Points))
	}
	return n
}

// peak is the tallest stack.
func (c StackedChart) peak() int64 {
	var m int64
	for i := range c.buckets() {
		var sum int64
		for _, s := range c.Series {
			if i < len(s.Points) {
				sum += s.Points[i]
			}
		}
		m = max(m, sum)
	}
	return m
}

// paths is one SVG path per series: its part of every bar.
func (c StackedChart) paths() []string {
	n := c.buckets()
	out := make([]string, len(c.Series))
	if n == 0 {
		return out
	}
	m := float64(max(c.peak(), 1))
	w := chartW / float64(n)
	base := make([]float64, n) // height stacked so far
	for si, s := range c.Series {
		var sb strings.Builder
		for i := range n {
			if i >= len(s.Points) || s.Points[i] == 0 {
				continue
			}
			h := float64(s.Points[i]) / m * chartH
			y := chartH - base[i] - h
			fmt.Fprintf(&sb, "M%.1f %.1fh%.1fv%.1fh-%.1fz", float64(i)*w, y, max(w-0.5, 0.5), h, max(w-0.5, 0.5))
			base[i] += h
		}
		out[si] = sb.String()
	}
	return out
}

// LatencyChart is the p50, p95 and p99 latency per bucket.
type LatencyChart struct {
	TestID        string
	Start         time.Time
	Bucket        time.Duration
	P50, P95, P99 []time.Duration
}

// peak is the slowest p99.
func (c LatencyChart) peak() time.Duration {
	var m time.Duration
	for _, d := range c.P99 {
		m = max(m, d)
	}
	return m
}

// line is a polyline through the buckets that have a value.
func (c LatencyChart) line(ds []time.Duration) string {
	if len(ds) == 0 {
		return ""
	}
	m := float64(max(c.peak(), time.Millisecond))
	w := chartW / float64(len(ds))
	var sb strings.Builder
	move := true
	for i, d := range ds {
		if d == 0 {
			move = true
			continue
		}
		cmd := "L"
		if move {
			cmd, move = "M", false
		}
		fmt.Fprintf(&sb, "%s%.1f %.1f", cmd, float64(i)*w+w/2, chartH-float64(d)/m*chartH)
	}
	return sb.String()
}

// Millis shows a latency in milliseconds ("—" for none).
func Millis(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	ms := float64(d) / float64(time.Millisecond)
	if ms < 10 {
		return fmt.Sprintf("%.1f ms", ms)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

func chartRangeStart(t time.Time, bucket time.Duration) string {
	if bucket >= 24*time.Hour {
		return t.UTC().Format("Jan 2")
	}
	return t.UTC().Format("Jan 2 15:04")
}
