package alerts_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/alerts"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// smtpServer is a real SMTP server, small enough to read: EHLO, AUTH PLAIN,
// MAIL, RCPT, DATA, RSET, NOOP, QUIT, over plain TCP on loopback (where
// net/smtp allows PLAIN without TLS). A library server (go-smtp) would do
// the same at the price of a dependency for a test.
type smtpServer struct {
	ln         net.Listener
	user, pass string
	// failRcpt answers the first n RCPTs 451 (try again later).
	failRcpt int
	// starttls, when set, is offered as STARTTLS on a plain listener.
	starttls *tls.Config
	mu       sync.Mutex
	mails    []mail
}

type mail struct {
	from, to string
	authed   bool
	// overTLS says the session was encrypted when it authenticated.
	overTLS bool
	data    string
}

func newSMTPServer(t *testing.T, user, pass string, failRcpt int) *smtpServer {
	return newSMTPServerOn(t, user, pass, failRcpt, nil, nil)
}

// newSMTPServerOn is newSMTPServer speaking TLS from the first byte
// (smtps) when cfg is set, or offering STARTTLS when starttls is.
func newSMTPServerOn(t *testing.T, user, pass string, failRcpt int, cfg, starttls *tls.Config) *smtpServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	s := &smtpServer{ln: ln, user: user, pass: pass, failRcpt: failRcpt, starttls: starttls}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *smtpServer) url() string {
	return "smtp://" + url.UserPassword(s.user, s.pass).String() + "@" + s.ln.Addr().String()
}

func (s *smtpServer) serve(c net.Conn) {
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	say := func(line string) { _, _ = c.Write([]byte(line + "\r\n")) }
	say("220 test.local ESMTP")
	_, secure := c.(*tls.Conn)
	var m mail
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO", "HELO":
			say("250-test.local")
			if s.starttls != nil && !secure {
				say("250-STARTTLS")
			}
			say("250 AUTH PLAIN")
		case "STARTTLS":
			if s.starttls == nil || secure {
				say("502 Command not implemented")
				continue
			}
			say("220 Ready to start TLS")
			tc := tls.Server(c, s.starttls)
			if err := tc.Handshake(); err != nil {
				return
			}
			c, r, secure = tc, bufio.NewReader(tc), true
			m = mail{}
		case "AUTH":
			mech, resp, _ := strings.Cut(arg, " ")
			b, _ := base64.StdEncoding.DecodeString(resp)
			if mech == "PLAIN" && string(b) == "\x00"+s.user+"\x00"+s.pass {
				m.authed, m.overTLS = true, secure
				say("235 2.7.0 Authentication successful")
			} else {
				say("535 5.7.8 Authentication credentials invalid")
			}
		case "MAIL":
			m.from = strings.TrimPrefix(arg, "FROM:")
			say("250 OK")
		case "RCPT":
			s.mu.Lock()
			fail := s.failRcpt > 0
			s.failRcpt--
			s.mu.Unlock()
			if fail {
				say("451 4.3.0 Try again later")
				continue
			}
			m.to = strings.TrimPrefix(arg, "TO:")
			say("250 OK")
		case "DATA":
			say("354 End data with <CR><LF>.<CR><LF>")
			var b strings.Builder
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
				b.WriteString(strings.TrimPrefix(l, "."))
			}
			m.data = b.String()
			s.mu.Lock()
			s.mails = append(s.mails, m)
			s.mu.Unlock()
			m = mail{authed: m.authed, overTLS: m.overTLS}
			say("250 OK queued")
		case "RSET":
			m = mail{authed: m.authed, overTLS: m.overTLS}
			say("250 OK")
		case "NOOP":
			say("250 OK")
		case "QUIT":
			say("221 Bye")
			return
		default:
			say("502 Command not implemented")
		}
	}
}

func (s *smtpServer) received() []mail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]mail(nil), s.mails...)
}

func TestEmailAlertThroughSMTP(t *testing.T) {
	f := newFixture(t, testenv.Postgres(t), dailyWindow)
	ctx := context.Background()
	srv := newSMTPServer(t, "alerts", "s3cret pass", 1)
	mailer, err := alerts.ParseSMTPURL(srv.url(), "alerts@sluice.example")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.svc.EnsureDefaultRule(ctx, f.dev.ID); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	store := memstore.New(memstore.Options{Now: func() time.Time { return frozen }})
	ev := f.evaluator(f.pool, store, true)
	w, err := alerts.NewWorker(f.pool, sessionSecret, alerts.WorkerOptions{Dialer: receiverDialer(), Mailer: mailer, RetryBase: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.spend(store, 8)
	if n := f.evaluate(ev); n != 1 {
		t.Fatalf("fired %d, want 1", n)
	}
	drain(t, f.pool, w)
	got := srv.received()
	if len(got) != 1 {
		t.Fatalf("the SMTP server received %d mails, want 1 (after one 451)", len(got))
	}
	m := got[0]
	if !m.authed || m.from != "<alerts@sluice.example>" || m.to != "<dev@example.com>" {
		t.Errorf("envelope: %+v", m)
	}
	if !strings.Contains(m.data, "Subject: Sluice: 80% of "+f.limits[0].Name+" used\r\n") ||
		!strings.Contains(m.data, "Used: 8 of 10 (80%)") {
		t.Errorf("message:\n%s", m.data)
	}
	log, err := f.svc.Deliveries(ctx, f.dev.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 1 || log[0].State != "delivered" || log[0].Attempts != 2 || log[0].LastStatus == nil ||
		*log[0].LastStatus != 250 || log[0].Destination != "dev@example.com" {
		t.Fatalf("delivery log: %+v", log)
	}
}

// smtps:// speaks TLS from the first byte, and authenticates inside it.
func TestEmailOverImplicitTLS(t *testing.T) {
	// httptest's certificate covers 127.0.0.1; its client trusts it.
	certs := httptest.NewTLSServer(http.NotFoundHandler())
	defer certs.Close()
	srv := newSMTPServerOn(t, "alerts", "pw", 0, &tls.Config{Certificates: certs.TLS.Certificates}, nil)
	mailer, err := alerts.ParseSMTPURL("smtps://alerts:pw@"+srv.ln.Addr().String(), "alerts@sluice.example")
	if err != nil {
		t.Fatal(err)
	}
	mailer.TLSConfig = &tls.Config{RootCAs: certs.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, ServerName: "127.0.0.1"}
	if err := mailer.Send(context.Background(), "dev@example.com", "Sluice: test alert", "hello\r\n"); err != nil {
		t.Fatal(err)
	}
	got := srv.received()
	if len(got) != 1 || !got[0].authed || !strings.Contains(got[0].data, "Subject: Sluice: test alert\r\n") {
		t.Fatalf("received %+v", got)
	}
	// A client that does not trust the certificate sends nothing.
	mailer.TLSConfig = nil
	if err := mailer.Send(context.Background(), "dev@example.com", "x", "y"); err == nil || len(srv.received()) != 1 {
		t.Fatalf("an untrusted server got the mail (err %v)", err)
	}
}

// smtp:// upgrades with STARTTLS when the server offers it, before the
// password is sent.
func TestEmailUpgradesWithSTARTTLS(t *testing.T) {
	certs := httptest.NewTLSServer(http.NotFoundHandler())
	defer certs.Close()
	srv := newSMTPServerOn(t, "alerts", "pw", 0, nil, &tls.Config{Certificates: certs.TLS.Certificates})
	mailer, err := alerts.ParseSMTPURL("smtp://alerts:pw@"+srv.ln.Addr().String(), "alerts@sluice.example")
	if err != nil {
		t.Fatal(err)
	}
	mailer.TLSConfig = &tls.Config{RootCAs: certs.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, ServerName: "127.0.0.1"}
	if err := mailer.Send(context.Background(), "dev@example.com", "Sluice: test alert", "hello\r\n"); err != nil {
		t.Fatal(err)
	}
	if got := srv.received(); len(got) != 1 || !got[0].authed || !got[0].overTLS {
		t.Fatalf("received %+v, want one mail authenticated over TLS", got)
	}
}

func TestParseSMTPURL(t *testing.T) {
	tests := []struct{ url, from, err string }{
		{"smtp://u:p@mail.example.com:2525", "alerts@example.com", ""},
		{"smtps://mail.example.com", "Sluice <alerts@example.com>", ""},
		{"http://mail.example.com", "alerts@example.com", "must start with smtp:// or smtps://"},
		{"smtp://", "alerts@example.com", "must name a host"},
		{"smtp://mail.example.com", "not an address", `bad From address "not an address"`},
	}
	for _, tc := range tests {
		_, err := alerts.ParseSMTPURL(tc.url, tc.from)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != tc.err {
			t.Errorf("ParseSMTPURL(%q, %q) = %q, want %q", tc.url, tc.from, msg, tc.err)
		}
	}
}
