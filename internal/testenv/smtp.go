package testenv

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// SMTPTLS is how an SMTPServer speaks TLS.
type SMTPTLS int

const (
	// SMTPPlain speaks no TLS (a password is then taken only on loopback,
	// as net/smtp sends it only there).
	SMTPPlain SMTPTLS = iota
	// SMTPStartTLS offers STARTTLS and takes a password only after it.
	SMTPStartTLS
	// SMTPImplicitTLS speaks TLS from the first byte (smtps).
	SMTPImplicitTLS
)

// SMTPOptions shapes SMTP.
type SMTPOptions struct {
	// User and Pass, when set, are the only credentials AUTH PLAIN takes;
	// a session that does not authenticate may still send.
	User, Pass string
	TLS        SMTPTLS
	// FailRcpt answers the first FailRcpt RCPT commands 451 (try again).
	FailRcpt int
}

// SMTPServer is a real SMTP server (github.com/emersion/go-smtp) on
// loopback that keeps every message it receives.
type SMTPServer struct {
	// Addr is host:port.
	Addr string
	opts SMTPOptions
	// client trusts the server's certificate (TLS modes).
	client *tls.Config

	mu       sync.Mutex
	failRcpt int
	mails    []Mail
	arrived  chan struct{}
}

// Mail is one message an SMTPServer received.
type Mail struct {
	From string
	To   []string
	// Data is the message as sent: headers, a blank line, the body.
	Data string
	// Authed says the session authenticated; OverTLS that it was encrypted
	// when the message was sent.
	Authed, OverTLS bool
}

// Body is the message after its headers, line ends as sent.
func (m Mail) Body() string {
	_, body, _ := strings.Cut(m.Data, "\r\n\r\n")
	return body
}

// Header is the value of the first header named name.
func (m Mail) Header(name string) string {
	head, _, _ := strings.Cut(m.Data, "\r\n\r\n")
	for line := range strings.SplitSeq(head, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.EqualFold(k, name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// SMTP starts an SMTP server for the test, stopped at its end.
func SMTP(t testing.TB, o SMTPOptions) *SMTPServer {
	t.Helper()
	s := &SMTPServer{opts: o, failRcpt: o.FailRcpt, arrived: make(chan struct{}, 1)}
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &smtpSession{srv: s, conn: c}, nil
	}))
	srv.Domain = "smtp.test"
	srv.ReadTimeout = 30 * time.Second
	srv.WriteTimeout = 30 * time.Second
	srv.ErrorLog = discardLogger{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if o.TLS != SMTPPlain {
		// httptest's certificate covers 127.0.0.1, and its client trusts it.
		certs := httptest.NewTLSServer(http.NotFoundHandler())
		certs.Close()
		cfg := &tls.Config{Certificates: certs.TLS.Certificates}
		s.client = &tls.Config{RootCAs: certs.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, ServerName: "127.0.0.1"}
		if o.TLS == SMTPImplicitTLS {
			ln = tls.NewListener(ln, cfg)
		} else {
			srv.TLSConfig = cfg
		}
	} else {
		srv.AllowInsecureAuth = true
	}
	s.Addr = ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

// URL is the PORTAL_SMTP_URL of the server, with its credentials.
func (s *SMTPServer) URL() string {
	scheme := "smtp"
	if s.opts.TLS == SMTPImplicitTLS {
		scheme = "smtps"
	}
	u := url.URL{Scheme: scheme, Host: s.Addr}
	if s.opts.User != "" {
		u.User = url.UserPassword(s.opts.User, s.opts.Pass)
	}
	return u.String()
}

// ClientTLS trusts the server's certificate; nil for SMTPPlain.
func (s *SMTPServer) ClientTLS() *tls.Config {
	if s.client == nil {
		return nil
	}
	return s.client.Clone()
}

// Received returns the messages received so far, oldest first.
func (s *SMTPServer) Received() []Mail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Mail(nil), s.mails...)
}

// WaitFor waits until n messages have arrived, and fails the test when
// they have not within 20 seconds.
func (s *SMTPServer) WaitFor(t testing.TB, n int) []Mail {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		if got := s.Received(); len(got) >= n {
			return got
		}
		select {
		case <-s.arrived:
		case <-deadline:
			t.Fatalf("the SMTP server received %d messages in 20s, want %d", len(s.Received()), n)
		}
	}
}

type smtpSession struct {
	srv    *SMTPServer
	conn   *smtp.Conn
	authed bool
	from   string
	to     []string
}

func (ss *smtpSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (ss *smtpSession) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, user, pass string) error {
		if user != ss.srv.opts.User || pass != ss.srv.opts.Pass || ss.srv.opts.User == "" {
			return errors.New("invalid credentials")
		}
		ss.authed = true
		return nil
	}), nil
}

func (ss *smtpSession) Mail(from string, _ *smtp.MailOptions) error { ss.from = from; return nil }

func (ss *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.srv.mu.Lock()
	fail := ss.srv.failRcpt > 0
	ss.srv.failRcpt--
	ss.srv.mu.Unlock()
	if fail {
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "Try again later"}
	}
	ss.to = append(ss.to, to)
	return nil
}

func (ss *smtpSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	_, overTLS := ss.conn.TLSConnectionState()
	ss.srv.mu.Lock()
	ss.srv.mails = append(ss.srv.mails, Mail{From: ss.from, To: ss.to, Data: string(b), Authed: ss.authed, OverTLS: overTLS})
	ss.srv.mu.Unlock()
	select {
	case ss.srv.arrived <- struct{}{}:
	default:
	}
	return nil
}

func (ss *smtpSession) Reset()        { ss.from, ss.to = "", nil }
func (ss *smtpSession) Logout() error { return nil }

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}
func (discardLogger) Println(...any)        {}
