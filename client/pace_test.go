package client

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// limitResponse is a response carrying Sluice's rate-limit headers.
func limitResponse(status int, limit, remaining int64, reset time.Time, windowSecs int) *http.Response {
	h := http.Header{}
	h.Set("X-RateLimit-Limit", strconv.FormatInt(limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	h.Set("RateLimit-Policy", `"p";q=`+strconv.FormatInt(limit, 10)+`;w=`+strconv.Itoa(windowSecs))
	return &http.Response{StatusCode: status, Header: h}
}

// TestPacer walks the pacer through one learned budget, the probes at the
// end of a window (one too early, one in the new window) and the lead it
// learns from them, on a fake clock.
func TestPacer(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	now := start
	p := newPacer(func() time.Time { return now }, nil)
	reset := start.Add(2 * time.Second) // a 1s window ending at start+1s, rounded up as the middleware does

	probe, d, wait := p.reserve()
	if !probe.probe || d != 0 || wait != nil {
		t.Fatalf("first reserve = %+v, %v, %v; want a probe", probe, d, wait)
	}
	if _, _, wait := p.reserve(); wait == nil {
		t.Fatal("second reserve while the first probe is out did not wait for it")
	}
	p.observe(probe, limitResponse(200, 4, 2, reset, 1))

	for i := range 2 {
		tk, d, wait := p.reserve()
		if tk.probe || d != 0 || wait != nil {
			t.Fatalf("reserve %d within budget = %+v, %v, %v; want to go", i, tk, d, wait)
		}
	}
	_, d, wait = p.reserve()
	if wait != nil || d != time.Second {
		t.Fatalf("reserve with the budget spent = %v, %v; want to wait 1s (reset minus the initial 1s lead)", d, wait)
	}

	now = start.Add(time.Second)
	early, d, _ := p.reserve()
	if !early.probe || d != 0 {
		t.Fatalf("reserve at reset minus lead = %+v, %v; want a probe", early, d)
	}
	p.observe(early, limitResponse(429, 4, 0, reset, 1))
	_, d, _ = p.reserve()
	if d != 250*time.Millisecond {
		t.Fatalf("reserve after an early probe waits %v, want one probe interval (window/limit = 250ms)", d)
	}

	now = start.Add(1250 * time.Millisecond)
	late, d, _ := p.reserve()
	if !late.probe || d != 0 {
		t.Fatalf("reserve after the probe interval = %+v, %v; want a probe", late, d)
	}
	nextReset := reset.Add(time.Second)
	p.observe(late, limitResponse(200, 4, 3, nextReset, 1))
	if want := 875 * time.Millisecond; p.lead != want {
		t.Errorf("learned lead = %v, want %v (reset minus the early probe, minus half an interval)", p.lead, want)
	}
	if p.remaining != 3 || !p.reset.Equal(nextReset) {
		t.Errorf("budget = %d until %v, want 3 until %v", p.remaining, p.reset, nextReset)
	}

	// A stale response from the old window cannot raise the budget.
	p.observe(ticket{sent: now}, limitResponse(200, 4, 4, nextReset, 1))
	if p.remaining != 3 {
		t.Errorf("remaining after a stale higher report = %d, want 3", p.remaining)
	}
}

func TestPacerWithoutHeadersStepsAside(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	p := newPacer(func() time.Time { return now }, nil)
	probe, _, _ := p.reserve()
	p.observe(probe, &http.Response{StatusCode: 200, Header: http.Header{}})
	for i := range 3 {
		tk, d, wait := p.reserve()
		if tk.probe || d != 0 || wait != nil {
			t.Fatalf("reserve %d on a server without rate-limit headers = %+v, %v, %v; want to go", i, tk, d, wait)
		}
	}
}

func TestPacerTransportErrorReleasesTheProbe(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	p := newPacer(func() time.Time { return now }, nil)
	probe, _, _ := p.reserve()
	_, _, wait := p.reserve()
	p.observe(probe, nil)
	select {
	case <-wait:
	default:
		t.Fatal("waiters were not released when the probe failed")
	}
	if next, _, _ := p.reserve(); !next.probe {
		t.Error("after a failed probe the next request is not a new probe")
	}
}

// TestPacerNeverProbesPastTheReset: with a long window the probe interval
// (window/limit) is long, but the next probe still goes at the reported
// reset, when the window has surely ended.
func TestPacerNeverProbesPastTheReset(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	now := start
	p := newPacer(func() time.Time { return now }, nil)
	reset := start.Add(10 * time.Second)
	probe, _, _ := p.reserve()
	p.observe(probe, limitResponse(200, 100, 0, reset, 3600)) // 100 per hour: a 36 s interval
	now = reset.Add(-time.Second)
	early, d, _ := p.reserve()
	if !early.probe || d != 0 {
		t.Fatalf("reserve a second before reset = %+v, %v; want a probe", early, d)
	}
	p.observe(early, limitResponse(429, 100, 0, reset, 3600))
	if _, d, _ := p.reserve(); d != time.Second {
		t.Errorf("after an early probe the pacer waits %v, want 1s (until the reset, not the 36s interval)", d)
	}
}
