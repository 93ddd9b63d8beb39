package playground

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/plans"
)

// Preset is a named synthetic scenario: a pattern of arrivals and the tier
// it illustrates. Want, when set, is the outcome the pattern is known for
// (the seed article's worked example), which tests hold the replay to.
type Preset struct {
	Slug        string           `json:"slug"`
	Name        string           `json:"name"`
	Description string           `json:"description"`
	Tier        plans.LimitInput `json:"tier"`
	// Want is the admitted (true) or rejected sequence for the tier as
	// given, or nil.
	Want []bool `json:"want,omitempty"`
	// arrivals builds the pattern from start.
	arrivals func(start time.Time) []Arrival
}

// Arrivals returns the preset's pattern starting at start, all from one
// subject unless the pattern says otherwise.
func (p Preset) Arrivals(start time.Time) []Arrival { return p.arrivals(start) }

// Scenario is the preset ready to replay from start, every algorithm side
// by side.
func (p Preset) Scenario(start time.Time) Scenario {
	return Scenario{Arrivals: p.arrivals(start), Tiers: []plans.LimitInput{p.Tier}}
}

// Presets returns the named scenarios, in the order the playground lists
// them. Each call builds fresh values.
func Presets() []Preset {
	const subject = "key:demo"
	at := func(start time.Time, d time.Duration) Arrival {
		return Arrival{At: start.Add(d), Subject: subject}
	}
	want := make([]bool, 12)
	for i := range want {
		want[i] = i != 10 // 10 admitted, the 11th rejected, the 12th admitted
	}
	return []Preset{
		{
			Slug: "token-bucket-seed",
			Name: "Token bucket: capacity 10, refill 2/s",
			Description: "The seed article's example: 11 requests at once, then one more 0.5 s later. " +
				"The bucket admits 10, rejects the 11th, and has refilled one token for the 12th.",
			Tier: plans.LimitInput{Name: "seed", Algorithm: "token_bucket", Limit: 2, WindowSeconds: 1, Burst: 10, Cost: 1, Mode: "reject"},
			Want: want,
			arrivals: func(start time.Time) []Arrival {
				var out []Arrival
				for range 11 {
					out = append(out, at(start, 0))
				}
				return append(out, at(start, 500*time.Millisecond))
			},
		},
		{
			Slug:        "fixed-window-boundary",
			Name:        "Fixed window: the boundary burst",
			Description: "10 per minute; 10 requests in the last second of one window and 10 in the first second of the next: a fixed window admits all 20 within two seconds, the sliding algorithms do not.",
			Tier:        plans.LimitInput{Name: "boundary", Algorithm: "fixed_window", Limit: 10, WindowSeconds: 60, Cost: 1, Mode: "reject"},
			arrivals: func(start time.Time) []Arrival {
				// Align to a window so the burst straddles its end.
				w := start.Truncate(time.Minute).Add(time.Minute)
				var out []Arrival
				for i := range 10 {
					out = append(out, at(w, -time.Second+time.Duration(i)*50*time.Millisecond))
				}
				for i := range 10 {
					out = append(out, at(w, time.Duration(i)*50*time.Millisecond))
				}
				return out
			},
		},
		{
			Slug:        "steady",
			Name:        "Steady: 3 requests per second for a minute",
			Description: "Evenly spaced traffic above a limit of 2 per second: every algorithm settles at the limit.",
			Tier:        plans.LimitInput{Name: "steady", Algorithm: "sliding_window_counter", Limit: 120, WindowSeconds: 60, Cost: 1, Mode: "reject"},
			arrivals: func(start time.Time) []Arrival {
				var out []Arrival
				for i := range 180 {
					out = append(out, at(start, time.Duration(i)*time.Second/3))
				}
				return out
			},
		},
		{
			Slug:        "bursts",
			Name:        "Bursts: 20 at once every 10 seconds, three callers",
			Description: "Three subjects each send bursts of 20 every 10 seconds for two minutes against 30 per minute with a burst of 15.",
			Tier:        plans.LimitInput{Name: "bursts", Algorithm: "token_bucket", Limit: 30, WindowSeconds: 60, Burst: 15, Cost: 1, Mode: "reject"},
			arrivals: func(start time.Time) []Arrival {
				var out []Arrival
				for b := range 12 {
					for s := range 3 {
						for range 20 {
							out = append(out, Arrival{At: start.Add(time.Duration(b) * 10 * time.Second), Subject: fmt.Sprintf("key:%d", s+1)})
						}
					}
				}
				return out
			},
		},
	}
}

// PresetBySlug returns the named preset.
func PresetBySlug(slug string) (Preset, bool) {
	for _, p := range Presets() {
		if p.Slug == slug {
			return p, true
		}
	}
	return Preset{}, false
}
