package redisstore

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
	"github.com/sluicehq/sluice/internal/enforce"
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
func (s *Store) AcquireSlots(ctx context.Context, req enforce.Request, lease time.Duration) (*enforce.Lease, enforce.Decision, error) {
	return s.slotsCall(ctx, req, lease, "a")
}

// peekAll is Peek for a request with concurrency limits.
func (s *Store) peekAll(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return enforce.PeekWithSlots(ctx, req, func(ctx context.Context, r enforce.Request) (enforce.Decision, error) {
		return s.decide(ctx, r, false, nil)
	},
		func(ctx context.Context, r enforce.Request) (enforce.Decision, error) {
			_, d, err := s.slotsCall(ctx, r, enforce.DefaultSlotLease, "p")
			return d, err
		})
}

func (s *Store) slotKeys(req *enforce.Request) []string {
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
func (s *Store) slotsNow() string {
	if s.testNow == nil {
		return ""
	}
	return strconv.FormatInt(s.testNow().UnixMicro(), 10)
}

func (s *Store) slotsCall(ctx context.Context, req enforce.Request, lease time.Duration, op string) (*enforce.Lease, enforce.Decision, error) {
	if err := enforce.ValidateSlots(req, lease); err != nil {
		return nil, enforce.Decision{}, err
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
		if l.Mode == enforce.ModeShadow {
			n = -n
		}
		args = append(args, n)
	}
	reply, err := s.runSlots(ctx, keys, args)
	if err != nil {
		return nil, enforce.Decision{}, err
	}
	if len(reply) != 2+2*len(keys) {
		return nil, enforce.Decision{}, fmt.Errorf("slots script: reply of %d values for %d limits", len(reply), len(keys))
	}
	d := enforce.Decision{At: time.UnixMicro(reply[0]), Allowed: reply[1] == 1, Layers: make([]enforce.LayerResult, len(keys))}
	for i, l := range req.Limits {
		d.Layers[i] = enforce.SlotOut(l, reply[2+2*i] == 1, reply[3+2*i])
	}
	if op != "a" || !d.Allowed {
		return nil, d, nil
	}
	held := &enforce.Lease{Holder: s, Kind: enforce.LeaseRedis, LeaseID: id, Duration: lease, ExpiresAt: d.At.Add(lease)}
	for i := range keys {
		if d.Layers[i].Allowed {
			held.Keys = append(held.Keys, keys[i])
		}
	}
	return held, d, nil
}

// runSlots runs one operation of the script (op, its arguments and keys)
// under the store's timeout and returns its reply: now, allowed, then per
// key has a slot and in flight. On a single Redis, operations queued
// meanwhile share one script call (see slotPipe).
func (s *Store) runSlots(ctx context.Context, keys []string, op []any) ([]int64, error) {
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
		return nil, fmt.Errorf("%w: %w", enforce.ErrStoreUnavailable, ctx.Err())
	case <-timer.C:
		return nil, fmt.Errorf("%w: slot operation queued past %s", enforce.ErrStoreUnavailable, s.timeout)
	case <-s.stop:
		return nil, errStoreClosed
	}
	select {
	case <-c.done:
		return c.reply, c.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", enforce.ErrStoreUnavailable, ctx.Err())
	case <-timer.C:
		return nil, fmt.Errorf("%w: no slot answer within %s", enforce.ErrStoreUnavailable, s.timeout)
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

func (s *Store) slotWorker() {
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
func (s *Store) runSlotBatch(calls []*slotCall) {
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
func (s *Store) ReleaseToken(ctx context.Context, token string) error {
	kind, id, keys, err := enforce.ParseLeaseToken(token)
	if err != nil {
		return err
	}
	if kind != enforce.LeaseRedis {
		return fmt.Errorf("%w: lease token of another store", enforce.ErrInvalidRequest)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, s.prefix+"{") || !strings.Contains(k, "}:cc:") {
			return fmt.Errorf("%w: lease token names a key that is no slot", enforce.ErrInvalidRequest)
		}
	}
	return s.ReleaseSlots(ctx, &enforce.Lease{LeaseID: id, Keys: keys, Duration: enforce.DefaultSlotLease})
}

func (s *Store) ReleaseSlots(ctx context.Context, l *enforce.Lease) error {
	if len(l.Keys) == 0 {
		return nil
	}
	_, err := s.runSlots(ctx, l.Keys, slotOp("r", l))
	return err
}

func (s *Store) RenewSlots(ctx context.Context, l *enforce.Lease) error {
	if len(l.Keys) == 0 {
		return nil
	}
	op := slotOp("n", l)
	for i := range l.Keys {
		op[4+i] = l.ExpiresAt.UnixMicro()
	}
	reply, err := s.runSlots(ctx, l.Keys, op)
	if err != nil {
		return err
	}
	// A lease that had run out stays lost (its slots may be another's):
	// its term does not move, so a later renewal does not revive it.
	for i := range l.Keys {
		if len(reply) < 3+2*i || reply[2+2*i] != 1 {
			return nil
		}
	}
	l.ExpiresAt = time.UnixMicro(reply[0]).Add(l.Duration)
	return nil
}

// slotOp is the script arguments of releasing or renewing l.
func slotOp(op string, l *enforce.Lease) []any {
	args := []any{op, l.LeaseID, l.Duration.Microseconds(), len(l.Keys)}
	for range l.Keys {
		args = append(args, 0)
	}
	return args
}
