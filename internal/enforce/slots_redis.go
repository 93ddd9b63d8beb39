package enforce

import (
	"context"
	"crypto/rand"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/slots.lua
var slotsSource string

// slotsScript is run with EVALSHA, loaded again on NOSCRIPT by go-redis.
var slotsScript = redis.NewScript(slotsSource)

// AcquireSlots takes a slot of every concurrency limit of req in one call
// of scripts/slots.lua (see SlotStore). A limit's slots are the sorted set
// <prefix>{<subject>}:cc:<name> (<...>:cc:<key>|<name> for a PerKey limit)
// of lease ids scored by their expiry, under the subject's hash tag, so
// every instance sharing the Redis counts the same slots.
func (s *RedisStore) AcquireSlots(ctx context.Context, req Request, lease time.Duration) (*Lease, Decision, error) {
	return s.slotsCall(ctx, req, lease, "a")
}

// peekAll is Peek for a request with concurrency limits.
func (s *RedisStore) peekAll(ctx context.Context, req Request) (Decision, error) {
	return peekWithSlots(ctx, req, func(ctx context.Context, r Request) (Decision, error) { return s.decide(ctx, r, false, nil) },
		func(ctx context.Context, r Request) (Decision, error) {
			_, d, err := s.slotsCall(ctx, r, DefaultSlotLease, "p")
			return d, err
		})
}

func (s *RedisStore) slotKeys(req *Request) []string {
	tag := s.prefix + "{" + req.Subject + "}:cc:"
	keys := make([]string, len(req.Limits))
	for i, l := range req.Limits {
		if l.PerKey && req.Key != "" {
			keys[i] = tag + req.Key + "|" + l.Name
		} else {
			keys[i] = tag + l.Name
		}
	}
	return keys
}

// slotsNow is the script's clock argument: "" for Redis TIME.
func (s *RedisStore) slotsNow() string {
	if s.testNow == nil {
		return ""
	}
	return strconv.FormatInt(s.testNow().UnixMicro(), 10)
}

func (s *RedisStore) slotsCall(ctx context.Context, req Request, lease time.Duration, op string) (*Lease, Decision, error) {
	if err := validateSlots(req, lease); err != nil {
		return nil, Decision{}, err
	}
	keys := s.slotKeys(&req)
	id := ""
	if op == "a" {
		id = rand.Text()
	}
	args := make([]any, 0, 4+len(keys))
	args = append(args, op, s.slotsNow(), id, lease.Microseconds())
	for _, l := range req.Limits {
		n := l.Limit
		if l.Mode == ModeShadow {
			n = -n
		}
		args = append(args, n)
	}
	reply, err := s.runSlots(ctx, keys, args)
	if err != nil {
		return nil, Decision{}, err
	}
	if len(reply) != 2+2*len(keys) {
		return nil, Decision{}, fmt.Errorf("slots script: reply of %d values for %d limits", len(reply), len(keys))
	}
	d := Decision{At: time.UnixMicro(reply[0]), Allowed: reply[1] == 1, Layers: make([]LayerResult, len(keys))}
	for i, l := range req.Limits {
		d.Layers[i] = slotOut(l, reply[2+2*i] == 1, reply[3+2*i])
	}
	if op != "a" || !d.Allowed {
		return nil, d, nil
	}
	held := &Lease{holder: s, kind: leaseRedis, id: id, lease: lease, expires: d.At.Add(lease)}
	for i := range keys {
		if d.Layers[i].Allowed {
			held.keys = append(held.keys, keys[i])
		}
	}
	return held, d, nil
}

// runSlots runs the script under the store's timeout and returns its
// integer reply.
func (s *RedisStore) runSlots(ctx context.Context, keys []string, args []any) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	vals, err := slotsScript.Run(ctx, s.client, keys, args...).Int64Slice()
	if err != nil {
		return nil, classify(err)
	}
	return vals, nil
}

// ReleaseToken releases the lease a token names (see SlotStore). Only
// slot keys of this store's prefix are touched.
func (s *RedisStore) ReleaseToken(ctx context.Context, token string) error {
	kind, id, keys, err := parseLeaseToken(token)
	if err != nil {
		return err
	}
	if kind != leaseRedis {
		return fmt.Errorf("%w: lease token of another store", ErrInvalidRequest)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, s.prefix+"{") || !strings.Contains(k, "}:cc:") {
			return fmt.Errorf("%w: lease token names a key that is no slot", ErrInvalidRequest)
		}
	}
	return s.releaseSlots(ctx, &Lease{id: id, keys: keys, lease: DefaultSlotLease})
}

func (s *RedisStore) releaseSlots(ctx context.Context, l *Lease) error {
	if len(l.keys) == 0 {
		return nil
	}
	_, err := s.runSlots(ctx, l.keys, []any{"r", s.slotsNow(), l.id, l.lease.Microseconds()})
	return err
}

func (s *RedisStore) renewSlots(ctx context.Context, l *Lease) error {
	if len(l.keys) == 0 {
		return nil
	}
	reply, err := s.runSlots(ctx, l.keys, []any{"n", s.slotsNow(), l.id, l.lease.Microseconds()})
	if err != nil {
		return err
	}
	l.expires = time.UnixMicro(reply[0]).Add(l.lease)
	return nil
}
