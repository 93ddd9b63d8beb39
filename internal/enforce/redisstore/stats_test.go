package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// counterValue reads one sample of a gathered counter or histogram count.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return 0
}

func TestStoresShareOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	clock := storetest.NewClock()
	mem := memstore.New(memstore.Options{Now: clock.Now, Registerer: reg})
	client, prefix := storetest.Redis(t)
	red := newTestRedisStore(t, client, Options{Prefix: prefix, Now: clock.Now, Registerer: reg, Timeout: 2 * time.Second})
	req := enforce.Request{Subject: "key:1", Limits: []enforce.Limit{{Name: "l", Algorithm: enforce.FixedWindow, Limit: 2, Window: time.Minute}}}
	for _, s := range []enforce.Store{mem, red} {
		for range 3 {
			if _, err := s.Allow(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
	}{
		{"MemoryAllowed", "sluice_ratelimit_decisions_total", map[string]string{"store": "memory", "result": "allowed"}, 2},
		{"MemoryRejected", "sluice_ratelimit_decisions_total", map[string]string{"store": "memory", "result": "rejected"}, 1},
		{"RedisAllowed", "sluice_ratelimit_decisions_total", map[string]string{"store": "redis", "result": "allowed"}, 2},
		{"RedisRejected", "sluice_ratelimit_decisions_total", map[string]string{"store": "redis", "result": "rejected"}, 1},
		{"PipelinesTimed", "sluice_redis_pipeline_decisions", nil, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := counterValue(t, reg, tc.metric, tc.labels); got != tc.want {
				t.Errorf("%s%v = %v, want %v", tc.metric, tc.labels, got, tc.want)
			}
		})
	}
}
