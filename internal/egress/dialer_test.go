package egress_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/egress"
)

// counter is an HTTP server on 127.0.0.1 that records the connections it
// accepts, in order.
type counter struct {
	ln     net.Listener
	answer func(w http.ResponseWriter, r *http.Request)
	mu     sync.Mutex
	peers  []string
	seen   int
}

func newCounter(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *counter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &counter{ln: ln, answer: answer}
	if c.answer == nil {
		c.answer = func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "inside") }
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.answer(w, r) }),
		// StateNew is reported by Serve's accept loop, in accept order.
		ConnState: func(conn net.Conn, s http.ConnState) {
			if s == http.StateNew {
				c.mu.Lock()
				c.peers = append(c.peers, conn.RemoteAddr().String())
				c.mu.Unlock()
			}
		}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return c
}

func (c *counter) port() string {
	return strconv.Itoa(c.ln.Addr().(*net.TCPAddr).Port)
}

// accepted is how many connections were made since the last call. It
// connects once itself and waits for the server to accept that connection:
// connections are accepted in the order they were made, so every earlier
// one has been recorded by then.
func (c *counter) accepted(t *testing.T) int {
	t.Helper()
	conn, err := net.Dial("tcp", c.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mark := conn.LocalAddr().String()
	for {
		c.mu.Lock()
		for i, p := range c.peers[c.seen:] {
			if p == mark {
				n := i
				c.seen += i + 1
				c.mu.Unlock()
				return n
			}
		}
		c.mu.Unlock()
		if t.Context().Err() != nil {
			t.Fatal("the server never accepted the marker connection")
		}
		time.Sleep(time.Millisecond)
	}
}

// fakeDNS answers from a table and counts its lookups.
type fakeDNS struct {
	mu      sync.Mutex
	table   map[string][]netip.Addr
	lookups int
}

func (f *fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	if a, ok := f.table[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// TestPublicDialerNeverReachesInside aims a webhook-style client at a real
// server on 127.0.0.1 under every spelling of "this machine" and of names
// that resolve to it: each request is refused and the server accepts no
// connection at all.
func TestPublicDialerNeverReachesInside(t *testing.T) {
	inside := newCounter(t, nil)
	p := inside.port()
	dns := &fakeDNS{table: map[string][]netip.Addr{
		"rebind.example":  addrs("127.0.0.1"),
		"mapped.example":  addrs("::ffff:127.0.0.1"),
		"private.example": addrs("10.0.0.7", "192.168.1.1"),
		"meta.example":    addrs("169.254.169.254"),
	}}
	client := egress.NewDialer(egress.Options{Resolver: dns}).Client(egress.ClientOptions{MaxRedirects: 3})
	for _, u := range []string{
		"http://127.0.0.1:" + p + "/",
		"http://localhost:" + p + "/",
		"http://[::1]:" + p + "/",
		"http://[::ffff:127.0.0.1]:" + p + "/",
		"http://[::ffff:7f00:1]:" + p + "/",
		"http://0:" + p + "/",
		"http://0.0.0.0:" + p + "/",
		"http://0177.0.0.1:" + p + "/",
		"http://0x7f000001:" + p + "/",
		"http://2130706433:" + p + "/",
		"http://127.1:" + p + "/",
		"http://rebind.example:" + p + "/",
		"http://mapped.example:" + p + "/",
		"http://private.example:" + p + "/",
		"http://meta.example:" + p + "/",
		"http://169.254.169.254/latest/meta-data/",
	} {
		res, err := client.Get(u)
		if err == nil {
			_ = res.Body.Close()
			t.Errorf("GET %s answered %d, want refused", u, res.StatusCode)
			continue
		}
		if !errors.Is(err, egress.ErrRefused) {
			t.Errorf("GET %s: %v, want ErrRefused", u, err)
		}
	}
	if n := inside.accepted(t); n != 0 {
		t.Fatalf("the server on 127.0.0.1 accepted %d connections, want 0", n)
	}
	// Names are looked up at dial time: each named host above was asked.
	if dns.lookups < 4 {
		t.Errorf("%d lookups, want one per name", dns.lookups)
	}
}

// TestNameCheckedAtDialNotAtSave: a name that passes the save-time check
// (it could resolve anywhere) is refused when it resolves inside at dial
// time, as a DNS rebinding attack would arrange.
func TestNameCheckedAtDialNotAtSave(t *testing.T) {
	inside := newCounter(t, nil)
	dns := &fakeDNS{table: map[string][]netip.Addr{"hooks.example": addrs("127.0.0.1")}}
	d := egress.NewDialer(egress.Options{Resolver: dns})
	if err := d.Rules().CheckHost("hooks.example"); err != nil {
		t.Fatalf("save-time check: %v", err)
	}
	conn, err := d.DialContext(t.Context(), "tcp", "hooks.example:"+inside.port())
	if err == nil {
		_ = conn.Close()
		t.Fatal("dial reached the inside")
	}
	var re *egress.RefusedError
	if !errors.As(err, &re) || re.Addr != netip.MustParseAddr("127.0.0.1") || re.Host != "hooks.example" {
		t.Errorf("error %v, want a RefusedError naming the host and 127.0.0.1", err)
	}
	if n := inside.accepted(t); n != 0 {
		t.Fatalf("accepted %d connections, want 0", n)
	}
}

// TestAllowlistOpensPrivateReceivers: the operator's prefix or host name
// lets a private receiver through, and nothing else.
func TestAllowlistOpensPrivateReceivers(t *testing.T) {
	inside := newCounter(t, nil)
	dns := &fakeDNS{table: map[string][]netip.Addr{"hooks.internal": addrs("127.0.0.1"), "other.internal": addrs("127.0.0.1")}}
	for _, tc := range []struct {
		allow, url string
		ok         bool
	}{
		{"127.0.0.1/32", "http://127.0.0.1:" + inside.port() + "/", true},
		{"127.0.0.0/8", "http://127.0.0.1:" + inside.port() + "/", true},
		{"hooks.internal", "http://hooks.internal:" + inside.port() + "/", true},
		{"hooks.internal", "http://other.internal:" + inside.port() + "/", false},
		{"hooks.internal", "http://127.0.0.1:" + inside.port() + "/", false},
		{"10.0.0.0/8", "http://127.0.0.1:" + inside.port() + "/", false},
	} {
		allow, err := egress.ParseAllowlist(tc.allow)
		if err != nil {
			t.Fatal(err)
		}
		client := egress.NewDialer(egress.Options{Rules: egress.Rules{Allow: allow}, Resolver: dns}).Client(egress.ClientOptions{})
		res, err := client.Get(tc.url)
		if err == nil {
			body, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if !tc.ok || string(body) != "inside" {
				t.Errorf("allow %q, GET %s = %q, want refused", tc.allow, tc.url, body)
			}
		} else if tc.ok || !errors.Is(err, egress.ErrRefused) {
			t.Errorf("allow %q, GET %s: %v", tc.allow, tc.url, err)
		}
		if got, want := inside.accepted(t), map[bool]int{true: 1, false: 0}[tc.ok]; got != want {
			t.Errorf("allow %q, GET %s: %d connections, want %d", tc.allow, tc.url, got, want)
		}
	}
}

// TestRedirectsCheckedPerHop: an allowed receiver that redirects inside
// does not take the client there.
func TestRedirectsCheckedPerHop(t *testing.T) {
	target := newCounter(t, nil)
	first := newCounter(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://127.0.0.1:"+target.port()+"/secret", http.StatusFound)
	})
	dns := &fakeDNS{table: map[string][]netip.Addr{"hooks.internal": addrs("127.0.0.1")}}
	allow, _ := egress.ParseAllowlist("hooks.internal")
	d := egress.NewDialer(egress.Options{Rules: egress.Rules{Allow: allow}, Resolver: dns})

	_, err := d.Client(egress.ClientOptions{MaxRedirects: 5}).Get("http://hooks.internal:" + first.port() + "/")
	if !errors.Is(err, egress.ErrRefused) {
		t.Errorf("following the redirect: %v, want refused", err)
	}
	res, err := d.Client(egress.ClientOptions{}).Get("http://hooks.internal:" + first.port() + "/")
	if err != nil {
		t.Fatalf("without following: %v", err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusFound {
		t.Errorf("without following: %d, want the 302 itself", res.StatusCode)
	}
	if f, tg := first.accepted(t), target.accepted(t); f != 2 || tg != 0 {
		t.Errorf("connections: first %d (want 2), redirect target %d (want 0)", f, tg)
	}
}

// TestResponsesBounded: a body past MaxResponseBytes is an error, whether
// announced by Content-Length or streamed.
func TestResponsesBounded(t *testing.T) {
	big := strings.Repeat("x", 64<<10)
	srv := newCounter(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chunked" {
			w.(http.Flusher).Flush() // no Content-Length
		} else {
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		}
		_, _ = io.WriteString(w, big)
	})
	allow, _ := egress.ParseAllowlist("127.0.0.1")
	client := egress.NewDialer(egress.Options{Rules: egress.Rules{Allow: allow}}).Client(egress.ClientOptions{MaxResponseBytes: 1000})
	if _, err := client.Get("http://127.0.0.1:" + srv.port() + "/"); !errors.Is(err, egress.ErrResponseTooLarge) {
		t.Errorf("announced: %v, want ErrResponseTooLarge", err)
	}
	res, err := client.Get("http://127.0.0.1:" + srv.port() + "/chunked")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if !errors.Is(err, egress.ErrResponseTooLarge) || len(body) != 1000 {
		t.Errorf("streamed: read %d bytes, %v; want 1000 and ErrResponseTooLarge", len(body), err)
	}
	small := egress.NewDialer(egress.Options{Rules: egress.Rules{Allow: allow}}).Client(egress.ClientOptions{MaxResponseBytes: int64(len(big))})
	res, err = small.Get("http://127.0.0.1:" + srv.port() + "/chunked")
	if err != nil {
		t.Fatal(err)
	}
	body, err = io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil || len(body) != len(big) {
		t.Errorf("exactly at the bound: %d bytes, %v", len(body), err)
	}
}

// TestInternalPolicy is the reverse proxy's: loopback and private
// upstreams are reached; link-local, metadata and unspecified are not.
func TestInternalPolicy(t *testing.T) {
	inside := newCounter(t, nil)
	dns := &fakeDNS{table: map[string][]netip.Addr{"meta.example": addrs("169.254.169.254"), "svc.internal": addrs("127.0.0.1")}}
	d := egress.NewDialer(egress.Options{Rules: egress.Rules{Policy: egress.Internal}, Resolver: dns})
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:" + inside.port(), true},
		{"svc.internal:" + inside.port(), true},
		{"0.0.0.0:" + inside.port(), false},
		{"0:" + inside.port(), false},
		{"[::]:" + inside.port(), false},
		{"169.254.169.254:80", false},
		{"meta.example:80", false},
		{"[fe80::1]:80", false},
		{"[fd00:ec2::254]:80", false},
	} {
		conn, err := d.DialContext(t.Context(), "tcp", tc.addr)
		if err == nil {
			_ = conn.Close()
		}
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, egress.ErrRefused)) {
			t.Errorf("dial %s: %v, want ok %v", tc.addr, err, tc.ok)
		}
	}
	if n := inside.accepted(t); n != 2 {
		t.Errorf("accepted %d connections, want 2 (the allowed dials only)", n)
	}
	if _, err := d.DialContext(t.Context(), "udp", "127.0.0.1:53"); !errors.Is(err, egress.ErrRefused) {
		t.Errorf("udp: %v, want refused", err)
	}
}
