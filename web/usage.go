package web

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/views"
)

// usageWindow is how far back the dashboard looks.
const usageWindow = time.Hour

// usageTTL is how long one summary is reused: one usage bucket, so a
// summary is at most one bucket behind and a busy dashboard costs one read
// of the series per bucket.
const usageTTL = enforce.UsageBucket

// usageCache holds the last summary.
type usageCache struct {
	mu      sync.Mutex
	at      time.Time
	summary usageSummary
}

// usageSummary is the last hour of traffic, aggregated for the dashboard.
type usageSummary struct {
	byPlan       map[int64]views.Traffic
	buckets      []views.UsageBucket
	topConsumers []views.Consumer
	topRejected  []views.RouteTraffic
	total        views.Traffic
	// note explains what the figures leave out; empty when complete.
	note string
}

// recentKey is a key that was used in the last hour, with the plan that
// applies to it.
type recentKey struct {
	ID     int64  `db:"id"`
	UserID int64  `db:"user_id"`
	PlanID *int64 `db:"plan_id"`
	Owner  string `db:"owner"`
	Name   string `db:"name"`
}

// The usage series is keyed by subject and cannot be listed, so the
// dashboard asks for the keys that were used in the window. last_used_at is
// written in batches, so a key's first minute of use may show a little late.
const selectRecentKeys = `
SELECT k.id, k.user_id,
       COALESCE(k.plan_id, u.plan_id, (SELECT p.id FROM plans p WHERE p.is_default)) AS plan_id,
       u.email AS owner,
       k.name
FROM api_keys k
JOIN users u ON u.id = k.user_id
WHERE k.last_used_at >= $1
ORDER BY k.last_used_at DESC`

func (s *Server) recentKeys(ctx context.Context, since time.Time) ([]recentKey, error) {
	rows, err := s.deps.Pool.Query(ctx, selectRecentKeys, since)
	if err != nil {
		return nil, fmt.Errorf("recently used keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByName[recentKey])
	if err != nil {
		return nil, fmt.Errorf("recently used keys: %w", err)
	}
	return keys, nil
}

// usageSummary returns the last hour's traffic, computed at most once per
// bucket. A failure to read is not an error for the page: the figures are
// left empty and the note says why.
func (s *Server) usageSummary(ctx context.Context) usageSummary {
	s.usage.mu.Lock()
	defer s.usage.mu.Unlock()
	now := s.now()
	if !s.usage.at.IsZero() && now.Sub(s.usage.at) < usageTTL {
		return s.usage.summary
	}
	sum, err := s.computeUsage(ctx, now)
	if err != nil {
		s.log.Warn("usage summary", "err", err)
		return usageSummary{note: "Usage figures are unavailable right now."}
	}
	s.usage.at, s.usage.summary = now, sum
	return sum
}

func (s *Server) computeUsage(ctx context.Context, now time.Time) (usageSummary, error) {
	since := now.Add(-usageWindow)
	keys, err := s.recentKeys(ctx, since)
	if err != nil {
		return usageSummary{}, err
	}
	// The series is per developer (all their keys share one subject): a
	// developer is named by the first of their recent keys.
	subjects := make([]string, 0, len(keys))
	byKey := make(map[string]recentKey, len(keys))
	for _, k := range keys {
		subject := enforce.DeveloperSubject(k.UserID)
		if _, seen := byKey[subject]; !seen {
			subjects = append(subjects, subject)
			byKey[subject] = k
		}
	}
	var points []enforce.UsagePoint
	if len(subjects) > 0 {
		points, err = s.deps.Usage.Usage(ctx, subjects, since)
		if err != nil {
			return usageSummary{}, fmt.Errorf("read usage series: %w", err)
		}
	}
	return summarize(points, byKey, since, now), nil
}

// summarize folds usage points into the dashboard's figures: per plan, per
// bucket, the top consumers and the routes that rejected most.
func summarize(points []enforce.UsagePoint, byKey map[string]recentKey, since, now time.Time) usageSummary {
	sum := usageSummary{
		byPlan: map[int64]views.Traffic{},
		note:   "The chart and the tables count API keys; anonymous callers are counted apart (below, and in the history).",
	}
	first := since.Truncate(enforce.UsageBucket)
	n := int(now.Sub(first)/enforce.UsageBucket) + 1
	sum.buckets = make([]views.UsageBucket, n)
	for i := range sum.buckets {
		sum.buckets[i].Start = first.Add(time.Duration(i) * enforce.UsageBucket)
	}
	consumers := map[string]*views.Consumer{}
	routes := map[string]*views.RouteTraffic{}
	for _, p := range points {
		if p.Bucket.Before(first) {
			continue
		}
		t := views.Traffic{Admitted: p.Admitted, Rejected: p.Rejected}
		sum.total = sum.total.Add(t)
		if i := int(p.Bucket.Sub(first) / enforce.UsageBucket); i >= 0 && i < n {
			sum.buckets[i].Traffic = sum.buckets[i].Traffic.Add(t)
		}
		k, known := byKey[p.Subject]
		if known && k.PlanID != nil {
			sum.byPlan[*k.PlanID] = sum.byPlan[*k.PlanID].Add(t)
		}
		c := consumers[p.Subject]
		if c == nil {
			c = &views.Consumer{Subject: p.Subject}
			if known {
				// The subject is the developer's: every key of theirs.
				c.KeyID, c.Owner, c.Name = k.ID, k.Owner, "all keys"
			}
			consumers[p.Subject] = c
		}
		c.Traffic = c.Traffic.Add(t)
		rt := routes[p.Route]
		if rt == nil {
			rt = &views.RouteTraffic{Route: p.Route}
			routes[p.Route] = rt
		}
		rt.Traffic = rt.Traffic.Add(t)
	}
	for _, c := range consumers {
		sum.topConsumers = append(sum.topConsumers, *c)
	}
	slices.SortFunc(sum.topConsumers, func(a, b views.Consumer) int {
		return cmp.Or(cmp.Compare(b.Total(), a.Total()), strings.Compare(a.Subject, b.Subject))
	})
	sum.topConsumers = sum.topConsumers[:min(len(sum.topConsumers), 10)]
	for _, rt := range routes {
		if rt.Rejected > 0 {
			sum.topRejected = append(sum.topRejected, *rt)
		}
	}
	slices.SortFunc(sum.topRejected, func(a, b views.RouteTraffic) int {
		return cmp.Or(cmp.Compare(b.Rejected, a.Rejected), strings.Compare(a.Route, b.Route))
	})
	sum.topRejected = sum.topRejected[:min(len(sum.topRejected), 10)]
	return sum
}

// planUsage is the last hour's traffic per plan id, and a note on what the
// figures leave out.
func (s *Server) planUsage(ctx context.Context) (map[int64]views.Traffic, string) {
	sum := s.usageSummary(ctx)
	return sum.byPlan, sum.note
}
