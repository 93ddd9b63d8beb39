package web

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/region"
	"github.com/sluicehq/sluice/views"
)

// RegionSource reports the regions' mode and peers, and this region's share
// of a figure; region.Store is one.
type RegionSource interface {
	Status() region.Status
	ShareOf(n int64) int64
}

// regionalPlans is all as this region enforces it: in share mode each
// limit and burst is the region's share, so the generated docs (and their
// recorded examples) tell a client the figures its requests will meet here.
// The plans are copied; the caller's are not changed.
func (s *Server) regionalPlans(all []plans.Plan) []plans.Plan {
	if s.deps.Regions == nil || s.deps.Regions.Status().Mode != region.Share {
		return all
	}
	out := make([]plans.Plan, len(all))
	for i, p := range all {
		p.Limits = slices.Clone(p.Limits)
		for j := range p.Limits {
			l := &p.Limits[j]
			l.Limit = s.deps.Regions.ShareOf(l.Limit)
			if l.Burst > 0 {
				l.Burst = s.deps.Regions.ShareOf(l.Burst)
			}
		}
		out[i] = p
	}
	return out
}

// regionReadTimeout bounds the read of a peer region's usage, which crosses
// the network between regions: a peer that does not answer shows as
// unavailable rather than holding up the page.
const regionReadTimeout = time.Second

// regionsView is the overview's regions line: the mode, this region's share,
// and every region's last hour, read from each region's own Redis (this
// one's figures are the overview's own total).
func (s *Server) regionsView(ctx context.Context, local views.Traffic) *views.Regions {
	if s.deps.Regions == nil {
		return nil
	}
	st := s.deps.Regions.Status()
	v := &views.Regions{
		Region: st.Region, Mode: string(st.Mode), Degraded: st.Degraded,
		Share: strconv.FormatInt(st.Weight, 10) + "/" + strconv.FormatInt(st.TotalWeight, 10),
	}
	v.Rows = append(v.Rows, views.RegionRow{Name: st.Region, This: true, Reachable: true, Known: true, Traffic: local})
	rows := make([]views.RegionRow, len(st.Peers))
	var subjects []string
	if len(s.deps.RegionUsage) > 0 {
		keys, err := s.recentKeys(ctx, s.now().Add(-usageWindow))
		if err != nil {
			s.log.Warn("regions: recently used keys", "err", err)
		}
		// Usage series are kept per developer (all their keys together).
		seen := map[string]bool{}
		for _, k := range keys {
			if subject := enforce.DeveloperSubject(k.UserID); !seen[subject] {
				seen[subject] = true
				subjects = append(subjects, subject)
			}
		}
	}
	var wg sync.WaitGroup
	for i, p := range st.Peers {
		rows[i] = views.RegionRow{Name: p.Name, Reachable: p.Reachable, Backlog: p.Backlog}
		reader := s.deps.RegionUsage[p.Name]
		if reader == nil || !p.Reachable {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t, err := s.regionTraffic(ctx, reader, subjects)
			if err != nil {
				s.log.Warn("regions: read a peer's usage", "peer", p.Name, "err", err)
				return
			}
			rows[i].Known, rows[i].Traffic = true, t
		}()
	}
	wg.Wait()
	v.Rows = append(v.Rows, rows...)
	return v
}

func (s *Server) regionTraffic(ctx context.Context, reader UsageReader, subjects []string) (views.Traffic, error) {
	var t views.Traffic
	if len(subjects) == 0 {
		return t, nil
	}
	ctx, cancel := context.WithTimeout(ctx, regionReadTimeout)
	defer cancel()
	points, err := reader.Usage(ctx, subjects, s.now().Add(-usageWindow))
	if err != nil {
		return t, fmt.Errorf("read usage series: %w", err)
	}
	for _, p := range points {
		t = t.Add(views.Traffic{Admitted: p.Admitted, Rejected: p.Rejected})
	}
	return t, nil
}
