package httplisten

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// hang bounds every wait in these tests, so that a broken wait fails the
// test instead of hanging it; nothing is asserted about how long anything
// takes.
const hang = 30 * time.Second

// servers are the http.Server settings the tests run under: the portal's
// timeouts, which make net/http set a read deadline per request, and none.
var servers = []struct {
	name string
	new  func(http.Handler) *http.Server
}{
	{"PortalTimeouts", func(h http.Handler) *http.Server {
		return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 90 * time.Second, IdleTimeout: 120 * time.Second}
	}},
	{"NoTimeouts", func(h http.Handler) *http.Server { return &http.Server{Handler: h} }},
}

func serve(t *testing.T, newServer func(http.Handler) *http.Server, period time.Duration, h http.Handler) (*Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(ln, period)
	srv := newServer(h)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l, ln.Addr().String()
}

// until waits for cond, failing the test after hang.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after %s", what, hang)
		}
		time.Sleep(time.Millisecond)
	}
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(hang))
	return c, bufio.NewReader(c)
}

// awaitCancel returns a handler for one request that closes started, waits
// for the request's context to be cancelled, and sends on cancelled whether
// it was (false after hang).
func awaitCancel() (h http.Handler, started chan struct{}, cancelled chan bool) {
	started, cancelled = make(chan struct{}), make(chan bool, 1)
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			cancelled <- true
		case <-time.After(hang):
			cancelled <- false
		}
	})
	return h, started, cancelled
}

func get(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: test\r\n\r\n" }

func readBody(t *testing.T, rd *bufio.Reader) string {
	t.Helper()
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A handler that waits has its request's background read wait too, for
// the abort and not for the ticker (an hour here): every request's read
// waited, none went on to the kernel, and each next request on the
// connection was served, so every wait ended on its abort.
func TestBackgroundReadWaitsForTheAbort(t *testing.T) {
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			var l *Listener
			l, addr := serve(t, s.new, time.Hour, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := r.URL.Query().Get("n")
				var want int64
				fmt.Sscan(n, &want)
				until(t, "the background read of request "+n, func() bool { return l.deferred.Load() >= want })
				fmt.Fprint(w, n)
			}))
			c, rd := dial(t, addr)
			for i := 1; i <= 3; i++ {
				if _, err := io.WriteString(c, get(fmt.Sprintf("/?n=%d", i))); err != nil {
					t.Fatal(err)
				}
				if got, want := readBody(t, rd), fmt.Sprint(i); got != want {
					t.Fatalf("request %d answered %q", i, got)
				}
			}
			if got := l.deferred.Load(); got != 3 {
				t.Errorf("%d background reads waited, want 3", got)
			}
			if got := l.ranOut.Load(); got != 0 {
				t.Errorf("%d background reads ran out of their wait and read, want 0", got)
			}
		})
	}
}

// A client that goes away during a request that outlasts the wait still
// cancels the request's context: the read goes on to the kernel and finds
// the connection closed.
func TestClientGoingAwayCancelsTheRequest(t *testing.T) {
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			handler, started, cancelled := awaitCancel()
			l, addr := serve(t, s.new, time.Millisecond, handler)
			c, _ := dial(t, addr)
			if _, err := io.WriteString(c, get("/")); err != nil {
				t.Fatal(err)
			}
			<-started
			_ = c.Close()
			if !<-cancelled {
				t.Fatalf("the request's context was not cancelled within %s of its client going away", hang)
			}
			if l.ranOut.Load() == 0 {
				t.Error("no background read ran out of its wait")
			}
		})
	}
}

// A request that arrives while the one before it waits stays in the socket
// until the server reads it, even while no tick comes to end the wait.
func TestPipelinedRequestIsServed(t *testing.T) {
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			release := make(chan struct{})
			l, addr := serve(t, s.new, time.Hour, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/first" {
					<-release
				}
				fmt.Fprint(w, r.URL.Path)
			}))
			c, rd := dial(t, addr)
			if _, err := io.WriteString(c, get("/first")); err != nil {
				t.Fatal(err)
			}
			until(t, "the first request's background read", func() bool { return l.deferred.Load() == 1 })
			if _, err := io.WriteString(c, get("/second")); err != nil {
				t.Fatal(err)
			}
			close(release)
			for _, want := range []string{"/first", "/second"} {
				if got := readBody(t, rd); got != want {
					t.Fatalf("answered %q, want %q", got, want)
				}
			}
		})
	}
}

// A hijacked connection's one-byte reads go straight to the connection,
// though net/http clears its deadlines on the way, and the ticker (an hour
// here) would never end a wait.
func TestHijackedConnectionReadsAtOnce(t *testing.T) {
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			l, addr := serve(t, s.new, time.Hour, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				conn, bufrw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				if bufrw.Reader.Buffered() > 0 {
					t.Error("the client's byte arrived with the request; the test reads nothing from the connection")
				}
				_, _ = io.WriteString(conn, "ready\n")
				var b [1]byte
				if _, err := conn.Read(b[:]); err != nil {
					t.Error(err)
					return
				}
				_, _ = conn.Write(b[:])
			}))
			c, rd := dial(t, addr)
			if _, err := io.WriteString(c, get("/")); err != nil {
				t.Fatal(err)
			}
			line, err := rd.ReadString('\n')
			if err != nil || line != "ready\n" {
				t.Fatalf("read %q, %v", line, err)
			}
			if _, err := io.WriteString(c, "x"); err != nil {
				t.Fatal(err)
			}
			got, err := rd.ReadByte()
			if err != nil || got != 'x' {
				t.Fatalf("read %q, %v, want the byte echoed", got, err)
			}
			if n := l.ranOut.Load(); n != 0 {
				t.Errorf("%d reads ran out of a wait", n)
			}
		})
	}
}

// Closing the server ends a waiting background read, with no tick (an hour
// here) to end it: net/http's Close closes the listener, which ends every
// wait, and the connection, which ends this one; the read finds the
// connection closed and the request's context is cancelled.
func TestCloseEndsTheWait(t *testing.T) {
	handler, started, cancelled := awaitCancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(ln, time.Hour)
	srv := &http.Server{Handler: handler}
	go func() { _ = srv.Serve(l) }()
	c, _ := dial(t, ln.Addr().String())
	if _, err := io.WriteString(c, get("/")); err != nil {
		t.Fatal(err)
	}
	<-started
	until(t, "the background read", func() bool { return l.deferred.Load() == 1 })
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if !<-cancelled {
		t.Fatalf("the request's context was not cancelled within %s of the server closing", hang)
	}
}
