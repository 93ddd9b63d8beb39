package alerts_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/alerts"
	"github.com/sluicehq/sluice/internal/egress"
	"github.com/sluicehq/sluice/internal/testenv"
)

// insideServer is a server on 127.0.0.1 that records the connections it
// accepts, in order.
type insideServer struct {
	srv   *httptest.Server
	mu    sync.Mutex
	peers []string
	seen  int
}

func newInsideServer(t *testing.T, h http.HandlerFunc) *insideServer {
	s := &insideServer{srv: httptest.NewUnstartedServer(h)}
	// StateNew is reported by the accept loop, in accept order.
	s.srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.mu.Lock()
			s.peers = append(s.peers, c.RemoteAddr().String())
			s.mu.Unlock()
		}
	}
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s
}

// accepted is how many connections arrived since the last call: it makes
// one itself and waits until the server accepted it, by which time every
// earlier connection has been recorded.
func (s *insideServer) accepted(t *testing.T) int {
	t.Helper()
	conn, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mark := conn.LocalAddr().String()
	for t.Context().Err() == nil {
		s.mu.Lock()
		for i, p := range s.peers[s.seen:] {
			if p == mark {
				s.seen += i + 1
				s.mu.Unlock()
				return i
			}
		}
		s.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the marker connection was never accepted")
	return 0
}

type tableDNS map[string][]netip.Addr

func (d tableDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := d[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// sendTest queues a test event to url (stored as given, as a webhook saved
// before the rules changed would be) and attempts it with w; it returns the
// delivery as the developer's log shows it.
func sendTest(t *testing.T, f *fixture, w *alerts.Worker, url string) alerts.Delivery {
	t.Helper()
	ctx := context.Background()
	hook, _, err := f.svc.CreateWebhook(ctx, f.dev.ID, "http://93.184.215.14/placeholder")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, `UPDATE alert_webhooks SET url = $2 WHERE id = $1`, hook.ID, url); err != nil {
		t.Fatal(err)
	}
	id, err := f.svc.EnqueueTest(ctx, f.dev.ID, hook.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := w.SendNow(ctx, id); !ok || err != nil {
		t.Fatalf("SendNow = %v, %v", ok, err)
	}
	log, err := f.svc.Deliveries(ctx, f.dev.ID, 1)
	if err != nil || len(log) != 1 || log[0].ID != id {
		t.Fatalf("delivery log: %+v, %v", log, err)
	}
	if err := f.svc.DeleteWebhook(ctx, f.dev.ID, hook.ID); err != nil {
		t.Fatal(err)
	}
	return log[0]
}

// TestWebhooksCannotReachInside: a developer's webhook aimed at this
// machine, by address, by any spelling of it or by a name that resolves to
// it, is refused when saved and, whatever was stored, when sent: the server
// inside never sees a connection.
func TestWebhooksCannotReachInside(t *testing.T) {
	f := newFixture(t, testenv.Postgres(t), dailyWindow)
	inside := newInsideServer(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	port := inside.srv.Listener.Addr().(*net.TCPAddr).AddrPort().Port()
	at := func(host string) string { return "http://" + net.JoinHostPort(host, strconv.Itoa(int(port))) + "/hook" }

	strict, err := alerts.NewService(f.pool, sessionSecret, egress.Rules{})
	if err != nil {
		t.Fatal(err)
	}
	var fe *alerts.FieldError
	for _, h := range []string{"127.0.0.1", "::1", "localhost", "0", "0177.0.0.1", "0x7f000001", "::ffff:127.0.0.1", "10.0.0.1", "169.254.169.254"} {
		if _, _, err := strict.CreateWebhook(context.Background(), f.dev.ID, at(h)); !errors.As(err, &fe) || fe.Field != "url" {
			t.Errorf("saving %s: %v, want a field error on url", at(h), err)
		}
	}

	w, err := alerts.NewWorker(f.pool, sessionSecret, alerts.WorkerOptions{
		Dialer: egress.NewDialer(egress.Options{Resolver: tableDNS{"hooks.example": {netip.MustParseAddr("127.0.0.1")}}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	// A name passes when saved (it could resolve anywhere) and is refused
	// when it resolves inside.
	if _, _, err := strict.CreateWebhook(context.Background(), f.dev.ID, at("hooks.example")); err != nil {
		t.Fatalf("saving a name: %v", err)
	}
	for _, h := range []string{"127.0.0.1", "::1", "localhost", "0", "0177.0.0.1", "0x7f000001", "2130706433", "::ffff:127.0.0.1", "0.0.0.0", "hooks.example"} {
		d := sendTest(t, f, w, at(h))
		if d.State != "pending" || d.LastStatus != nil || !strings.HasPrefix(d.LastError, "refused: ") {
			t.Errorf("%s: state %s, status %v, error %q; want pending, none, refused", at(h), d.State, d.LastStatus, d.LastError)
		}
	}
	if n := inside.accepted(t); n != 0 {
		t.Fatalf("the server on 127.0.0.1 accepted %d connections, want 0", n)
	}
}

// TestDeliveryErrorsSayLittle: what the developer's log shows about a
// failed delivery does not tell one kind of answer from another (a port
// that refuses, a server that hangs up, one that answers 401): the log is
// no port scanner. The server log keeps the detail for the operator.
func TestDeliveryErrorsSayLittle(t *testing.T) {
	f := newFixture(t, testenv.Postgres(t), dailyWindow)
	unauthorized := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "who are you", http.StatusUnauthorized)
	}))
	t.Cleanup(unauthorized.Close)
	hangUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, _, _ := w.(http.Hijacker).Hijack()
		_ = conn.Close()
	}))
	t.Cleanup(hangUp.Close)
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(hang) })
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	logged := &lockedBuffer{}
	w, err := alerts.NewWorker(f.pool, sessionSecret, alerts.WorkerOptions{
		Dialer: receiverDialer(), Timeout: 500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logged, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, url, want string }{
		{"Unauthorized", unauthorized.URL, "failed: the receiver did not answer 2xx"},
		{"HangUp", hangUp.URL, "failed: no answer from the receiver"},
		{"ConnectionRefused", closedURL, "failed: no answer from the receiver"},
		{"TimedOut", slow.URL, "timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := sendTest(t, f, w, tc.url)
			if d.LastError != tc.want || d.LastStatus != nil {
				t.Errorf("shown: error %q, status %v; want %q and no status", d.LastError, d.LastStatus, tc.want)
			}
			for _, leak := range []string{"401", "Unauthorized", "EOF", "connection refused", "reset", "127.0.0.1"} {
				if strings.Contains(d.LastError, leak) {
					t.Errorf("shown error %q tells %q", d.LastError, leak)
				}
			}
		})
	}
	for _, detail := range []string{"401 Unauthorized", "connection refused"} {
		if !strings.Contains(logged.String(), detail) {
			t.Errorf("the server log lacks %q for the operator:\n%s", detail, logged.String())
		}
	}
}

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
