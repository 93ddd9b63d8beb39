package memstore

import (
	"context"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// evictions reads sluice_memory_evictions_total{reason} from reg.
func evictions(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_memory_evictions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestMemoryStoreSubjectBound(t *testing.T) {
	short := []enforce.Limit{{Name: "s", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Second}}
	long := []enforce.Limit{{Name: "l", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Hour}}
	ctx := context.Background()
	allow := func(t *testing.T, s *Store, subject string, limits []enforce.Limit) enforce.Decision {
		t.Helper()
		d, err := s.Allow(ctx, enforce.Request{Subject: subject, Limits: limits})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	newStore := func(clock *storetest.Clock, reg prometheus.Registerer) *Store {
		// One shard, so the bound is exactly MaxSubjects.
		return New(Options{Now: clock.Now, Shards: 1, MaxSubjects: 64, Registerer: reg})
	}

	t.Run("EvictsIdleFirst", func(t *testing.T) {
		clock := storetest.NewClock()
		reg := prometheus.NewRegistry()
		s := newStore(clock, reg)
		for i := range 32 {
			allow(t, s, "idle:"+strconv.Itoa(i), short)
			allow(t, s, "active:"+strconv.Itoa(i), long)
		}
		// The short windows end: the idle subjects keep only their usage.
		clock.Set(storetest.Epoch.Add(2 * time.Second))
		for i := range 8 {
			allow(t, s, "new:"+strconv.Itoa(i), long)
		}
		if got := s.Len(); got > 64 {
			t.Fatalf("Len = %d, want at most 64", got)
		}
		if idle, active := evictions(t, reg, "idle"), evictions(t, reg, "active"); idle == 0 || active != 0 {
			t.Fatalf("evicted %v idle and %v active, want idle ones only", idle, active)
		}
		// Every active subject still counts its first request.
		for i := range 32 {
			d, err := s.Peek(ctx, enforce.Request{Subject: "active:" + strconv.Itoa(i), Limits: long})
			if err != nil {
				t.Fatal(err)
			}
			if d.Layers[0].Remaining != 4 {
				t.Fatalf("active:%d remaining = %d, want 4: an active subject was forgotten while idle ones were left", i, d.Layers[0].Remaining)
			}
		}
	})

	t.Run("OverLimitKeptUntilReset", func(t *testing.T) {
		clock := storetest.NewClock()
		reg := prometheus.NewRegistry()
		s := newStore(clock, reg)
		for range 6 {
			allow(t, s, "hog", long)
		}
		// A flood of new subjects, each under its limit, 150 times the bound.
		for i := range 10_000 {
			allow(t, s, "flood:"+strconv.Itoa(i), long)
			if n := s.Len(); n > 64 {
				t.Fatalf("after %d new subjects Len = %d, want at most 64", i+1, n)
			}
		}
		if d := allow(t, s, "hog", long); d.Allowed {
			t.Fatal("the subject over its limit was forgotten during the flood and admitted again before its reset")
		}
		if got := evictions(t, reg, "over_limit"); got != 0 {
			t.Fatalf("over_limit evictions = %v, want 0 while active subjects could go", got)
		}
		if got := evictions(t, reg, "active"); got < 10_000-64 {
			t.Fatalf("active evictions = %v, want the flood's", got)
		}
	})

	t.Run("OverLimitEvictedOnlyWhenNothingElseIsLeftAndCounted", func(t *testing.T) {
		clock := storetest.NewClock()
		reg := prometheus.NewRegistry()
		s := newStore(clock, reg)
		one := []enforce.Limit{{Name: "one", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Hour}}
		for i := range 200 {
			allow(t, s, "full:"+strconv.Itoa(i), one) // each at its limit at once
		}
		if n := s.Len(); n > 64 {
			t.Fatalf("Len = %d, want at most 64", n)
		}
		if got := evictions(t, reg, "over_limit"); got < 200-64 {
			t.Fatalf("over_limit evictions = %v, want every subject forgotten at its limit counted", got)
		}
	})

	t.Run("DefaultBound", func(t *testing.T) {
		s := New(Options{})
		want := int64(MaxSubjectsFor(ProcessMemory().Bytes))
		if got := s.shardMax * int64(len(s.shards)); got < want || got > want+int64(len(s.shards)) {
			t.Fatalf("default bound = %d, want MaxSubjectsFor(ProcessMemory()) = %d rounded up to the shards", got, want)
		}
	})
	t.Run("DefaultFollowsGOMEMLIMIT", func(t *testing.T) {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(4 << 30))
		s := New(Options{})
		// An eighth of 4 GiB at 512 bytes a subject: 1,048,576.
		if got := s.shardMax * int64(len(s.shards)); got != 1<<20 {
			t.Fatalf("bound under a 4 GiB memory limit = %d, want 1048576", got)
		}
	})
}

// TestMemoryStoreFloodStaysBounded: 100,000 distinct subjects, each one
// request of an anonymous plan, leave at most MaxSubjects subjects.
func TestMemoryStoreFloodStaysBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := New(Options{MaxSubjects: 5000, Registerer: reg})
	limits := []enforce.Limit{
		{Name: "anonymous-global", Algorithm: enforce.FixedWindow, Limit: 60, Window: time.Minute},
		{Name: "anonymous-search", Algorithm: enforce.SlidingWindowLog, Limit: 10, Window: time.Minute},
	}
	for i := range 100_000 {
		if _, err := s.Allow(context.Background(), enforce.Request{Subject: "ip:10." + strconv.Itoa(i>>16) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255), Route: "GET /api/search", Limits: limits}); err != nil {
			t.Fatal(err)
		}
	}
	most := int(s.shardMax) * len(s.shards)
	if n := s.Len(); n > most {
		t.Fatalf("Len = %d after 100,000 subjects, want at most %d", n, most)
	}
}
