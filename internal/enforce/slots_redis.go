package enforce

import (
	"context"
	"crypto/rand"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
	args = append(args, op, id, lease.Microseconds(), len(keys))
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

// runSlots runs one operation of the script (op, its arguments and keys)
// under the store's timeout and returns its reply: now, allowed, then per
// key has a slot and in flight. On a single Redis, operations queued
// meanwhile share one script call (see slotPipe).
func (s *RedisStore) runSlots(ctx context.Context, keys []string, op []any) ([]int64, error) {
	now := s.slotsNow()
	if s.onePerScript || s.slots.direct {
		ctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		vals, err := slotsScript.Run(ctx, s.client, keys, append([]any{now}, op...)...).Int64Slice()
		if err != nil {
			return nil, classify(err)
		}
		return vals, nil
	}
	c := &slotCall{keys: keys, op: op, now: now, done: make(chan struct{}, 1)}
	p := &s.slots
	p.once.Do(func() {
		p.queue = make(chan *slotCall, 4096)
		for range 2 {
			go s.slotWorker()
		}
	})
	timer := time.NewTimer(s.timeout)
	defer timer.Stop()
	select {
	case p.queue <- c:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrStoreUnavailable, ctx.Err())
	case <-timer.C:
		return nil, fmt.Errorf("%w: slot operation queued past %s", ErrStoreUnavailable, s.timeout)
	case <-s.stop:
		return nil, errStoreClosed
	}
	select {
	case <-c.done:
		return c.reply, c.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrStoreUnavailable, ctx.Err())
	case <-timer.C:
		return nil, fmt.Errorf("%w: no slot answer within %s", ErrStoreUnavailable, s.timeout)
	}
}

// slotPipe batches slot operations: concurrent acquisitions and releases
// share one call of the script, as decisions share one of decide.lua, so
// a concurrency layer costs Redis one command per batch rather than two
// per request. Two workers, started with the first operation, keep one
// batch in flight while the next gathers; they stop when the store closes.
type slotPipe struct {
	once  sync.Once
	queue chan *slotCall
	// direct, for the benchmark, sends each operation in a call of its own.
	direct bool
}

// slotCall is one operation waiting for its batch. done is buffered, so a
// worker never blocks on a caller that gave up.
type slotCall struct {
	keys  []string
	op    []any
	now   string
	reply []int64
	err   error
	done  chan struct{}
}

// maxSlotBatch caps the operations of one script call.
const maxSlotBatch = 128

func (s *RedisStore) slotWorker() {
	batch := make([]*slotCall, 0, maxSlotBatch)
	for {
		select {
		case c := <-s.slots.queue:
			batch = append(batch[:0], c)
		drain:
			for len(batch) < maxSlotBatch {
				select {
				case c := <-s.slots.queue:
					batch = append(batch, c)
				default:
					break drain
				}
			}
			// Operations of one call share its clock: a test clock that
			// moved between them splits the batch.
			for from := 0; from < len(batch); {
				to := from + 1
				for to < len(batch) && batch[to].now == batch[from].now {
					to++
				}
				s.runSlotBatch(batch[from:to])
				from = to
			}
			clear(batch)
		case <-s.stop:
			return
		}
	}
}

// runSlotBatch runs calls in one script call and hands each its reply.
func (s *RedisStore) runSlotBatch(calls []*slotCall) {
	var keys []string
	args := []any{calls[0].now}
	for _, c := range calls {
		keys = append(keys, c.keys...)
		args = append(args, c.op...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	vals, err := slotsScript.Run(ctx, s.client, keys, args...).Int64Slice()
	cancel()
	at := 1
	for _, c := range calls {
		n := 1 + 2*len(c.keys)
		switch {
		case err != nil:
			c.err = classify(err)
		case at+n > len(vals):
			c.err = fmt.Errorf("slots script: reply of %d values for a batch of %d", len(vals), len(calls))
		default:
			c.reply = append([]int64{vals[0]}, vals[at:at+n]...)
		}
		at += n
		c.done <- struct{}{}
	}
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
	_, err := s.runSlots(ctx, l.keys, slotOp("r", l))
	return err
}

func (s *RedisStore) renewSlots(ctx context.Context, l *Lease) error {
	if len(l.keys) == 0 {
		return nil
	}
	reply, err := s.runSlots(ctx, l.keys, slotOp("n", l))
	if err != nil {
		return err
	}
	l.expires = time.UnixMicro(reply[0]).Add(l.lease)
	return nil
}

// slotOp is the script arguments of releasing or renewing l.
func slotOp(op string, l *Lease) []any {
	args := []any{op, l.id, l.lease.Microseconds(), len(l.keys)}
	for range l.keys {
		args = append(args, 0)
	}
	return args
}
