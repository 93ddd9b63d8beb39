package alerts

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"net/url"
	"strings"
	"time"
)

// Mailer sends alert emails through one SMTP server.
type Mailer struct {
	addr, host string
	// implicitTLS is smtps:// (TLS from the first byte, usually port 465);
	// smtp:// upgrades with STARTTLS when the server offers it.
	implicitTLS bool
	user, pass  string
	from        string
	// TLSConfig, when set, replaces the default TLS settings (tests use
	// it to trust their own server).
	TLSConfig *tls.Config
}

// ParseSMTPURL reads smtp://user:pass@host:port or smtps://... (the port
// defaults to 587 and 465) and the From address; the errors never repeat
// the password.
func ParseSMTPURL(raw, from string) (*Mailer, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("not a URL")
	}
	m := &Mailer{}
	port := ""
	switch u.Scheme {
	case "smtp":
		port = "587"
	case "smtps":
		port, m.implicitTLS = "465", true
	default:
		return nil, errors.New("must start with smtp:// or smtps://")
	}
	m.host = u.Hostname()
	if m.host == "" {
		return nil, errors.New("must name a host")
	}
	if p := u.Port(); p != "" {
		port = p
	}
	m.addr = net.JoinHostPort(m.host, port)
	if u.User != nil {
		m.user = u.User.Username()
		m.pass, _ = u.User.Password()
	}
	a, err := mail.ParseAddress(from)
	if err != nil {
		return nil, fmt.Errorf("bad From address %q", from)
	}
	m.from = a.Address
	return m, nil
}

// Send sends one plain-text message to to. The password goes only over TLS
// (net/smtp's PLAIN refuses otherwise, except to localhost).
func (m *Mailer) Send(ctx context.Context, to, subject, body string) error {
	if strings.ContainsAny(to+subject, "\r\n") {
		return errors.New("header injection refused")
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", m.addr)
	if err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	tcfg := m.TLSConfig
	if tcfg == nil {
		tcfg = &tls.Config{ServerName: m.host, MinVersion: tls.VersionTLS12}
	}
	if m.implicitTLS {
		conn = tls.Client(conn, tcfg)
	}
	c, err := smtp.NewClient(conn, m.host)
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("smtp: %w", err)
	}
	defer c.Close()
	if err := c.Hello("sluice"); err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	if !m.implicitTLS {
		if ok, _ := c.Extension("STARTTLS"); ok {
			if err := c.StartTLS(tcfg); err != nil {
				return fmt.Errorf("smtp starttls: %w", err)
			}
		}
	}
	if m.user != "" {
		if err := c.Auth(smtp.PlainAuth("", m.user, m.pass, m.host)); err != nil {
			return fmt.Errorf("smtp auth: %w", err)
		}
	}
	if err := c.Mail(m.from); err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	if err := c.Rcpt(to); err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	wc, err := c.Data()
	if err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	msg := "From: Sluice <" + m.from + ">\r\n" +
		"To: <" + to + ">\r\n" +
		"Subject: " + subject + "\r\n" +
		"Date: " + time.Now().UTC().Format(time.RFC1123Z) + "\r\n" +
		"MIME-Version: 1.0\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\n" +
		"\r\n" + body
	if _, err := wc.Write([]byte(msg)); err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	if err := wc.Close(); err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	return c.Quit()
}

// smtpCode is the server's reply code in err, 0 when it did not answer.
func smtpCode(err error) int {
	var te *textproto.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}
