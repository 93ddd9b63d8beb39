package region_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// delayProxy is a TCP proxy that holds every chunk of bytes for delay
// before passing it on, each way: the distance between two regions, on a
// kernel without netem. cut drops every connection and refuses new ones
// until restore.
type delayProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

func startDelayProxy(t testing.TB, target string, delay time.Duration) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cutOff()
	})
	return p
}

func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func (p *delayProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk delay after it was read, in order.
func (p *delayProxy) pipe(dst, src net.Conn) {
	ch := make(chan chunk, 4096)
	go func() {
		for c := range ch {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				break
			}
		}
		_ = dst.Close()
		for range ch {
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			ch <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(p.delay)}
		}
		if err != nil {
			if err != io.EOF {
				_ = src.Close()
			}
			close(ch)
			return
		}
	}
}

// cutOff drops every connection and refuses new ones: the link between
// two regions is down.
func (p *delayProxy) cutOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *delayProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// fakeClock is every region's store clock (the scripts take their time
// from it), moved by the test only, so windows do not depend on how fast
// the machine runs.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
