package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/enforce"
)

// flushEvery adds the usage counted in memory to Redis every usageFlush
// until the store closes.
func (s *Store) flushEvery() {
	defer s.wg.Done()
	tick := time.NewTicker(s.usageFlush)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.usageFlush)
			_ = s.flushUsage(ctx) // kept for the next flush; Redis trouble shows in decisions
			cancel()
		case <-s.stop:
			return
		}
	}
}

// flushUsage adds the pending usage counts to their Redis hashes in one
// pipeline, setting each hash's TTL; on failure the counts are kept for the
// next flush (up to maxPendingUsage).
func (s *Store) flushUsage(ctx context.Context) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	counts := s.tally.take()
	if len(counts) == 0 {
		return nil
	}
	s.written = foldOthers(counts, s.written, s.usageTop, enforce.UsageBucketStart(s.clock().Unix()))
	pipe := s.usageClient.Pipeline()
	ttl := enforce.UsageRetention
	expired := make(map[string]bool, len(counts))
	for k, c := range counts {
		key := s.usageKey(k.subject, k.bucket)
		if c.admitted > 0 {
			pipe.HIncrBy(ctx, key, k.route+"\x00a", c.admitted)
		}
		if c.rejected > 0 {
			pipe.HIncrBy(ctx, key, k.route+"\x00r", c.rejected)
		}
		if !expired[key] {
			expired[key] = true
			pipe.Expire(ctx, key, ttl)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		s.tally.restore(counts)
		return fmt.Errorf("write usage: %w", classify(err))
	}
	return nil
}

// Usage returns the usage of subjects in the buckets that end after since
// (at most UsageRetention back), ordered by subject, route and bucket. All
// buckets are read in one pipeline.
func (s *Store) Usage(ctx context.Context, subjects []string, since time.Time) ([]enforce.UsagePoint, error) {
	if s.usage {
		// This store's own counts are exact; other instances' lag at most
		// their UsageFlush.
		if err := s.flushUsage(ctx); err != nil {
			return nil, err
		}
	}
	to := enforce.UsageBucketStart(s.clock().Unix())
	from := max(enforce.UsageBucketStart(since.Unix()), to-int64(enforce.UsageRetention/time.Second))
	step := int64(enforce.UsageBucket / time.Second)
	type read struct {
		subject string
		bucket  int64
		cmd     *redis.MapStringStringCmd
	}
	var reads []read
	pipe := s.usageClient.Pipeline()
	for _, subject := range subjects {
		if err := enforce.ValidateRequest(enforce.Request{Subject: subject, Limits: []enforce.Limit{{}}}); err != nil {
			return nil, err
		}
		for b := from; b <= to; b += step {
			reads = append(reads, read{subject, b, pipe.HGetAll(ctx, s.usageKey(subject, b))})
		}
	}
	if len(reads) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read usage: %w", classify(err))
	}
	var points []enforce.UsagePoint
	for _, r := range reads {
		byRoute := map[string]*enforce.UsagePoint{}
		for field, v := range r.cmd.Val() {
			route, kind, ok := cutLast(field, "\x00")
			if !ok {
				continue
			}
			count, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("read usage of %q: field %q: %w", r.subject, field, err)
			}
			p := byRoute[route]
			if p == nil {
				p = &enforce.UsagePoint{Subject: r.subject, Route: route, Bucket: time.Unix(r.bucket, 0).UTC()}
				byRoute[route] = p
			}
			switch kind {
			case "a":
				p.Admitted = count
			case "r":
				p.Rejected = count
			}
		}
		for _, p := range byRoute {
			points = append(points, *p)
		}
	}
	enforce.SortUsage(points)
	return points, nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}
