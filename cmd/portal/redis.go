package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce/redisstore"
)

// redisOptions turns REDIS_URL into go-redis universal options and a
// description safe to log (no password). Accepted forms:
//
//	redis://[user:pass@]host:6379/0        one server (rediss:// for TLS)
//	redis://host:26379?master_name=mymaster&addr=host2:26379
//	                                       Sentinel (redis+sentinel:// also accepted)
//	redis+cluster://host:7000?addr=host2:7000
//	                                       Cluster (also any redis:// URL with addr=)
func redisOptions(raw string) (*redis.UniversalOptions, string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", errors.New("not a URL")
	}
	kind := ""
	switch u.Scheme {
	case "redis", "rediss":
	case "redis+cluster", "rediss+cluster":
		kind = "cluster"
	case "redis+sentinel", "rediss+sentinel":
		kind = "sentinel"
	default:
		return nil, "", fmt.Errorf("scheme %q is not redis, rediss, redis+cluster or redis+sentinel", u.Scheme)
	}
	u.Scheme, _, _ = strings.Cut(u.Scheme, "+")
	q := u.Query()
	if kind == "" && q.Has("master_name") {
		kind = "sentinel"
	}
	if kind == "" && q.Has("addr") {
		kind = "cluster"
	}
	if u.Host == "" {
		return nil, "", errors.New("no host")
	}

	var opts *redis.UniversalOptions
	switch kind {
	case "sentinel":
		if !q.Has("master_name") {
			return nil, "", errors.New("a Sentinel URL needs master_name=")
		}
		fo, err := redis.ParseFailoverURL(u.String())
		if err != nil {
			return nil, "", err
		}
		opts = &redis.UniversalOptions{
			Addrs: fo.SentinelAddrs, MasterName: fo.MasterName,
			SentinelUsername: fo.SentinelUsername, SentinelPassword: fo.SentinelPassword,
			Username: fo.Username, Password: fo.Password, DB: fo.DB, TLSConfig: fo.TLSConfig,
		}
	case "cluster":
		co, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, "", err
		}
		opts = &redis.UniversalOptions{
			Addrs: co.Addrs, Username: co.Username, Password: co.Password, TLSConfig: co.TLSConfig,
			// NewUniversalClient makes a cluster client only for several
			// addresses or this flag.
			IsClusterMode: true,
		}
	default:
		o, err := redis.ParseURL(u.String())
		if err != nil {
			return nil, "", err
		}
		opts = &redis.UniversalOptions{
			Addrs: []string{o.Addr}, Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig,
		}
		kind = "server"
	}
	// The rate-limit store bounds each decision and each round trip itself
	// (PORTAL_REDIS_TIMEOUT, through its commands' contexts), so a busy
	// host's stall shorter than that is waited out; openRedis sets the
	// socket timeouts to the same, for calls without a deadline.
	opts.ContextTimeoutEnabled = true
	opts.DialTimeout = 2 * time.Second
	// A Redis that is down refuses connections: fail at once rather than
	// retry dials until the decision's deadline (docs/failure.md).
	redisstore.FailFast(opts)
	return opts, fmt.Sprintf("redis %s at %s", kind, strings.Join(opts.Addrs, ",")), nil
}

// openRedis connects to REDIS_URL and checks it answers. timeout is
// PORTAL_REDIS_TIMEOUT: a socket timeout no shorter than the decisions'
// never cuts one short (a batch's context expires first), and it bounds the
// calls that carry no deadline of their own.
func openRedis(ctx context.Context, raw string, timeout time.Duration) (redis.UniversalClient, string, error) {
	opts, desc, err := redisOptions(raw)
	if err != nil {
		return nil, "", err
	}
	opts.ReadTimeout, opts.WriteTimeout = timeout, timeout
	client := redis.NewUniversalClient(opts)
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Ping(pingCtx).Err(); err != nil {
		_ = client.Close()
		return nil, desc, fmt.Errorf("cannot reach %s: %w", desc, err)
	}
	return client, desc, nil
}

// dashboardRedis returns a client of REDIS_URL for the dashboards alone: a
// pool of its own (PORTAL_DASHBOARD_REDIS_POOL connections) and its own
// timeouts (PORTAL_DASHBOARD_REDIS_TIMEOUT), so a hundred live views reading
// Redis neither take the request path's connections nor wait in its
// pipeline, and their timeouts never reach its circuit breaker.
func dashboardRedis(raw string, pool int, timeout time.Duration) (redis.UniversalClient, error) {
	opts, _, err := redisOptions(raw)
	if err != nil {
		return nil, err
	}
	opts.PoolSize = pool
	opts.ReadTimeout, opts.WriteTimeout = timeout, timeout
	return redis.NewUniversalClient(opts), nil
}
