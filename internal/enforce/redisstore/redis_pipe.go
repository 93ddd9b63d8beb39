package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipeConn is one pipeline worker's own connection to a single Redis, which
// carries the decision script's calls and nothing else: each batch's
// EVALSHA is written from scratch buffers in one write, and its reply read
// into a reused buffer for parseReply. Through go-redis a batch took a
// connection from the pool and returned it, armed a context, a timer and
// two socket deadlines, built a command and copied its reply out; this way
// the process spends about a fifth less CPU per decision (64 callers, 1,000
// subjects: 2.02 -> 1.65 s per 300,000 decisions, medians of 5 alternating
// runs; 8 callers, smaller batches: 2.26 -> 1.85 s per 100,000) and 416 ->
// 245 bytes (BenchmarkRedisStore). go-redis still carries everything else
// (script loading, usage, slots), and any batch this connection cannot: one
// it could not dial or write, or whose reply it lost before the deadline
// (go-redis then sends it with its own retries, as it always did), and
// every batch once Redis refused its handshake.
//
// The connection speaks RESP2 and is set up as go-redis sets up its own
// from the client's options: its Dialer (which does TLS when the client
// has a TLSConfig), AUTH with Username and Password, SELECT DB, CLIENT
// SETNAME ClientName. A client that authenticates through a credentials
// provider, or has OnConnect or a Limiter, gets no pipeConn (see
// directOptions). The client's hooks do not see the script calls sent here
// (Options.ViaClient).
type pipeConn struct {
	opt     *redis.Options
	timeout time.Duration
	conn    net.Conn
	rd      *bufio.Reader
	out     []byte // the commands being written
	in      []byte // the reply being read
	args    []any  // one command's arguments (scriptArgs)
	lost    []int
	// retryAt: a dial failed, and go-redis carries the batches until then.
	retryAt time.Time
	// refused: Redis refused the handshake (a wrong password, say), and
	// go-redis carries every batch, and reports why.
	refused bool
}

// directOptions returns c's options when pipeline workers may dial
// connections of their own from them, nil when the connection set-up
// needs go-redis's code.
func directOptions(c *redis.Client) *redis.Options {
	opt := c.Options()
	if opt.Dialer == nil || opt.OnConnect != nil || opt.Limiter != nil || opt.CredentialsProvider != nil ||
		opt.CredentialsProviderContext != nil || opt.StreamingCredentialsProvider != nil {
		return nil
	}
	return opt
}

func newPipeConn(opt *redis.Options, timeout time.Duration) *pipeConn {
	return &pipeConn{opt: opt, timeout: timeout}
}

func (pc *pipeConn) close() {
	if pc.conn != nil {
		_ = pc.conn.Close()
		pc.conn = nil
	}
}

// dial connects and sets the connection up as go-redis would, by deadline.
func (pc *pipeConn) dial(deadline time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	network := pc.opt.Network
	if network == "" {
		network = "tcp"
	}
	conn, err := pc.opt.Dialer(ctx, network, pc.opt.Addr)
	if err != nil {
		return err
	}
	if pc.rd == nil {
		pc.rd = bufio.NewReaderSize(conn, 16<<10)
	} else {
		pc.rd.Reset(conn)
	}
	var setup [][]any
	switch {
	case pc.opt.Username != "":
		setup = append(setup, []any{"auth", pc.opt.Username, pc.opt.Password})
	case pc.opt.Password != "":
		setup = append(setup, []any{"auth", pc.opt.Password})
	}
	if pc.opt.DB > 0 {
		setup = append(setup, []any{"select", int64(pc.opt.DB)})
	}
	if pc.opt.ClientName != "" {
		setup = append(setup, []any{"client", "setname", pc.opt.ClientName})
	}
	if len(setup) == 0 {
		pc.conn = conn
		return nil
	}
	out := pc.out[:0]
	for _, cmd := range setup {
		out, _ = appendCommand(out, cmd)
	}
	pc.out = out
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write(out); err != nil {
		_ = conn.Close()
		return err
	}
	for range setup {
		line, err := pc.rd.ReadSlice('\n')
		if err != nil {
			_ = conn.Close()
			return err
		}
		if line[0] == '-' {
			_ = conn.Close()
			pc.refused = true
			return fmt.Errorf("redis store: pipeline connection set-up refused: %s", line[1:])
		}
	}
	pc.conn = conn
	return nil
}

// send sends the batch's script calls and reads their replies into w's
// scratch values, as read would. lost lists the calls left for go-redis
// to send: all of them when the connection cannot carry the batch, or
// those whose reply was not read before the connection failed (closed
// now: the next batch dials again) and the deadline has not passed.
func (pc *pipeConn) send(s *Store, w *batcher, leaders []*redisCall, scripts []script, deadline time.Time) (replies []scriptReply, lost []int) {
	replies = slices.Grow(w.replies[:0], len(scripts))[:len(scripts)]
	clear(replies)
	w.replies = replies
	for len(w.vals) < len(scripts) {
		w.vals = append(w.vals, nil)
	}
	lost = pc.lost[:0]
	defer func() { pc.lost = lost[:0] }()
	all := func() []int {
		for i := range scripts {
			lost = append(lost, i)
		}
		return lost
	}
	if pc.refused || !pc.retryAt.IsZero() && time.Now().Before(pc.retryAt) {
		return replies, all()
	}
	if pc.conn == nil {
		if err := pc.dial(deadline); err != nil {
			pc.retryAt = time.Now().Add(pc.timeout)
			return replies, all()
		}
		pc.retryAt = time.Time{} // no clock read per batch while connected
	}
	out := pc.out[:0]
	for _, sc := range scripts {
		var ok bool
		pc.args = s.scriptArgs(pc.args[:0], w, leaders[sc.from:sc.to])
		out, ok = appendCommand(out, pc.args)
		clear(pc.args)
		if !ok {
			pc.out = out[:0]
			return replies, all() // an argument of a type go-redis writes
		}
	}
	pc.out = out[:0]
	redial := false
	_ = pc.conn.SetDeadline(deadline)
	if _, err := pc.conn.Write(out); err != nil {
		pc.close()
		return replies, pc.cutOff(replies, err, 0, deadline)
	}
	for i := range scripts {
		raw, err := pc.readReply()
		var perr respError
		switch {
		case errors.As(err, &perr):
			// The call ran, but where the next reply starts is lost.
			pc.close()
			replies[i] = scriptReply{err: err, raw: true}
			return replies, pc.cutOff(replies, err, i+1, deadline)
		case err != nil:
			pc.close()
			return replies, pc.cutOff(replies, err, i, deadline)
		}
		replies[i] = rawReply(raw, w.vals[i][:0])
		w.vals[i] = replies[i].vals
		if err := replies[i].err; err != nil && retriedByClient(err) {
			// READONLY after a failover, say: the next batch dials again,
			// through the Dialer that finds the new master (a Sentinel
			// client's), as go-redis would.
			redial = true
		}
	}
	if redial {
		pc.close()
	}
	return replies, lost
}

// cutOff marks the replies from the first on, which err cut off: lost
// (left for go-redis) while the deadline has not passed, failed with err
// past it.
func (pc *pipeConn) cutOff(replies []scriptReply, err error, first int, deadline time.Time) []int {
	lost := pc.lost[:0]
	late := !time.Now().Before(deadline)
	for i := first; i < len(replies); i++ {
		if late {
			replies[i] = scriptReply{err: classify(err), raw: true}
		} else {
			lost = append(lost, i)
		}
	}
	return lost
}

// respError is a reply this connection does not read (the script's is an
// array of integers and errors, or an error).
type respError string

func (e respError) Error() string {
	return "rate-limit script: unexpected reply " + strconv.Quote(string(e))
}

// readReply reads one reply into pc.in: a line, and an array's elements,
// each a line too.
func (pc *pipeConn) readReply() ([]byte, error) {
	line, err := pc.readLine()
	if err != nil {
		return nil, err
	}
	in := append(pc.in[:0], line...)
	n := int64(0)
	switch line[0] {
	case '*':
		n, _ = parseInt(line[1 : len(line)-2]) // parseReply checks it
	case '-', ':', '+', '_':
	default:
		return nil, respError(line)
	}
	for range n {
		line, err := pc.readLine()
		if err != nil {
			return nil, err
		}
		if line[0] != ':' && line[0] != '-' {
			return nil, respError(line)
		}
		in = append(in, line...)
	}
	pc.in = in
	return in, nil
}

// readLine reads one line with its CRLF.
func (pc *pipeConn) readLine() ([]byte, error) {
	line, err := pc.rd.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, respError(line[:32])
	case err != nil:
		return nil, err
	case len(line) < 3 || line[len(line)-2] != '\r':
		return nil, respError(line)
	}
	return line, nil
}

// appendCommand appends args as a RESP command to out; false when an
// argument is of a type it does not write.
func appendCommand(out []byte, args []any) ([]byte, bool) {
	out = append(out, '*')
	out = strconv.AppendInt(out, int64(len(args)), 10)
	out = append(out, '\r', '\n')
	for _, a := range args {
		switch a := a.(type) {
		case string:
			out = appendBulk(out, a)
		case *string:
			out = appendBulk(out, *a)
		case int64:
			out = appendBulkInt(out, a)
		case int:
			out = appendBulkInt(out, int64(a))
		case nil:
			out = appendBulk(out, "")
		default:
			return out, false
		}
	}
	return out, true
}

func appendBulk[T string | []byte](out []byte, s T) []byte {
	out = append(out, '$')
	out = strconv.AppendInt(out, int64(len(s)), 10)
	out = append(out, '\r', '\n')
	out = append(out, s...)
	return append(out, '\r', '\n')
}

func appendBulkInt(out []byte, n int64) []byte {
	var digits [20]byte
	return appendBulk(out, strconv.AppendInt(digits[:0], n, 10))
}
