package memstore

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/internal/enforce/storemetrics"
)

// Eviction reasons, the values of sluice_memory_evictions_total's label.
const (
	evictIdle      = "idle"       // no limit state left, only usage
	evictActive    = "active"     // under every limit: starts afresh
	evictOverLimit = "over_limit" // at or over a limit before its reset
)

// evictionMetrics counts the memory store's evictions by reason; nil
// counts nothing.
type evictionMetrics struct {
	idle, active, overLimit prometheus.Counter
}

func newEvictionMetrics(reg prometheus.Registerer) (*evictionMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	c, err := storemetrics.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_memory_evictions_total",
		Help: "Subjects the memory store forgot to stay within its maximum subject count, by reason: idle (only usage left), active (under every limit) or over_limit (at or over a limit before its reset).",
	}, []string{"reason"}))
	if err != nil {
		return nil, err
	}
	return &evictionMetrics{
		idle:      c.WithLabelValues(evictIdle),
		active:    c.WithLabelValues(evictActive),
		overLimit: c.WithLabelValues(evictOverLimit),
	}, nil
}

func (m *evictionMetrics) add(reason string, n int) {
	if m == nil || n == 0 {
		return
	}
	switch reason {
	case evictIdle:
		m.idle.Add(float64(n))
	case evictActive:
		m.active.Add(float64(n))
	default:
		m.overLimit.Add(float64(n))
	}
}

// evictCandidate is a live subject of a full shard, with what orders it.
type evictCandidate struct {
	bucket, entry int
	class         int   // 0 idle, 1 active, 2 at or over a limit
	order         int64 // within a class: the oldest last write, or the nearest guard
}

// evict makes room in a shard holding most subjects, under the shard's
// lock: it frees an eighth of the shard at once, so a flood of new subjects
// pays one scan per most/8 inserts rather than one per insert. Idle
// subjects go first, then active ones least recently written first, and
// subjects at or over a limit only when nothing else is left, nearest reset
// first. A subject is marked dead under its own lock, as in sweep.
func (sh *memShard) evict(now, most int64, em *evictionMetrics) {
	t := sh.table.Load()
	target := sh.live.Load() - most + max(most/8, 1)
	cands := make([]evictCandidate, 0, sh.live.Load())
	for b := range t.buckets {
		for i := range bucketEntries {
			sub := t.buckets[b].subs[i].Load()
			if sub == nil {
				continue
			}
			sub.mu.Lock()
			c := evictCandidate{bucket: b, entry: i}
			switch {
			case sub.held() <= now && sub.guard <= now:
				c.class, c.order = 0, sub.last
			case sub.guard <= now:
				c.class, c.order = 1, sub.last
			default:
				c.class, c.order = 2, sub.guard
			}
			sub.mu.Unlock()
			cands = append(cands, c)
		}
	}
	slices.SortFunc(cands, func(a, b evictCandidate) int {
		if a.class != b.class {
			return a.class - b.class
		}
		switch {
		case a.order < b.order:
			return -1
		case a.order > b.order:
			return 1
		}
		return 0
	})
	var counts [3]int
	for _, c := range cands {
		if target <= 0 {
			break
		}
		bk := &t.buckets[c.bucket]
		sub := bk.subs[c.entry].Load()
		sub.mu.Lock()
		sub.dead = true
		bk.remove(c.entry)
		sub.mu.Unlock()
		sh.live.Add(-1)
		counts[c.class]++
		target--
	}
	// Evicted state is gone as swept state is: a subject added later starts
	// from this reading, so no decision counts afresh in the past.
	sh.sweptAt = max(sh.sweptAt, now)
	em.add(evictIdle, counts[0])
	em.add(evictActive, counts[1])
	em.add(evictOverLimit, counts[2])
}
