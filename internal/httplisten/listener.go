// Package httplisten wraps the portal's listener so that net/http's
// background read of each request does not reach the kernel while the
// request's handler waits for a decision from Redis.
//
// For every request without a body left to read, net/http starts a
// goroutine that reads one byte from the connection, to notice the client
// going away (it then cancels the request's context) or a pipelined request
// arriving, and aborts that read with a read deadline in the past once the
// handler returns. A handler that answers without waiting returns before
// the read starts, and the aborted read never reaches the kernel. One that
// waits (a decision sent to Redis in a pipeline, about 50 us on localhost)
// lets it start: a read system call that finds nothing, a wait in the
// network poller and a wake-up on the abort. Waiting instead saves the
// Redis-limited route 8 % of the portal's CPU per request (docs/benchmarks.md,
// "The portal's listener without the background read's system call").
//
// Here the background read first waits, without a system call, for the
// abort or for one to two ticks of a shared ticker (every Listener.Every),
// and only then reads from the connection. Nothing is lost: a pipelined
// request's bytes stay in the socket until the server reads them, and a
// client that goes away during a request that lasts longer than two ticks
// cancels its context as before, at most two ticks late. A client that goes
// away during a shorter request is noticed when its response is written, as
// net/http notices it when a pipelined request was read.
package httplisten

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Every is the ticker period a Listener is made with by New: a background
// read waits between one and two of them.
const Every = 50 * time.Millisecond

// Listener accepts TCP connections whose background reads wait as the
// package describes. Connections of another kind are returned as they come.
type Listener struct {
	net.Listener
	// tick is closed and replaced every period until Close, and closed for
	// good then.
	tick      atomic.Pointer[chan struct{}]
	stop      chan struct{}
	closeOnce sync.Once
	// deferred counts the reads taken for net/http's background reads, and
	// ranOut those of them whose wait ran out, so that they went on to the
	// kernel; the tests read them.
	deferred, ranOut atomic.Int64
}

// New wraps ln, ticking every period (Every in the portal; the tests use
// others).
func New(ln net.Listener, period time.Duration) *Listener {
	l := &Listener{Listener: ln, stop: make(chan struct{})}
	tick := make(chan struct{})
	l.tick.Store(&tick)
	go l.run(period)
	return l
}

func (l *Listener) run(period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			next := make(chan struct{})
			close(*l.tick.Swap(&next))
		case <-l.stop:
			// A closed tick for good: waits from now on end at once.
			closed := make(chan struct{})
			close(closed)
			close(*l.tick.Swap(&closed))
			return
		}
	}
}

// Accept waits for the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	return &conn{TCPConn: tc, l: l, wake: make(chan struct{}, 1)}, nil
}

// Close closes the listener and stops its ticker.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.stop) })
	return l.Listener.Close()
}

// conn embeds the *net.TCPConn so that net/http still finds its CloseWrite
// and ReadFrom (sendfile).
type conn struct {
	*net.TCPConn
	l *Listener
	// armed: the latest call was SetReadDeadline with the zero time, which
	// is how net/http starts a background read, a one-byte read. Any read
	// disarms, and so does any other deadline: a hijack clears both
	// deadlines with SetDeadline, so a hijacked connection's reads go
	// straight through.
	armed atomic.Bool
	// wake is signalled by every deadline change and by Close, to end a
	// background read's wait.
	wake chan struct{}
}

// Read reads from the connection; net/http's background read waits first.
func (c *conn) Read(p []byte) (int, error) {
	if len(p) != 1 {
		c.armed.Store(false)
		return c.TCPConn.Read(p)
	}
	// Drained before the state is read: a deadline change from here on
	// signals this wait.
	select {
	case <-c.wake:
	default:
	}
	if c.armed.Swap(false) {
		c.l.deferred.Add(1)
		if c.wait() {
			c.l.ranOut.Add(1)
		}
	}
	// After an abort the deadline is in the past: the network poller
	// returns the timeout net/http expects without a system call.
	return c.TCPConn.Read(p)
}

// wait returns on the next deadline change or Close, or, reporting that it
// ran out, after one to two ticks (at once after the Listener's Close).
func (c *conn) wait() (ranOut bool) {
	for range 2 {
		select {
		case <-c.wake:
			return false
		case <-*c.l.tick.Load():
		}
	}
	return true
}

func (c *conn) setRead(t time.Time, arm bool) {
	c.armed.Store(arm && t.IsZero())
	c.signal()
}

// signal ends a background read's wait, or the next one's if none waits
// (Read drains it first).
func (c *conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// SetReadDeadline sets the connection's read deadline, then ends a
// background read's wait.
func (c *conn) SetReadDeadline(t time.Time) error {
	err := c.TCPConn.SetReadDeadline(t)
	c.setRead(t, true)
	return err
}

// SetDeadline sets both deadlines, then ends a background read's wait.
func (c *conn) SetDeadline(t time.Time) error {
	err := c.TCPConn.SetDeadline(t)
	c.setRead(t, false)
	return err
}

// Close closes the connection and ends a background read's wait.
func (c *conn) Close() error {
	err := c.TCPConn.Close()
	c.signal()
	return err
}
