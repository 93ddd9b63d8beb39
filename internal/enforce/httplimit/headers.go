package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Response header names the middleware writes besides the standard rate-limit
// fields. Clients and dashboards may rely on them.
const (
	// HeaderDegraded marks a response served in a tier's degrade mode: the
	// caller was over a limit and the handler served a reduced or cached
	// answer instead of a 429. Its value is the name of the policy that was
	// exceeded.
	HeaderDegraded = "Sluice-Degraded"
	// HeaderStoreDegraded marks a response decided without the shared
	// rate-limit store because it was unreachable: "local" when the failure
	// mode is local and this instance's own counters decided (every
	// rate-limit header kept, describing the local figures), or
	// "store-unavailable" when the failure mode is open and the request was
	// admitted without a decision, or "region-share" when a region in sync
	// mode held to its own share of each limit because a peer region was
	// unreachable (the headers describe the share).
	HeaderStoreDegraded = "Sluice-RateLimit-Degraded"
	// HeaderQueueDelay is set when the request waited its turn in a queue-mode
	// tier before the handler ran (or, for an asynchronous handler, when its
	// job is scheduled to start): the wait in whole milliseconds.
	HeaderQueueDelay = "Sluice-Queue-Delay-Ms"
)

// ceilSeconds rounds d up to whole seconds, never below zero.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfterSeconds is the Retry-After value for a rejected decision: the
// longest wait among the rejecting layers, in whole seconds rounded up, and at
// least 1 so that a client never retries in a tight loop.
func retryAfterSeconds(d enforce.Decision) int64 {
	var longest time.Duration
	for _, l := range d.Layers {
		if !l.Allowed && l.RetryAfter > longest {
			longest = l.RetryAfter
		}
	}
	return max(ceilSeconds(longest), 1)
}

// limitHeaderCount is how many fields writeLimitHeaders sets.
const limitHeaderCount = 5

// writeLimitHeaders sets the rate-limit fields of DESIGN.md on h for d,
// decided at at: X-RateLimit-Limit/Remaining/Reset for d.Binding() (Reset
// in unix seconds: at plus the layer's ResetAfter, rounded up when it is not
// a whole second), and RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-11 syntax) listing every layer in
// order, e.g.
//
//	RateLimit-Policy: "pro-search";q=100;w=60, "pro-global";q=10000;w=3600
//	RateLimit: "pro-search";r=37;t=23, "pro-global";r=9312;t=1800
//
// Policy names are validated by the control plane to be tokens ([a-z0-9_-]),
// so they need no escaping inside an sf-string; quoteName escapes anyway.
// fixed, when the caller has it, holds what these fields take from d's
// limits alone (see newFixedHeaders), so that only the decision's figures
// are formatted here; it must describe d.Layers one for one. The field
// values are kept in vals, which the caller provides so that it can share
// their allocation with other per-request state.
func writeLimitHeaders(h http.Header, d enforce.Decision, at time.Time, fixed *fixedHeaders, vals *[limitHeaderCount]string) {
	if len(d.Layers) == 0 {
		return
	}
	var bl enforce.LayerResult
	bi := d.BindingIndex()
	if bi >= 0 {
		bl = d.Layers[bi]
	}
	// Every response pays for these headers: their bytes are built on the
	// stack and become one string, which the values slice.
	var buf [320]byte
	var ends [limitHeaderCount]int
	b := buf[:0]
	if fixed == nil {
		b = strconv.AppendInt(b, bl.Limit.Limit, 10)
	}
	ends[0] = len(b)
	b = strconv.AppendInt(b, max(bl.Remaining, 0), 10)
	ends[1] = len(b)
	b = strconv.AppendInt(b, resetUnix(at, bl.ResetAfter), 10)
	ends[2] = len(b)
	if fixed == nil {
		// By index: ranging by value would copy each LayerResult twice.
		for i := range d.Layers {
			b = appendPolicyItem(b, i, &d.Layers[i].Limit, d.Layers[i].Period)
		}
	}
	ends[3] = len(b)
	for i := range d.Layers {
		l := &d.Layers[i]
		if fixed != nil {
			b = append(b, fixed.items[i]...)
		} else {
			b = appendRateLimitItem(b, i, l.Limit.Name)
		}
		b = strconv.AppendInt(b, max(l.Remaining, 0), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, ceilSeconds(l.ResetAfter), 10)
	}
	ends[4] = len(b)
	all := string(b)
	from := 0
	for i, end := range ends {
		vals[i] = all[from:end]
		from = end
	}
	if fixed != nil {
		if bi >= 0 {
			vals[0] = fixed.limits[bi]
		} else {
			vals[0] = "0"
		}
		vals[3] = fixed.policy
	}
	// Header.Set would canonicalise each key and allocate a slice per
	// value; the keys are written in the canonical form Set would produce
	// (and the wire shows), and each value slice is capped so that an Add
	// cannot write into its neighbour.
	h["X-Ratelimit-Limit"] = vals[0:1:1]
	h["X-Ratelimit-Remaining"] = vals[1:2:2]
	h["X-Ratelimit-Reset"] = vals[2:3:3]
	h["Ratelimit-Policy"] = vals[3:4:4]
	h["Ratelimit"] = vals[4:5:5]
}

// appendRateLimitItem appends the i-th item of a RateLimit list up to its
// remaining figure: `, "name";r=`.
func appendRateLimitItem(dst []byte, i int, name string) []byte {
	if i > 0 {
		dst = append(dst, ", "...)
	}
	dst = quoteName(dst, name)
	return append(dst, ";r="...)
}

// fixedHeaders are the parts of a limit set's rate-limit fields that depend
// on the limits alone: the middleware formats them once per route and limit
// set (routeLimitsCache), and each request only its decision's figures.
// Copying the fixed parts instead of formatting them takes 41 % of the
// instructions out of writeLimitHeaders for two layers (3,937 -> 2,335,
// callgrind on BenchmarkWriteLimitHeaders).
type fixedHeaders struct {
	// policy is the RateLimit-Policy value.
	policy string
	// limits holds each layer's X-RateLimit-Limit value.
	limits []string
	// items holds each layer's RateLimit item up to its remaining figure.
	items []string
}

// newFixedHeaders returns the fixed parts of the fields of limits, or nil
// when they depend on the decision too: a quota's window is its subject's
// current period, and shadow layers are taken out of a decision before its
// headers are written.
func newFixedHeaders(limits []enforce.Limit) *fixedHeaders {
	if len(limits) == 0 || enforce.HasQuota(limits) || enforce.HasShadow(limits) {
		return nil
	}
	f := &fixedHeaders{policy: string(appendPolicy(nil, limits))}
	for i := range limits {
		f.limits = append(f.limits, strconv.FormatInt(limits[i].Limit, 10))
		f.items = append(f.items, string(appendRateLimitItem(nil, i, limits[i].Name)))
	}
	return f
}

// appendPolicy appends the RateLimit-Policy value of limits, which depends
// on nothing else, so the middleware computes it once per limit set.
// Shadow limits are never shown, so they are left out.
func appendPolicy(dst []byte, limits []enforce.Limit) []byte {
	n := 0
	for i := range limits {
		if limits[i].Mode == enforce.ModeShadow {
			continue
		}
		dst = appendPolicyItem(dst, n, &limits[i], 0)
		n++
	}
	return dst
}

// appendPolicyItem appends the i-th item of a RateLimit-Policy list; period
// is a quota layer's current period, its w (else the limit's window).
func appendPolicyItem(dst []byte, i int, l *enforce.Limit, period time.Duration) []byte {
	if i > 0 {
		dst = append(dst, ", "...)
	}
	dst = quoteName(dst, l.Name)
	dst = append(dst, ";q="...)
	dst = strconv.AppendInt(dst, l.Limit, 10)
	if l.Algorithm == enforce.Concurrency {
		// Requests in flight, not per window (draft-11's quota unit).
		return append(dst, `;qu="concurrent-requests"`...)
	}
	dst = append(dst, ";w="...)
	if period > 0 {
		return strconv.AppendInt(dst, ceilSeconds(period), 10)
	}
	return strconv.AppendInt(dst, max(ceilSeconds(l.Window), 1), 10)
}

// resetUnix is the unix second at which a layer decided at at resets: at
// plus resetAfter, rounded up only when that is not already a whole second.
func resetUnix(at time.Time, resetAfter time.Duration) int64 {
	return unixCeil(at.Add(resetAfter))
}

// quoteName appends name as a Structured Field sf-string (RFC 8941 3.3.3):
// quoted, with '"' and '\' escaped; other bytes outside printable ASCII are
// dropped because an sf-string cannot carry them.
func quoteName(dst []byte, name string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c >= ' ' && c <= '~':
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// RejectionBody is the JSON body of a 429 response, as DESIGN.md specifies:
//
//	{"error":"rate_limit_exceeded","message":"...","retry_after":37,"limit":100,"policy":"pro-search"}
type RejectionBody struct {
	// Error is always "rate_limit_exceeded".
	Error string `json:"error"`
	// Message explains the rejection to a person.
	Message string `json:"message"`
	// RetryAfter repeats the Retry-After header: whole seconds, at least 1.
	RetryAfter int64 `json:"retry_after"`
	// Limit and Policy describe the layer that rejected the request.
	Limit  int64  `json:"limit"`
	Policy string `json:"policy"`
}

// ErrorBody is the JSON body of every other error the middleware answers
// (401 invalid_api_key, 503 rate_limit_unavailable, ...).
type ErrorBody struct {
	// Error is a stable machine-readable code.
	Error string `json:"error"`
	// Message explains the error to a person.
	Message string `json:"message"`
}

// writeRejection answers 429 Too Many Requests for d, whose rate-limit
// headers are already set.
func writeRejection(w http.ResponseWriter, d enforce.Decision) {
	retry, body := rejection(d)
	writeRejectionBody(w, retry, body)
}

// rejection is the Retry-After seconds and the RejectionBody JSON of a
// rejected decision d.
func rejection(d enforce.Decision) (retry int64, body []byte) {
	retry = retryAfterSeconds(d)
	var limit int64
	var policy string
	var msg [160]byte
	m := append(msg[:0], "Rate limit exceeded"...)
	if i := d.BindingIndex(); i >= 0 {
		l := &d.Layers[i].Limit
		limit, policy = l.Limit, l.Name
		m = append(m, ": policy "...)
		m = strconv.AppendQuote(m, l.Name)
		m = append(m, " allows "...)
		m = strconv.AppendInt(m, l.Limit, 10)
		if l.Algorithm == enforce.Concurrency {
			m = append(m, " concurrent requests"...)
		} else {
			m = append(m, " per "...)
			m = append(m, enforce.WindowText(l.Window)...)
		}
	}
	m = append(m, ". Retry in "...)
	m = strconv.AppendInt(m, retry, 10)
	m = append(m, " s."...)
	return retry, rejectionBody(retry, limit, policy, m)
}

// rejectionBody is a RejectionBody's JSON. It is appended by hand, byte for
// byte what encoding/json writes for the struct: a flood of over-limit
// requests all take this path, and the encoder's reflection and
// allocations cost more than the decision.
func rejectionBody(retry, limit int64, policy string, message []byte) []byte {
	b := make([]byte, 0, 96+len(message)+len(policy))
	b = append(b, `{"error":"rate_limit_exceeded","message":`...)
	b = appendJSONString(b, message)
	b = append(b, `,"retry_after":`...)
	b = strconv.AppendInt(b, retry, 10)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, limit, 10)
	b = append(b, `,"policy":`...)
	b = appendJSONString(b, policy)
	return append(b, "}\n"...) // as json.Encoder ends every value
}

// writeRejectionBody answers 429 with Retry-After and body.
func writeRejectionBody(w http.ResponseWriter, retry int64, body []byte) {
	h := w.Header()
	vals := [...]string{strconv.FormatInt(retry, 10), "application/json", "nosniff"}
	h["Retry-After"] = vals[0:1:1]
	h["Content-Type"] = vals[1:2:2]
	h["X-Content-Type-Options"] = vals[2:3:3]
	w.WriteHeader(http.StatusTooManyRequests)
	// The client may be gone; there is no one left to tell.
	_, _ = w.Write(body)
}

// appendJSONString appends s as a JSON string exactly as encoding/json
// writes it with HTML escaping (its default): '"' and '\\' escaped, control
// characters as \b \f \n \r \t or \u00XX, '<' '>' '&' as \u00XX, U+2028 and
// U+2029 escaped, and invalid UTF-8 replaced by \ufffd.
func appendJSONString[S ~string | ~[]byte](dst []byte, s S) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// writeError answers status with an ErrorBody.
func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, ErrorBody{Error: code, Message: message})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	// The client may be gone; there is no one left to tell about a failed
	// write of an error body.
	_ = json.NewEncoder(w).Encode(v)
}
