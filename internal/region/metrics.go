package region

import "github.com/prometheus/client_golang/prometheus"

// collector exports Status to Prometheus at scrape time, so the figures
// have one home (the store's counters) and cost nothing between scrapes.
type collector struct {
	s         *Store
	degraded  *prometheus.Desc
	reachable *prometheus.Desc
	published *prometheus.Desc
	backlog   *prometheus.Desc
	dropped   *prometheus.Desc
	overflow  *prometheus.Desc
}

// Register adds the store's gauges and counters to reg:
// sluice_region_degraded, and per peer sluice_region_peer_reachable,
// sluice_region_published_units_total, sluice_region_backlog_subjects and
// sluice_region_dropped_total; sluice_region_overflow_total counts decisions
// held to the share because the publication table was full.
func (s *Store) Register(reg prometheus.Registerer) error {
	c := &collector{
		s:         s,
		degraded:  prometheus.NewDesc("sluice_region_degraded", "1 while a peer region is unreachable and this region holds to its share.", nil, nil),
		reachable: prometheus.NewDesc("sluice_region_peer_reachable", "1 when the peer region answered the last round.", []string{"peer"}, nil),
		published: prometheus.NewDesc("sluice_region_published_units_total", "Cost units published to the peer region, summed over limits.", []string{"peer"}, nil),
		backlog:   prometheus.NewDesc("sluice_region_backlog_subjects", "Subjects whose consumption waits for the peer region to answer.", []string{"peer"}, nil),
		dropped:   prometheus.NewDesc("sluice_region_dropped_total", "Charges to the peer region lost to a full backlog or refused.", []string{"peer"}, nil),
		overflow:  prometheus.NewDesc("sluice_region_overflow_total", "Decisions held to the share because the publication table was full.", nil, nil),
	}
	return reg.Register(c)
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.degraded, c.reachable, c.published, c.backlog, c.dropped, c.overflow} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Status()
	ch <- prometheus.MustNewConstMetric(c.degraded, prometheus.GaugeValue, boolValue(st.Degraded))
	ch <- prometheus.MustNewConstMetric(c.overflow, prometheus.CounterValue, float64(st.Overflow))
	for _, p := range st.Peers {
		ch <- prometheus.MustNewConstMetric(c.reachable, prometheus.GaugeValue, boolValue(p.Reachable), p.Name)
		ch <- prometheus.MustNewConstMetric(c.published, prometheus.CounterValue, float64(p.Published), p.Name)
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(p.Backlog), p.Name)
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(p.Dropped), p.Name)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
