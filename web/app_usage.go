package web

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/billing"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/views"
)

// maxUsageKeys bounds the keys /app shows live: each costs a Peek per second.
const maxUsageKeys = 10

// Warning thresholds of the usage page, in percent of a limit.
const (
	warnAtPercent = 80
	fullAtPercent = 100
)

// myUsage is the developer's usage page; the stream keeps it moving.
func (s *Server) myUsage(w http.ResponseWriter, r *http.Request) {
	u, err := s.myUsageFigures(r.Context(), r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	p := s.page(r, "My usage", "app")
	p.SSE = true
	s.render(w, r, http.StatusOK, views.MyUsagePage(p, u))
}

// myUsageStream pushes the usage fragment every second as the SSE event
// views.MyUsageEvent, until the browser goes away.
//
// A developer holds at most StreamsPerUser streams, and all the streams of
// one developer share one computation per tick.
func (s *Server) myUsageStream(w http.ResponseWriter, r *http.Request) {
	user, _ := s.currentUser(r)
	s.serveStream(w, r, "app:"+strconv.FormatInt(user.ID, 10), func(ctx context.Context) bool { return s.stillMember(ctx, r) },
		func(ctx context.Context, _ *any) ([]byte, error) {
			u, err := s.myUsageFigures(ctx, r)
			if err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				s.log.Warn("usage stream", "err", err)
				u = views.MyUsage{Problem: "Your figures could not be read just now.", Updated: s.now()}
			}
			var frag, buf bytes.Buffer
			if err := views.MyUsageFragment(u).Render(ctx, &frag); err != nil {
				return nil, err
			}
			writeEvent(&buf, views.MyUsageEvent, frag.Bytes())
			return buf.Bytes(), nil
		})
}

// myUsageFigures reads the signed-in developer's figures: per active key
// every limit as Peek sees it (what /api/rate-limit-status answers), the
// last hour per endpoint from the usage series, and warnings. A store that
// cannot be read leaves the figures empty with a note rather than failing
// the page.
func (s *Server) myUsageFigures(ctx context.Context, r *http.Request) (views.MyUsage, error) {
	user, _ := s.currentUser(r)
	now := s.now()
	out := views.MyUsage{Updated: now}
	all, err := s.deps.Plans.List(ctx)
	if err != nil {
		return out, fmt.Errorf("usage: list plans: %w", err)
	}
	if p, err := s.viewerPlan(r, all); err == nil {
		out.Plan = p.Name
	}
	keys, _, err := s.deps.Keys.List(ctx, apikeys.Filter{UserID: user.ID, State: apikeys.StateActive, Limit: maxUsageKeys})
	if err != nil {
		return out, fmt.Errorf("usage: list keys: %w", err)
	}
	// All of a developer's keys share one subject (their plan-wide limits
	// and their usage series); each key's tiers count under its own scope.
	subject := enforce.DeveloperSubject(user.ID)
	// Quotas renew at the developer's billing anchor.
	anchor, err := billing.Get(ctx, s.deps.Pool, user.ID)
	if err != nil && !errors.Is(err, billing.ErrNotFound) {
		return out, fmt.Errorf("usage: billing anchor: %w", err)
	}
	worst := int64(0)
	for _, k := range keys {
		ku := views.MyKeyUsage{ID: k.ID, Name: k.Name, Prefix: k.Prefix, LastUsed: k.LastUsedAt, Plan: planName(all, k.PlanSlug)}
		// An operator may move one key to another plan; its limits are
		// that plan's, so the page must not name only the account's.
		out.MixedPlans = out.MixedPlans || ku.Plan != out.Plan
		limits, err := s.keyLimits(ctx, k)
		if err != nil {
			return out, fmt.Errorf("usage: limits of key %d: %w", k.ID, err)
		}
		if len(limits) > 0 {
			d, err := s.dashboard.Peek(ctx, enforce.Request{Subject: subject, Key: enforce.KeyScope(k.ID), Limits: limits, Anchor: anchor.Effective})
			if err != nil {
				s.log.Warn("usage peek", "key_id", k.ID, "err", err)
				out.Problem = "The rate-limit store could not be read just now."
			}
			// Shadow tiers are tried in the dark: never shown.
			for _, l := range d.Visible().Layers {
				g := gaugeOf(l)
				ml := views.MyLimit{Policy: l.Limit.Name, Route: l.Limit.Route, Gauge: g, ResetIn: l.ResetAfter}
				if l.Limit.Algorithm == enforce.Quota {
					at := d.At
					if at.IsZero() {
						at = now
					}
					ml.Period, ml.RenewsOn = string(l.Limit.Period), at.Add(l.ResetAfter).UTC()
				}
				ku.Limits = append(ku.Limits, ml)
				worst = max(worst, g.Percent())
			}
		}
		out.Keys = append(out.Keys, ku)
	}
	switch {
	case worst >= fullAtPercent:
		out.Warnings = append(out.Warnings, views.Banner{Kind: "error", TestID: "usage-banner-100",
			Text: "You have used all of a limit: requests it covers are refused (or queued, or degraded) until it resets. See the reset times below."})
	case worst >= warnAtPercent:
		out.Warnings = append(out.Warnings, views.Banner{Kind: "warn", TestID: "usage-banner-80",
			Text: fmt.Sprintf("You have used over %d%% of a limit. Slow down, or watch X-RateLimit-Remaining, to avoid 429s.", warnAtPercent)})
	}
	if len(keys) > 0 {
		since := now.Add(-usageWindow)
		points, err := s.deps.Usage.Usage(ctx, []string{subject}, since)
		if err != nil {
			s.log.Warn("usage series", "err", err)
			out.Problem = "The usage series could not be read just now."
		}
		out.Routes = routeCharts(points, since, now)
	}
	return out, nil
}

// routeCharts folds usage points into one chart per route, busiest first.
func routeCharts(points []enforce.UsagePoint, since, now time.Time) []views.RouteChart {
	first := since.Truncate(enforce.UsageBucket)
	n := int(now.Sub(first)/enforce.UsageBucket) + 1
	byRoute := map[string]*views.RouteChart{}
	for _, p := range points {
		i := int(p.Bucket.Sub(first) / enforce.UsageBucket)
		if p.Bucket.Before(first) || i >= n {
			continue
		}
		rc := byRoute[p.Route]
		if rc == nil {
			rc = &views.RouteChart{Route: p.Route, Buckets: make([]views.UsageBucket, n)}
			for j := range rc.Buckets {
				rc.Buckets[j].Start = first.Add(time.Duration(j) * enforce.UsageBucket)
			}
			byRoute[p.Route] = rc
		}
		t := views.Traffic{Admitted: p.Admitted, Rejected: p.Rejected}
		rc.Buckets[i].Traffic = rc.Buckets[i].Traffic.Add(t)
		rc.Total = rc.Total.Add(t)
	}
	out := make([]views.RouteChart, 0, len(byRoute))
	for _, rc := range byRoute {
		out = append(out, *rc)
	}
	slices.SortFunc(out, func(a, b views.RouteChart) int {
		if c := cmp.Compare(b.Total.Total(), a.Total.Total()); c != 0 {
			return c
		}
		return cmp.Compare(a.Route, b.Route)
	})
	return out
}

// planName is the name of the plan with the slug, or the slug when it is
// not in the list (deleted since the list was read).
func planName(all []plans.Plan, slug string) string {
	for _, p := range all {
		if p.Slug == slug {
			return p.Name
		}
	}
	return slug
}
