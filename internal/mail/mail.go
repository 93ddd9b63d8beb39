// Package mail sends the portal's email through one SMTP server: sign-up
// confirmations, password reset links, key expiry notices and alert
// emails. The server is the operator's, named by PORTAL_SMTP_URL
// (smtp://[user:password@]host:port, STARTTLS when the server offers it, or
// smtps:// for TLS from the first byte) and PORTAL_SMTP_FROM.
//
// The client is the standard library's net/smtp: the portal needs EHLO,
// STARTTLS, AUTH PLAIN, MAIL, RCPT and DATA, all of which it has, and its
// PLAIN refuses to send a password over an unencrypted connection to
// anything but loopback. The connection is dialed through an egress.Dialer.
package mail

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net"
	netmail "net/mail"
	"net/smtp"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/egress"
)

// Dialer opens the TCP connection to the SMTP server; *egress.Dialer is one.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Options shapes New.
type Options struct {
	// Dialer connects to the server. nil means an egress dialer with the
	// Internal policy: the server is the operator's choice, and mail relays
	// commonly live on loopback or the operator's private network; cloud
	// metadata and link-local addresses stay refused.
	Dialer Dialer
	// TLSConfig, when set, replaces the default TLS settings (the server
	// name from the URL, TLS 1.2 or later); tests use it to trust their own
	// server.
	TLSConfig *tls.Config
	// Timeout bounds one Send when its context has no deadline; 0 means 30
	// seconds.
	Timeout time.Duration
}

// Sender sends plain-text messages through one SMTP server. It is safe for
// concurrent use: each Send has a connection of its own.
type Sender struct {
	addr, host string
	// implicitTLS is smtps:// (TLS from the first byte, usually port 465);
	// smtp:// upgrades with STARTTLS when the server offers it.
	implicitTLS bool
	user, pass  string
	from        string
	dialer      Dialer
	tlsConfig   *tls.Config
	timeout     time.Duration
}

// New reads rawURL (smtp://user:pass@host:port or smtps://...; the port
// defaults to 587 and 465) and the From address. Its errors never repeat the
// URL, which may hold a password.
func New(rawURL, from string, o Options) (*Sender, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errors.New("not a URL")
	}
	s := &Sender{dialer: o.Dialer, tlsConfig: o.TLSConfig, timeout: o.Timeout}
	port := ""
	switch u.Scheme {
	case "smtp":
		port = "587"
	case "smtps":
		port, s.implicitTLS = "465", true
	default:
		return nil, errors.New("must start with smtp:// or smtps://")
	}
	s.host = u.Hostname()
	if s.host == "" {
		return nil, errors.New("must name a host")
	}
	if p := u.Port(); p != "" {
		port = p
	}
	s.addr = net.JoinHostPort(s.host, port)
	if u.User != nil {
		s.user = u.User.Username()
		s.pass, _ = u.User.Password()
	}
	a, err := netmail.ParseAddress(from)
	if err != nil {
		return nil, fmt.Errorf("bad From address %q", from)
	}
	s.from = a.Address
	if s.dialer == nil {
		s.dialer = egress.NewDialer(egress.Options{Rules: egress.Rules{Policy: egress.Internal}})
	}
	if s.timeout <= 0 {
		s.timeout = 30 * time.Second
	}
	return s, nil
}

// From is the address messages are sent from.
func (s *Sender) From() string { return s.from }

// Message is one plain-text email to one address.
type Message struct {
	To      string
	Subject string
	// Body is plain text; line ends are sent as CRLF whatever they are here.
	Body string
}

// ErrBadMessage is matched by a message refused before anything is sent:
// an address that is not one, or a line break in a header.
var ErrBadMessage = errors.New("mail: bad message")

// Send delivers m to the server. A password goes only over TLS (STARTTLS
// or smtps), or to a server on loopback. Errors name no password; Code
// reads the server's reply code out of them.
func (s *Sender) Send(ctx context.Context, m Message) error {
	msg, err := s.render(m)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	conn, err := s.dialer.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	// net/smtp takes no context: the deadline of the connection stands in.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	tcfg := s.tlsConfig
	if tcfg == nil {
		tcfg = &tls.Config{ServerName: s.host, MinVersion: tls.VersionTLS12}
	}
	if s.implicitTLS {
		conn = tls.Client(conn, tcfg)
	}
	c, err := smtp.NewClient(conn, s.host)
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("smtp: %w", err)
	}
	defer c.Close()
	if err := c.Hello("sluice"); err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	if !s.implicitTLS {
		if ok, _ := c.Extension("STARTTLS"); ok {
			if err := c.StartTLS(tcfg); err != nil {
				return fmt.Errorf("smtp starttls: %w", err)
			}
		}
	}
	if s.user != "" {
		if err := c.Auth(smtp.PlainAuth("", s.user, s.pass, s.host)); err != nil {
			return fmt.Errorf("smtp auth: %w", err)
		}
	}
	if err := c.Mail(s.from); err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	if err := c.Rcpt(m.To); err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	wc, err := c.Data()
	if err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	if _, err := wc.Write(msg); err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	if err := wc.Close(); err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	return c.Quit()
}

// render writes m with its headers, refusing what could inject a header.
func (s *Sender) render(m Message) ([]byte, error) {
	a, err := netmail.ParseAddress(m.To)
	if err != nil || a.Address != m.To {
		return nil, fmt.Errorf("%w: recipient is not a bare address", ErrBadMessage)
	}
	if strings.ContainsAny(m.Subject, "\r\n") {
		return nil, fmt.Errorf("%w: line break in the subject", ErrBadMessage)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	_, domain, _ := strings.Cut(s.from, "@")
	var b strings.Builder
	b.WriteString("From: Sluice <" + s.from + ">\r\n")
	b.WriteString("To: <" + m.To + ">\r\n")
	b.WriteString("Subject: " + mime.QEncoding.Encode("utf-8", m.Subject) + "\r\n")
	b.WriteString("Date: " + time.Now().UTC().Format(time.RFC1123Z) + "\r\n")
	b.WriteString("Message-ID: <" + hex.EncodeToString(id) + "@" + domain + ">\r\n")
	b.WriteString("Auto-Submitted: auto-generated\r\n")
	b.WriteString("MIME-Version: 1.0\r\n")
	b.WriteString("Content-Type: text/plain; charset=utf-8\r\n")
	b.WriteString("Content-Transfer-Encoding: 8bit\r\n\r\n")
	body := strings.ReplaceAll(strings.ReplaceAll(m.Body, "\r\n", "\n"), "\n", "\r\n")
	b.WriteString(body)
	if !strings.HasSuffix(body, "\r\n") {
		b.WriteString("\r\n")
	}
	return []byte(b.String()), nil
}

// Code is the SMTP server's reply code in err, 0 when the server did not
// answer (a refused or failed connection).
func Code(err error) int {
	var te *textproto.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}
