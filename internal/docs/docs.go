// Package docs generates the developer documentation of rate limits from the
// plans themselves, so the docs cannot drift from what is enforced: one Model
// built by Build, rendered as HTML (views/docs.templ), Markdown (Markdown) and
// an OpenAPI 3.1 document of the sample API (OpenAPI).
//
// The example headers and bodies are not written by hand either: Build runs
// each plan's limits through the real enforcement middleware, over an
// in-memory store on a fixed clock, and records what it answers.
package docs

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

// Options configures Build.
type Options struct {
	// BaseURL is where the API is served, e.g. "https://api.example.com",
	// used in curl examples and the OpenAPI servers list ("" means
	// "http://localhost:8080").
	BaseURL string
	// StatusBaseURL is where GET /api/rate-limit-status is served, the
	// portal itself ("" means BaseURL): a service the portal's reverse
	// proxy serves has a BaseURL of its own.
	StatusBaseURL string
	// YourPlan is the slug of the signed-in developer's plan, shown first
	// and marked; "" for a visitor.
	YourPlan string
	// Title names the API in the OpenAPI document ("" means "Sluice sample
	// API").
	Title string
	// Endpoints are the operations documented (nil means SampleAPI()); a
	// declared service's come from RouteEndpoints.
	Endpoints []Endpoint
	// Instances is how many instances of the API share its counters
	// (PORTAL_INSTANCES; zero means one): a leased or local limit states
	// its worst case with it.
	Instances int
	// Now is the moment the examples are computed at (zero means
	// 2026-01-01T00:00:00Z, so that output is stable); its Unix time appears in
	// the example X-RateLimit-Reset headers.
	Now time.Time
}

// Model is everything the docs say, in the order they say it.
type Model struct {
	BaseURL string
	// Title names the API documented.
	Title string
	// Plans are the plans compared: every public plan, and the caller's own
	// plan even when it is not public, the caller's first.
	Plans []PlanDoc
	// Your is the caller's plan, nil for a visitor or when YourPlan names no
	// plan.
	Your *PlanDoc
	// Endpoints are the sample API's operations, each with every compared
	// plan's limits on it.
	Endpoints []EndpointDoc
	// Status describes GET /api/rate-limit-status with an example answer.
	Status StatusDoc
	// Algorithms explains each algorithm any compared plan uses, in the
	// order of enforce.Algorithms.
	Algorithms []AlgorithmDoc
}

// PlanDoc is one plan as the docs show it.
type PlanDoc struct {
	Slug, Name, Description string
	IsDefault, IsAnonymous  bool
	// Yours marks the signed-in developer's plan.
	Yours bool
	// Global are the plan-wide limits: they apply to every request.
	Global []LimitDoc
}

// EndpointDoc is one operation with its limits under every compared plan.
type EndpointDoc struct {
	Endpoint
	// Plans holds one entry per Model.Plans entry, in the same order.
	Plans []EndpointPlan
	// Curl is a curl command calling the endpoint with a key.
	Curl string
}

// EndpointPlan is what one plan allows on one endpoint.
type EndpointPlan struct {
	Plan string // slug
	// Yours marks the signed-in developer's plan.
	Yours bool
	// Limits are the limits a request to the endpoint spends: the endpoint's
	// tiers first, then the plan-wide limits.
	Limits []LimitDoc
	// Examples are real responses of the middleware under these limits;
	// nil for an endpoint without limits.
	Examples *Examples
}

// LimitDoc is one limit in the docs' words.
type LimitDoc struct {
	// Policy is the name in RateLimit-Policy and the 429 body, e.g. "pro-search".
	Policy    string
	Route     string
	Algorithm enforce.Algorithm
	Mode      enforce.Mode
	Limit     int64
	Window    time.Duration
	Burst     int64
	Cost      int64
	// Period is a quota's renewal period (day, month, year); "" otherwise.
	Period enforce.Period
	// CountPer is whose state the limit counts: "key" (each of your keys
	// on its own) or "developer" (all your keys together).
	CountPer string
	// CountWhen is "success" or "error" when only those responses count,
	// "" when every one does; CostHeader the response header whose value
	// is a request's cost ("" for none).
	CountWhen, CostHeader string
	// Rate reads "100 per minute"; with a cost above 1 it goes on
	// "; each request costs 2, so 50 requests".
	Rate string
	// WindowText reads "minute", "5 minutes".
	WindowText string
	// Explanation says in plain words how the algorithm treats you, with
	// this limit's numbers, including what a burst does.
	Explanation string
	// OverLimit says what you get past the limit in this limit's mode.
	OverLimit string
	// Precision is how exactly the limit is enforced across the API's
	// instances: exact, leased or local.
	Precision enforce.Precision
	// PrecisionText says, for a leased or local limit, what that means for
	// the caller (what the headers' Remaining is) and the stated worst
	// case; "" for an exact one, which is what every limit was before.
	PrecisionText string
}

// AlgorithmDoc explains one algorithm in general.
type AlgorithmDoc struct {
	Algorithm enforce.Algorithm
	Title     string
	Text      string
}

// StatusDoc describes the status endpoint with an example answer for the
// first compared plan.
type StatusDoc struct {
	Curl    string
	Example Response
}

// Build turns plans into the docs model. Plans that are neither public nor
// the caller's are left out.
func Build(all []plans.Plan, opts Options) (Model, error) {
	if opts.BaseURL == "" {
		opts.BaseURL = "http://localhost:8080"
	}
	if opts.Now.IsZero() {
		opts.Now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if opts.Title == "" {
		opts.Title = "Sluice sample API"
	}
	if opts.Endpoints == nil {
		opts.Endpoints = SampleAPI()
	}
	m := Model{BaseURL: opts.BaseURL, Title: opts.Title}
	var shown []plans.Plan
	for _, p := range all {
		if p.IsPublic || (opts.YourPlan != "" && p.Slug == opts.YourPlan) {
			// Shadow tiers are tried in the dark: never documented.
			p.Limits = slices.DeleteFunc(slices.Clone(p.Limits), func(l plans.Limit) bool { return l.Mode == enforce.ModeShadow })
			shown = append(shown, p)
		}
	}
	// The caller's plan first; otherwise keep the operators' order.
	slices.SortStableFunc(shown, func(a, b plans.Plan) int {
		return boolRank(b.Slug == opts.YourPlan && opts.YourPlan != "") - boolRank(a.Slug == opts.YourPlan && opts.YourPlan != "")
	})
	used := map[enforce.Algorithm]bool{}
	for _, p := range shown {
		pd := PlanDoc{Slug: p.Slug, Name: p.Name, Description: p.Description,
			IsDefault: p.IsDefault, IsAnonymous: p.IsAnonymous, Yours: opts.YourPlan != "" && p.Slug == opts.YourPlan}
		for _, l := range p.Limits {
			used[l.Algorithm] = true
			if l.Route == "" {
				pd.Global = append(pd.Global, limitDoc(p.Slug, l, opts.Instances))
			}
		}
		m.Plans = append(m.Plans, pd)
	}
	for i := range m.Plans {
		if m.Plans[i].Yours {
			m.Your = &m.Plans[i]
		}
	}
	for _, a := range enforce.Algorithms {
		if used[a] {
			m.Algorithms = append(m.Algorithms, algorithmDoc(a))
		}
	}
	for _, e := range opts.Endpoints {
		ed := EndpointDoc{Endpoint: e, Curl: curl(opts.BaseURL, e)}
		for _, p := range shown {
			ep := EndpointPlan{Plan: p.Slug, Yours: opts.YourPlan != "" && p.Slug == opts.YourPlan}
			if e.Limited {
				for _, l := range p.Limits {
					if l.Route == e.Route {
						ep.Limits = append(ep.Limits, limitDoc(p.Slug, l, opts.Instances))
					}
				}
				for _, l := range p.Limits {
					if l.Route == "" {
						ep.Limits = append(ep.Limits, limitDoc(p.Slug, l, opts.Instances))
					}
				}
				if len(ep.Limits) > 0 {
					ex, err := examples(p, e, opts.Now)
					if err != nil {
						return Model{}, fmt.Errorf("docs: examples of plan %s on %s: %w", p.Slug, e.Route, err)
					}
					ep.Examples = &ex
				}
			}
			ed.Plans = append(ed.Plans, ep)
		}
		m.Endpoints = append(m.Endpoints, ed)
	}
	m.Status.Curl = curl(cmp.Or(opts.StatusBaseURL, opts.BaseURL), SampleAPI()[len(SampleAPI())-1])
	if len(shown) > 0 {
		st, err := statusExample(shown[0], opts.Now)
		if err != nil {
			return Model{}, fmt.Errorf("docs: status example of plan %s: %w", shown[0].Slug, err)
		}
		m.Status.Example = st
	}
	return m, nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

func limitDoc(planSlug string, l plans.Limit, instances int) LimitDoc {
	cost := max(l.Cost, 1)
	mode := l.Mode
	if mode == "" {
		mode = enforce.ModeReject
	}
	d := LimitDoc{
		Policy: plans.PolicyName(planSlug, l.Name), Route: l.Route, Algorithm: l.Algorithm, Mode: mode,
		Limit: l.Limit, Window: l.Window, Burst: l.Burst, Cost: cost, WindowText: enforce.WindowText(l.Window),
		Period: l.Period, CountPer: l.Input().CountPer, Precision: l.Precision.OrExact(),
	}
	if l.Algorithm == enforce.Quota {
		d.WindowText = string(l.Period)
	}
	d.Rate = fmt.Sprintf("%d per %s", l.Limit, d.WindowText)
	if l.Algorithm == enforce.Concurrency {
		d.WindowText, d.Rate = "—", fmt.Sprintf("%d concurrent requests", l.Limit)
	}
	if cost > 1 {
		d.Rate += fmt.Sprintf("; each request costs %d, so %d requests", cost, l.Limit/cost)
	}
	// The usual rule (an endpoint tier per key, a plan-wide limit across
	// all your keys) is said once in the docs; a limit that departs from
	// it says so where its figures are.
	switch {
	case d.CountPer != plans.DefaultCountPer(l.Route) && d.CountPer == plans.CountPerDeveloper:
		d.Rate += ", counted across all your keys"
	case d.CountPer != plans.DefaultCountPer(l.Route):
		d.Rate += ", counted per key"
	}
	// Settled after the response (enforce.Settle): the docs say how.
	switch l.CountWhen {
	case enforce.CountSuccess:
		d.CountWhen = string(l.CountWhen)
		d.Rate += "; only successful responses (1xx-3xx) count, an error gives its cost back"
	case enforce.CountError:
		d.CountWhen = string(l.CountWhen)
		d.Rate += "; only error responses (4xx-5xx) count, a success gives its cost back"
	}
	if l.CostHeader != "" {
		d.CostHeader = l.CostHeader
		d.Rate += fmt.Sprintf("; a request is charged %d up front, then what the API's %s response header says it cost", cost, l.CostHeader)
	}
	d.Explanation = explain(d)
	d.OverLimit = overLimit(d)
	d.PrecisionText = precisionText(l.Enforce(planSlug), instances)
	return d
}

// interval is the steady spacing limit/window gives one request of the
// limit's cost, in words.
func interval(d LimitDoc) string {
	per := d.Window * time.Duration(d.Cost) / time.Duration(max(d.Limit, 1))
	if per < time.Second {
		return per.Round(time.Millisecond).String()
	}
	return per.Round(100 * time.Millisecond).String()
}

func explain(d LimitDoc) string {
	n := d.Limit / d.Cost
	switch d.Algorithm {
	case enforce.FixedWindow:
		return fmt.Sprintf("Counts your requests in fixed windows of one %s that start on the clock. "+
			"You may send all %d at once; once they are spent, every request is refused until the "+
			"window ends, then the count starts over. Bursting at the end of one window and the "+
			"start of the next can pass up to %d within a moment, followed by a full window's wait.",
			d.WindowText, n, 2*n)
	case enforce.SlidingWindowLog:
		return fmt.Sprintf("Counts exactly the requests admitted during the last %s. You may send "+
			"%d at once, but each one frees its slot exactly one %s after it was admitted: after a "+
			"burst of %d you wait a full %s for the first slot, so spreading requests out keeps "+
			"slots coming back steadily. Refused requests do not count.",
			d.WindowText, n, d.WindowText, n, d.WindowText)
	case enforce.SlidingWindowCounter:
		return fmt.Sprintf("Estimates your requests of the last %s from this window's count plus "+
			"the previous window's, weighted by how much of it still overlaps. You may burst up to "+
			"%d; the allowance then returns gradually as the previous window's share fades, rather "+
			"than all at once on the clock.", d.WindowText, n)
	case enforce.TokenBucket:
		capacity := d.Burst
		if capacity == 0 {
			capacity = d.Limit
		}
		return fmt.Sprintf("A bucket holding up to %d tokens, refilled at %d per %s (one every %s); "+
			"each request takes %d. A full bucket lets a burst of %d requests through at once; "+
			"after that you get one request every %s, and pausing refills the bucket for the next burst.",
			capacity, d.Limit, d.WindowText, interval(LimitDoc{Limit: d.Limit, Window: d.Window, Cost: 1}),
			d.Cost, capacity/d.Cost, interval(d))
	case enforce.LeakyBucket:
		if d.Mode == enforce.ModeQueue {
			return fmt.Sprintf("Requests leave a queue at a steady %d per %s (one every %s). A burst "+
				"is not refused but delayed: up to %d requests may wait their turn (the wait is in "+
				"Sluice-Queue-Delay-Ms), and a request arriving to a full queue is refused. Sending "+
				"one request every %s never waits.", d.Limit, d.WindowText, interval(d), d.Burst, interval(d))
		}
		return fmt.Sprintf("Requests are admitted at a steady %d per %s (one every %s), with a "+
			"tolerance of %d extra: a burst of up to %d passes back to back, then you get one request "+
			"every %s. There are no windows to wait for; the allowance returns one request at a time.",
			d.Limit, d.WindowText, interval(d), d.Burst, d.Burst+1, interval(d))
	}
	if d.Algorithm == enforce.Quota {
		return fmt.Sprintf("An allowance of %d per %s that renews on your billing day (the day you signed up, "+
			"unless the operator set another), in UTC; a month that starts on the 31st renews on the last day of "+
			"shorter months. RateLimit's t counts the seconds to the renewal, and RateLimit-Policy's w is the "+
			"current period's length.", d.Limit, d.WindowText)
	}
	if d.Algorithm == enforce.Concurrency {
		wait := "A request beyond them is refused with 429 and Retry-After: 1."
		if d.Mode == enforce.ModeQueue {
			wait = "A request beyond them waits for a slot to free (the wait is in Sluice-Queue-Delay-Ms), " +
				"and is refused with 429 if none frees in time."
		}
		return fmt.Sprintf("At most %d of your requests in flight at once: a request holds a slot from the "+
			"moment it is admitted until its response is complete. %s RateLimit-Policy shows it as "+
			"qu=\"concurrent-requests\", and RateLimit's r counts the free slots.", d.Limit, wait)
	}
	return "Unknown algorithm " + string(d.Algorithm) + "."
}

func overLimit(d LimitDoc) string {
	switch d.Mode {
	case enforce.ModeQueue:
		if d.Algorithm == enforce.Concurrency {
			return "Queued: you wait for a free slot; if none frees within the gateway's longest wait, 429 with Retry-After."
		}
		return "Queued: you wait your turn (for reports, the job waits and you get 202 at once); " +
			"past the queue, 429 with Retry-After."
	case enforce.ModeDegrade:
		return "Degraded: 200 with a cached or reduced answer, marked with the Sluice-Degraded header."
	}
	return "Refused: 429 Too Many Requests with Retry-After and a JSON body."
}

// AlgorithmTitle is the algorithm's name in words ("Token bucket"), as the
// docs and the dashboard show it; an unknown algorithm is its code.
func AlgorithmTitle(a enforce.Algorithm) string { return algorithmDoc(a).Title }

func algorithmDoc(a enforce.Algorithm) AlgorithmDoc {
	switch a {
	case enforce.Concurrency:
		return AlgorithmDoc{a, "Concurrent requests", "A cap on requests in flight at once, not on a rate: " +
			"a slot is taken when a request is admitted and given back when its response is complete."}
	case enforce.Quota:
		return AlgorithmDoc{a, "Quota", "An allowance per day, month or year that renews at your billing " +
			"anchor, not at a clock window: what you bought for the period, counted across all your keys."}
	case enforce.FixedWindow:
		return AlgorithmDoc{a, "Fixed window", "A counter per window of the clock (each minute from :00, say). " +
			"Simple and predictable: you know exactly when it resets (X-RateLimit-Reset). Bursts at a " +
			"window boundary can briefly pass twice the limit."}
	case enforce.SlidingWindowLog:
		return AlgorithmDoc{a, "Sliding window (log)", "The exact number of requests admitted in the " +
			"last window, however you align it. No boundary effects; each admitted request frees its " +
			"slot one window later."}
	case enforce.SlidingWindowCounter:
		return AlgorithmDoc{a, "Sliding window (counter)", "An estimate of the last window from two " +
			"fixed windows, weighting the previous one by its overlap. Smooth like the log, cheap like " +
			"the fixed window."}
	case enforce.TokenBucket:
		return AlgorithmDoc{a, "Token bucket", "Tokens refill at a steady rate up to the burst size; " +
			"each request spends its cost. Allows short bursts up to the bucket size, then the refill rate."}
	case enforce.LeakyBucket:
		return AlgorithmDoc{a, "Leaky bucket", "Requests drain at a steady rate. In queue mode a burst " +
			"waits its turn (traffic shaping) instead of being refused; when the queue is full, 429."}
	}
	return AlgorithmDoc{a, string(a), ""}
}

func curl(base string, e Endpoint) string {
	cmd := "curl -i"
	if e.Method != "GET" {
		cmd += " -X " + e.Method
	}
	cmd += ` -H "Authorization: Bearer $SLUICE_KEY"`
	if e.ExampleBody != "" {
		cmd += ` -H "Content-Type: application/json" -d '` + e.ExampleBody + `'`
	}
	return cmd + ` "` + base + e.ExamplePath + `"`
}
