package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/enforce"
)

// do queues call for the next pipeline and waits for its reply, at most
// the store's timeout in all (checked at each tick of watch, so a caller
// gives up between Timeout and 9/8 of it). A shared tick instead of a
// timer per call: Reset and Stop of a pooled timer cost 2 % of the store's
// CPU under 64 callers, and the tick holds even when the Redis client does
// not honour context deadlines on its sockets.
//
// The caller's context is watched only when it has a deadline of its own
// (a failover.Store's, say), which the wait then honours: a request's
// context from net/http has none, can only be cancelled, and Done would
// allocate its channel for every decision just to let a caller whose
// client has gone return a few hundred microseconds sooner; the decision
// is made by Redis all the same.
func (s *Store) do(ctx context.Context, call *redisCall) error {
	select {
	case <-s.stop:
		s.putCall(call)
		return errStoreClosed
	default:
	}
	start := time.Now()
	var cancelled <-chan struct{}
	if _, ok := ctx.Deadline(); ok {
		cancelled = ctx.Done()
	}
	// The common case, room in the queue, takes a one-channel send instead
	// of a select locking four channels.
	select {
	case s.queue <- call:
		return s.wait(ctx, call, start, cancelled)
	default:
	}
	for {
		select {
		case s.queue <- call:
			return s.wait(ctx, call, start, cancelled)
		case <-*s.tick.Load():
			if time.Since(start) < s.timeout {
				continue
			}
			s.putCall(call)
			// Stuck behind the batches in flight: their failure, not a new one.
			// A timeout like the others: the breaker names the reason by it.
			return &batchError{batch: s.batches.Load(), err: fmt.Errorf("%w: no pipeline free within %s: %w", enforce.ErrStoreUnavailable, s.timeout, context.DeadlineExceeded)}
		case <-cancelled:
			s.putCall(call)
			return ctx.Err()
		case <-s.stop:
			s.putCall(call)
			return errStoreClosed
		}
	}
}

// wait waits for the reply to call, queued by do at start.
func (s *Store) wait(ctx context.Context, call *redisCall, start time.Time, cancelled <-chan struct{}) error {
	for {
		select {
		case <-call.done:
			return s.replied(call)
		case <-*s.tick.Load():
			if time.Since(start) < s.timeout {
				continue
			}
			select {
			case <-call.done:
				// The reply is here too: this goroutine ran late (a starved
				// host) and select picks among ready cases at random. The
				// decision is Redis's; do not throw it away.
				return s.replied(call)
			default:
			}
			// The script may still run; the caller treats the decision as
			// unavailable, which the failure mode then governs. The worker
			// still owns call, so it is not pooled. A call still queued waits
			// behind the latest batch, and shares its cause.
			batch := call.batch.Load()
			if batch == 0 {
				batch = s.batches.Load()
			}
			return &batchError{batch: batch, err: fmt.Errorf("%w: no reply within %s: %w", enforce.ErrStoreUnavailable, s.timeout, context.DeadlineExceeded)}
		case <-cancelled:
			return ctx.Err()
		}
	}
}

// watch closes and replaces s.tick every tickEvery until the store closes,
// waking the callers that wait so that each checks its deadline.
func (s *Store) watch() {
	defer s.wg.Done()
	ticker := time.NewTicker(s.tickEvery)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
			next := make(chan struct{})
			close(*s.tick.Swap(&next))
		case <-s.stop:
			return
		}
	}
}

// replied returns the outcome of call, whose reply has arrived.
func (s *Store) replied(call *redisCall) error {
	if call.err != nil {
		err := call.err
		s.putCall(call)
		return err
	}
	return nil
}

// work sends whatever decisions are queued as one batch, so an idle store
// adds no latency and a busy one shares round trips and script calls.
func (s *Store) work() {
	defer s.wg.Done()
	batch := make([]*redisCall, 0, s.maxBatch)
	w := newBatcher(s.maxBatch)
	var pc *pipeConn
	if s.direct != nil {
		pc = newPipeConn(s.direct, s.timeout)
		defer pc.close()
	}
	last := 0
	for {
		select {
		case c := <-s.queue:
			batch = append(batch[:0], c)
		case <-s.stop:
			return
		}
		if last > 1 {
			// Under concurrency, let the goroutines already runnable (a
			// server's handlers, about to decide) queue their decisions
			// before the batch is cut: fewer, fuller round trips cost Redis
			// and this process fewer system calls per decision. A lone
			// caller never waits for this. (Yielding also whenever the other
			// pipeline was in flight made no difference to the portal's CPU
			// per request, 0.92 - 1.00x over 4 interleaved rounds at load 5.)
			runtime.Gosched()
		}
	fill:
		for len(batch) < s.maxBatch {
			select {
			case c := <-s.queue:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		s.run(batch, w, pc)
		last = len(batch)
		clear(batch)
	}
}

// batcher is a pipeline worker's scratch space: coalesce's leaders, and the
// script calls and their keys, arguments and limits being built.
type batcher struct {
	leaders   []*redisCall
	bySubject map[string]*redisCall
	scripts   []script
	args      []any // the call's arguments: clock, limit count, limits
	reqs      []any // the requests' arguments, appended to args
	numbers   map[*limitArgs]int64
	vals      [][]replyValue // each script call's reply values
	replies   []scriptReply  // the replies read by pipeConn
}

func newBatcher(maxBatch int) *batcher {
	return &batcher{
		leaders:   make([]*redisCall, 0, maxBatch),
		bySubject: make(map[string]*redisCall),
		numbers:   make(map[*limitArgs]int64),
	}
}

// script is one call of the decision script: the requests of
// leaders[from:to], sharing one clock argument.
type script struct{ from, to int }

// coalesce turns a batch into the requests to send: identical Allow calls
// (same subject, limits and clock argument) share one request that the
// script decides k times over, one after the other (mode k), which costs
// Redis one state read and write instead of k. A hot subject (one API key,
// one client IP) is the case this serves; it changes no decision, since k
// requests in one script call run back to back just the same.
func (w *batcher) coalesce(batch []*redisCall) []*redisCall {
	leaders := w.leaders[:0]
	clear(w.bySubject)
	for _, c := range batch {
		c.next, c.count = nil, 1
		if c.mode != "a" {
			leaders = append(leaders, c)
			continue
		}
		l := w.bySubject[c.keys[0]]
		if l != nil && sameCall(l, c) {
			c.next, l.next = l.next, c
			l.count++
			continue
		}
		if l == nil {
			// The subject's first Allow call leads; one with other limits
			// (another route) runs on its own.
			w.bySubject[c.keys[0]] = c
		}
		leaders = append(leaders, c)
	}
	w.leaders = leaders
	return leaders
}

func sameCall(a, b *redisCall) bool {
	return a.now == b.now && a.mode == b.mode && slices.Equal(a.keys, b.keys) && slices.EqualFunc(a.limits, b.limits, sameArgs)
}

// sameArgs reports whether two limits' arguments are the same: the same
// cached pointer, or a key's scoped copies of one limit, built per decision.
func sameArgs(a, b *limitArgs) bool {
	return a == b || (a.field == b.field && a.args == b.args)
}

// group splits leaders into script calls: one for the lot when the client
// is a single Redis, one per leader when keys live on several nodes, and a
// new one wherever the clock argument changes (tests set it per call).
func (w *batcher) group(leaders []*redisCall, onePerScript bool) []script {
	scripts := w.scripts[:0]
	for i, c := range leaders {
		if n := len(scripts); n > 0 && !onePerScript && leaders[scripts[n-1].from].now == c.now {
			scripts[n-1].to = i + 1
			continue
		}
		scripts = append(scripts, script{from: i, to: i + 1})
	}
	w.scripts = scripts
	return scripts
}

func (s *Store) run(batch []*redisCall, w *batcher, pc *pipeConn) {
	start := time.Now()
	deadline := start.Add(s.timeout)
	gen := s.batches.Add(1)
	for _, c := range batch {
		c.batch.Store(gen)
	}
	leaders := w.coalesce(batch)
	scripts := w.group(leaders, s.onePerScript)
	ctx := batchCtx{deadline: deadline}
	defer ctx.done()
	var replies []scriptReply
	scratch := len(scripts) // w.vals in use: a later read of the batch goes past them
	if pc != nil {
		var lost []int
		replies, lost = pc.send(s, w, leaders, scripts, deadline)
		if len(lost) > 0 {
			// Unsent or unanswered on the worker's connection: go-redis
			// sends them, with its own retries, as it would have.
			resend := make([]script, len(lost))
			for j, i := range lost {
				resend[j] = scripts[i]
			}
			for j, r := range s.read(w, s.exec(ctx.get(), w, leaders, resend, s.raw), scratch) {
				replies[lost[j]] = r
			}
			scratch += len(resend)
		}
	} else {
		replies = s.read(w, s.exec(ctx.get(), w, leaders, scripts, s.raw), 0)
	}
	if failed(replies) {
		if retry, at := s.retries(ctx.get(), replies, scripts); len(retry) > 0 {
			// Sent again through go-redis's own reading, whose retries and
			// redirections then apply; the rest keep their replies.
			for j, r := range s.read(w, s.exec(ctx.get(), w, leaders, retry, false), scratch) {
				replies[at[j]] = r
			}
		}
	}
	if s.metrics != nil {
		s.metrics.Latency.Observe(time.Since(start).Seconds())
		s.metrics.Batch.Observe(float64(len(batch)))
	}
	for i, sc := range scripts {
		deliver(leaders[sc.from:sc.to], replies[i], gen)
	}
}

// batchCtx is a batch's context, made on first use: only a batch that
// go-redis carries needs one, and a context with its timer per batch was
// three of the worker's allocations.
type batchCtx struct {
	deadline time.Time
	ctx      context.Context
	cancel   context.CancelFunc
}

func (b *batchCtx) get() context.Context {
	if b.ctx == nil {
		b.ctx, b.cancel = context.WithDeadline(context.Background(), b.deadline)
	}
	return b.ctx
}

func (b *batchCtx) done() {
	if b.cancel != nil {
		b.cancel()
	}
}

// failed reports whether any of replies is an error.
func failed(replies []scriptReply) bool {
	for _, r := range replies {
		if r.err != nil {
			return true
		}
	}
	return false
}

// retries returns the script calls of replies to send again, and their
// places: after a NOSCRIPT (Redis restarted or SCRIPT FLUSH ran), once the
// script is loaded again, those that did not run; and those that a raw reply
// failed with an error go-redis retries itself (LOADING, READONLY, ...),
// which the script did not run either.
func (s *Store) retries(ctx context.Context, replies []scriptReply, scripts []script) (retry []script, at []int) {
	loaded := false
	for i, r := range replies {
		switch {
		case r.err == nil:
			continue // the common case: HasErrorPrefix allocates even for nil
		case isNoScript(r.err):
			if !loaded {
				if s.reload(ctx) != nil {
					if refused := s.refused.Load(); refused != nil {
						// Too old a Redis: the reason, not NOSCRIPT.
						for j := i; j < len(replies); j++ {
							if replies[j].err != nil && isNoScript(replies[j].err) {
								replies[j].err = *refused
							}
						}
					}
					continue
				}
				loaded = true
			}
		case !r.raw || !retriedByClient(r.err):
			continue
		}
		retry, at = append(retry, scripts[i]), append(at, i)
	}
	return retry, at
}

// retriedByClient reports whether err is a Redis error reply that go-redis
// retries (or redirects) when it reads the reply itself.
func retriedByClient(err error) bool {
	for _, prefix := range [...]string{"LOADING ", "READONLY ", "MASTERDOWN ", "TRYAGAIN ", "CLUSTERDOWN ", "MOVED ", "ASK "} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// exec sends the script calls, in one pipeline when there are several;
// raw asks for their replies unread (see scriptReply).
func (s *Store) exec(ctx context.Context, w *batcher, leaders []*redisCall, scripts []script, raw bool) []redis.Cmder {
	cmds := make([]redis.Cmder, len(scripts))
	if len(scripts) == 1 {
		cmds[0] = s.evalSha(ctx, s.client, w, leaders[scripts[0].from:scripts[0].to], raw)
		return cmds
	}
	pipe := s.client.Pipeline()
	for i, sc := range scripts {
		cmds[i] = s.evalSha(ctx, pipe, w, leaders[sc.from:sc.to], raw)
	}
	// Each command carries its own error; Exec's is the first of them.
	_, _ = pipe.Exec(ctx)
	return cmds
}

// evalSha queues (or, on a client, runs) one script call deciding reqs
// (see scriptArgs). The command is built here rather than by EvalSha,
// which boxes every key string into its argument list (one allocation per
// decision).
func (s *Store) evalSha(ctx context.Context, c processor, w *batcher, reqs []*redisCall, raw bool) redis.Cmder {
	cmdArgs := s.scriptArgs(nil, w, reqs) // the command's own: go-redis keeps it
	var cmd redis.Cmder
	if raw {
		raw := redis.NewRawCmd(ctx, cmdArgs...)
		raw.SetFirstKeyPos(3)
		cmd = raw
	} else {
		boxed := redis.NewCmd(ctx, cmdArgs...)
		boxed.SetFirstKeyPos(3) // a Cluster client routes the call by its first key
		cmd = boxed
	}
	_ = c.Process(ctx, cmd)
	return cmd
}

// scriptArgs appends to dst the EVALSHA command deciding reqs, all of one
// clock: each distinct limit's eight arguments once, then each request as
// its mode, its limit count and its limits' numbers in that list, so a
// batch of one plan's requests sends Redis three arguments a request
// rather than eight. The keys go in as pointers into the calls, which the
// worker owns until it delivers; w's scratch slices are reused.
func (s *Store) scriptArgs(dst []any, w *batcher, reqs []*redisCall) []any {
	args, rest := w.args[:0], w.reqs[:0]
	clear(w.numbers)
	nkeys := 0
	for _, r := range reqs {
		nkeys += len(r.keys)
	}
	args = append(args, reqs[0].now, nil) // the limit count is set below
	if uniform(reqs) {
		// One plan's requests, the common case: their mode and limits
		// once, 'u' first, instead of three arguments a request.
		first := reqs[0]
		rest = append(rest, "u", first.mode, int64(len(first.limits)))
		for j, la := range first.limits {
			args = append(args, la.args[:]...)
			rest = append(rest, int64(j+1))
		}
		args[1] = int64(len(first.limits))
	} else {
		for _, r := range reqs {
			if r.count > 1 {
				rest = append(rest, int64(r.count))
			} else {
				rest = append(rest, r.mode)
			}
			rest = append(rest, int64(len(r.limits)))
			for _, la := range r.limits {
				j, ok := w.numbers[la]
				if !ok {
					j = int64(len(w.numbers) + 1)
					w.numbers[la] = j
					args = append(args, la.args[:]...)
				}
				rest = append(rest, j)
			}
		}
		args[1] = int64(len(w.numbers))
	}
	dst = slices.Grow(dst, 3+nkeys+len(args)+len(rest))
	dst = append(dst, "evalsha", s.sha, int64(nkeys))
	for _, r := range reqs {
		for i := range r.keys {
			dst = append(dst, &r.keys[i])
		}
	}
	dst = append(dst, args...)
	dst = append(dst, rest...)
	clear(args)
	clear(rest)
	w.args, w.reqs = args[:0], rest[:0]
	return dst
}

// processor is what evalSha sends a command with: a client, or a pipeline
// that queues it.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// uniform reports whether reqs, two or more, share one mode and the same
// limits, none coalesced: the script then takes their mode and limits once
// for the lot (see decide.lua), which spares Redis two arguments a request
// to parse and convert, and the script the reading of them.
func uniform(reqs []*redisCall) bool {
	if len(reqs) < 2 {
		return false
	}
	first := reqs[0]
	for _, r := range reqs {
		if r.count > 1 || r.mode != first.mode || !slices.EqualFunc(r.limits, first.limits, sameArgs) {
			return false
		}
	}
	return true
}

// deliver hands each request of one script call its values from the
// reply ({now, then per request and coalesced call: allowed, delay, four per
// limit}, or an error in place of a request's values) and signals its
// callers. Each caller's reply is allowed, delay, now, four per limit. An
// error carries the batch's number, gen: the calls failed together.
func deliver(reqs []*redisCall, reply scriptReply, gen uint64) {
	values, err := reply.vals, reply.err
	var now int64
	if err == nil {
		now, values = values[0].n, values[1:]
	} else {
		err = &batchError{batch: gen, err: err}
	}
	for _, l := range reqs {
		callErr := err
		var mine []replyValue
		per := 2 + 4*len(l.limits) // values of one decision
		if callErr == nil {
			switch {
			case len(values) > 0 && values[0].err != nil:
				callErr = &batchError{batch: gen, err: classify(values[0].err)}
				values = values[1:]
			case len(values) < per*l.count:
				callErr = fmt.Errorf("rate-limit script: reply too short: %d values left for %d calls of %d limits", len(values), l.count, len(l.limits))
				err = callErr // the rest of the reply cannot be trusted
			default:
				mine, values = values[:per*l.count], values[per*l.count:]
			}
		}
		j := 0
		for c := l; c != nil; j++ {
			next := c.next // c belongs to its caller again once signalled
			c.err = callErr
			if callErr == nil {
				c.reply, c.err = appendValues(c.reply[:0], mine[j*per:(j+1)*per], now)
			}
			c.done <- struct{}{}
			c = next
		}
	}
}

// batchError is the failure of a call that failed with the rest of its
// batch (one script call or pipeline, or the queue behind one): a
// failover.Store counts the failures of one batch as one, so one stalled
// round trip under 64 callers is not taken for 64 failures.
type batchError struct {
	batch uint64
	err   error
}

func (e *batchError) Error() string { return e.err.Error() }
func (e *batchError) Unwrap() error { return e.err }

// FailureCause is the number of the batch, shared by its calls' errors.
func (e *batchError) FailureCause() uint64 { return e.batch }
