package redisstore

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/enforce"
)

// scriptReply is one script call's reply, read into the batcher's scratch
// values: an integer each, or the error a request failed with in its place.
// raw says it was read by parseReply rather than by go-redis.
type scriptReply struct {
	vals []replyValue
	err  error
	raw  bool
}

type replyValue struct {
	n   int64
	err error
}

// read reads the replies of cmds into w's scratch values from the first
// on (a batch's replies are 0 to its script count: another read of the
// same batch starts past them, so as not to overwrite them).
func (s *Store) read(w *batcher, cmds []redis.Cmder, first int) []scriptReply {
	replies := make([]scriptReply, len(cmds))
	for len(w.vals) < first+len(cmds) {
		w.vals = append(w.vals, nil)
	}
	for j, cmd := range cmds {
		i := first + j
		var r scriptReply
		switch cmd := cmd.(type) {
		case *redis.RawCmd:
			raw, err := cmd.Result()
			if err != nil {
				r = scriptReply{err: classify(err), raw: true}
				break
			}
			r = rawReply(raw, w.vals[i][:0])
		case *redis.Cmd:
			r.vals, r.err = replyValues(cmd, w.vals[i][:0])
			r.checkStart()
		}
		w.vals[i] = r.vals
		replies[j] = r
	}
	return replies
}

// rawReply is the reply parsed from its RESP bytes by parseReply into dst.
func rawReply(raw []byte, dst []replyValue) scriptReply {
	r := scriptReply{raw: true}
	r.vals, r.err = parseReply(raw, dst)
	if rerr, ok := r.err.(replyError); ok {
		r.err = classify(rerr) // as go-redis's reading would have it
	}
	r.checkStart()
	return r
}

// checkStart fails a reply that does not start with the decisions' time.
func (r *scriptReply) checkStart() {
	if r.err == nil && (len(r.vals) == 0 || r.vals[0].err != nil) {
		r.err = errors.New("rate-limit script: reply does not start with the decisions' time")
	}
}

// parseReply parses the script's reply from its RESP bytes: an array of
// integers, with an error reply in place of a failed request's values.
// go-redis's own reading boxes every integer of the reply into an
// interface, one allocation per value above 255 (two or more per
// decision); a top-level error reply comes back as that error, for classify.
func parseReply(raw []byte, dst []replyValue) ([]replyValue, error) {
	line, raw := cutLine(raw)
	if len(line) == 0 {
		return dst, errors.New("rate-limit script: empty reply")
	}
	switch line[0] {
	case '-':
		return dst, replyError(line[1:])
	case '*':
	default:
		return dst, fmt.Errorf("rate-limit script: reply of RESP type %q, want an array", line[0])
	}
	n, ok := parseInt(line[1:])
	if !ok || n < 0 {
		return dst, fmt.Errorf("rate-limit script: bad array header %q", line)
	}
	for range n {
		line, raw = cutLine(raw)
		if len(line) == 0 {
			return dst, errors.New("rate-limit script: reply cut short")
		}
		switch line[0] {
		case ':':
			v, ok := parseInt(line[1:])
			if !ok {
				return dst, fmt.Errorf("rate-limit script: bad integer %q in reply", line)
			}
			dst = append(dst, replyValue{n: v})
		case '-':
			dst = append(dst, replyValue{err: replyError(line[1:])})
		default:
			return dst, fmt.Errorf("rate-limit script: reply element of RESP type %q, want an integer", line[0])
		}
	}
	return dst, nil
}

// cutLine returns raw's first line without its CRLF, and the rest.
func cutLine(raw []byte) (line, rest []byte) {
	i := bytes.IndexByte(raw, '\n')
	if i < 1 || raw[i-1] != '\r' {
		return nil, nil
	}
	return raw[:i-1], raw[i+1:]
}

// parseInt parses a RESP integer without the allocation strconv's would
// cost for the string conversion.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if n < 0 { // overflowed past 19 digits' range
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// replyError is an error reply read by parseReply; like go-redis's own it is
// a redis.Error, which classify and the NOSCRIPT check recognise.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks replyError as an error Redis answered with.
func (replyError) RedisError() {}

// replyValues reads the script's reply as go-redis read it, checking that it
// is an array of integers and errors.
func replyValues(cmd *redis.Cmd, dst []replyValue) ([]replyValue, error) {
	v, err := cmd.Result()
	if err != nil {
		return dst, classify(err)
	}
	values, ok := v.([]any)
	if !ok {
		return dst, fmt.Errorf("rate-limit script: reply %T, want an array", v)
	}
	for _, x := range values {
		switch x := x.(type) {
		case int64:
			dst = append(dst, replyValue{n: x})
		case error:
			dst = append(dst, replyValue{err: x})
		default:
			return dst, fmt.Errorf("rate-limit script: reply element %T, want an integer", x)
		}
	}
	return dst, nil
}

// appendValues appends one decision's reply to dst in the caller's layout:
// allowed and delay, then now, then the layers.
func appendValues(dst []int64, values []replyValue, now int64) ([]int64, error) {
	for i, x := range values {
		if x.err != nil {
			return dst, fmt.Errorf("rate-limit script: reply element is an error, want an integer: %w", x.err)
		}
		dst = append(dst, x.n)
		if i == 1 {
			dst = append(dst, now)
		}
	}
	return dst, nil
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// classify wraps err in ErrStoreUnavailable unless Redis answered with an
// error that says the script or the data is wrong (a bug, not an outage).
func classify(err error) error {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		if (strings.HasPrefix(msg, "ERR") && !strings.Contains(msg, "max number of clients")) ||
			strings.HasPrefix(msg, "WRONGTYPE") {
			return fmt.Errorf("rate-limit script: %w", err)
		}
	}
	return fmt.Errorf("%w: %w", enforce.ErrStoreUnavailable, err)
}
