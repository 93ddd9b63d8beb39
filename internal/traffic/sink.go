package traffic

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// keep is how long stored arrivals live: the retention plus the hour
// being written.
const keep = Retention + time.Hour

// unrecordedField is the subjects hash's field counting arrivals of
// subjects neither kept nor sampled; no subject ("key:..", "ip:..") is
// empty.
const unrecordedField = ""

// RedisSink stores arrivals in Redis: per route and hour, a hash saying
// how each subject was kept, and per subject a string of 3600 saturating
// 16-bit counters (7 KiB) written with BITFIELD, all expiring after 25
// hours, so the footprint is bounded by routes × kept subjects × 25 × 7 KiB.
type RedisSink struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewRedisSink returns a sink whose keys start with prefix
// (PORTAL_REDIS_PREFIX).
func NewRedisSink(rdb redis.UniversalClient, prefix string) *RedisSink {
	return &RedisSink{rdb: rdb, prefix: prefix}
}

// Route patterns hold braces ("{id}"), which Redis Cluster would read as
// a hash tag, and spaces: keys carry them escaped.
func (s *RedisSink) subjectsKey(route string, hour int64) string {
	return s.prefix + "traffic:subjects:" + strconv.FormatInt(hour, 10) + ":" + url.QueryEscape(route)
}

func (s *RedisSink) seriesKey(route, subject string, hour int64) string {
	return s.prefix + "traffic:series:" + strconv.FormatInt(hour, 10) + ":" + url.QueryEscape(route) + ":" + url.QueryEscape(subject)
}

func (s *RedisSink) routesKey() string { return s.prefix + "traffic:routes" }

// Add writes one flush in one pipeline.
func (s *RedisSink) Add(ctx context.Context, batch []Counts, unrecorded map[RouteHour]int) error {
	pipe := s.rdb.Pipeline()
	routes := map[string]int64{}
	for _, c := range batch {
		sk := s.subjectsKey(c.Route, c.Hour)
		pipe.HSet(ctx, sk, c.Subject, string(c.Kind))
		pipe.Expire(ctx, sk, keep)
		key := s.seriesKey(c.Route, c.Subject, c.Hour)
		args := []any{"OVERFLOW", "SAT"}
		for sec, n := range c.Seconds {
			args = append(args, "INCRBY", "u16", "#"+strconv.Itoa(sec), n)
		}
		pipe.BitField(ctx, key, args...)
		pipe.Expire(ctx, key, keep)
		routes[c.Route] = max(routes[c.Route], c.Hour)
	}
	for rh, n := range unrecorded {
		sk := s.subjectsKey(rh.Route, rh.Hour)
		pipe.HIncrBy(ctx, sk, unrecordedField, int64(n))
		pipe.Expire(ctx, sk, keep)
		routes[rh.Route] = max(routes[rh.Route], rh.Hour)
	}
	for r, h := range routes {
		pipe.ZAdd(ctx, s.routesKey(), redis.Z{Score: float64(h), Member: r})
	}
	if len(routes) > 0 {
		pipe.Expire(ctx, s.routesKey(), keep)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("traffic: write to redis: %w", err)
	}
	return nil
}

// Load reads the route's hours fromHour..toHour.
func (s *RedisSink) Load(ctx context.Context, route string, fromHour, toHour int64) (Recorded, error) {
	rec := Recorded{Route: route, Subjects: map[string]Kind{}, Series: map[string]map[int64]int{}}
	for h := fromHour; h <= toHour; h++ {
		subjects, err := s.rdb.HGetAll(ctx, s.subjectsKey(route, h)).Result()
		if err != nil {
			return Recorded{}, fmt.Errorf("traffic: read from redis: %w", err)
		}
		pipe := s.rdb.Pipeline()
		gets := map[string]*redis.StringCmd{}
		for subject, kind := range subjects {
			if subject == unrecordedField {
				n, _ := strconv.Atoi(kind)
				rec.Unrecorded += n
				continue
			}
			rec.Subjects[subject] = Kind(kind)
			gets[subject] = pipe.Get(ctx, s.seriesKey(route, subject, h))
		}
		if len(gets) == 0 {
			continue
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return Recorded{}, fmt.Errorf("traffic: read from redis: %w", err)
		}
		for subject, cmd := range gets {
			b, err := cmd.Bytes()
			if err != nil {
				continue // expired between the two reads
			}
			for i := 0; i+1 < len(b); i += 2 {
				if n := binary.BigEndian.Uint16(b[i:]); n > 0 {
					if rec.Series[subject] == nil {
						rec.Series[subject] = map[int64]int{}
					}
					rec.Series[subject][h*3600+int64(i/2)] += int(n)
				}
			}
		}
	}
	return rec, nil
}

// Routes lists the routes recorded in the last 25 hours, by name.
func (s *RedisSink) Routes(ctx context.Context) ([]string, error) {
	oldest := time.Now().Add(-keep).Unix() / 3600
	rs, err := s.rdb.ZRangeByScore(ctx, s.routesKey(), &redis.ZRangeBy{Min: strconv.FormatInt(oldest, 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("traffic: read from redis: %w", err)
	}
	slices.Sort(rs)
	return rs, nil
}

// MemorySink keeps arrivals in this process, for a portal without Redis;
// the Recorder's bounds apply, and hours past retention are dropped.
type MemorySink struct {
	mu    sync.Mutex
	hours map[RouteHour]*memHour
}

type memHour struct {
	kind       map[string]Kind
	series     map[string]*[3600]uint16
	unrecorded int
}

// NewMemorySink returns an empty in-process sink.
func NewMemorySink() *MemorySink { return &MemorySink{hours: map[RouteHour]*memHour{}} }

func (m *MemorySink) hour(rh RouteHour) *memHour {
	h := m.hours[rh]
	if h == nil {
		h = &memHour{kind: map[string]Kind{}, series: map[string]*[3600]uint16{}}
		m.hours[rh] = h
	}
	return h
}

// Add stores one flush.
func (m *MemorySink) Add(_ context.Context, batch []Counts, unrecorded map[RouteHour]int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	newest := int64(0)
	for _, c := range batch {
		h := m.hour(RouteHour{c.Route, c.Hour})
		h.kind[c.Subject] = c.Kind
		s := h.series[c.Subject]
		if s == nil {
			s = new([3600]uint16)
			h.series[c.Subject] = s
		}
		for sec, n := range c.Seconds {
			s[sec] = uint16(min(int(s[sec])+n, 0xffff))
		}
		newest = max(newest, c.Hour)
	}
	for rh, n := range unrecorded {
		m.hour(rh).unrecorded += n
		newest = max(newest, rh.Hour)
	}
	for rh := range m.hours {
		if rh.Hour < newest-int64(keep/time.Hour) {
			delete(m.hours, rh)
		}
	}
	return nil
}

// Load reads the route's hours fromHour..toHour.
func (m *MemorySink) Load(_ context.Context, route string, fromHour, toHour int64) (Recorded, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := Recorded{Route: route, Subjects: map[string]Kind{}, Series: map[string]map[int64]int{}}
	for hr := fromHour; hr <= toHour; hr++ {
		h := m.hours[RouteHour{route, hr}]
		if h == nil {
			continue
		}
		rec.Unrecorded += h.unrecorded
		for subject, s := range h.series {
			rec.Subjects[subject] = h.kind[subject]
			for i, n := range s {
				if n > 0 {
					if rec.Series[subject] == nil {
						rec.Series[subject] = map[int64]int{}
					}
					rec.Series[subject][hr*3600+int64(i)] += int(n)
				}
			}
		}
	}
	return rec, nil
}

// Routes lists the routes with stored arrivals.
func (m *MemorySink) Routes(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for rh := range m.hours {
		if !slices.Contains(out, rh.Route) {
			out = append(out, rh.Route)
		}
	}
	slices.Sort(out)
	return out, nil
}
