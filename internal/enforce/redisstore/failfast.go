package redisstore

import "github.com/redis/go-redis/v9"

// FailFast sets o so that a Redis that refuses or resets connections fails
// a command at once: one dial attempt per command (go-redis makes five,
// 100 ms apart, by default) and no command retries (go-redis retries a
// failed dial three times with backoff), which together waited out a
// decision's whole timeout against a Redis that was down. A command whose
// connection breaks is not sent again either: the decisions behind a
// failover.Store go to the local store instead, and the breaker, not
// retries, decides when Redis is tried again. After PoolSize failed dials
// in a row, go-redis dials no more until a background probe (one a second)
// connects.
func FailFast(o *redis.UniversalOptions) {
	o.DialerRetries = 1
	o.MaxRetries = -1
}
