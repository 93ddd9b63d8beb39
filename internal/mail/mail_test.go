package mail_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/egress"
	"github.com/sluicehq/sluice/internal/mail"
	"github.com/sluicehq/sluice/internal/testenv"
)

func send(t *testing.T, s *mail.Sender, m mail.Message) error {
	t.Helper()
	return s.Send(context.Background(), m)
}

func TestSendPlainOnLoopback(t *testing.T) {
	srv := testenv.SMTP(t, testenv.SMTPOptions{User: "sluice", Pass: "s3cret pass"})
	s, err := mail.New(srv.URL(), "Sluice <noreply@sluice.example>", mail.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := send(t, s, mail.Message{To: "dev@example.com", Subject: "Prüfung: hello", Body: "line one\nline two\n"}); err != nil {
		t.Fatal(err)
	}
	got := srv.Received()
	if len(got) != 1 {
		t.Fatalf("received %d messages, want 1", len(got))
	}
	m := got[0]
	if !m.Authed || m.From != "noreply@sluice.example" || len(m.To) != 1 || m.To[0] != "dev@example.com" {
		t.Errorf("envelope: authed %v from %q to %q", m.Authed, m.From, m.To)
	}
	if m.Header("Subject") != "=?utf-8?q?Pr=C3=BCfung:_hello?=" || m.Header("From") != "Sluice <noreply@sluice.example>" ||
		m.Header("Message-ID") == "" || m.Header("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("headers:\n%s", m.Data)
	}
	if m.Body() != "line one\r\nline two\r\n" {
		t.Errorf("body %q, want CRLF line ends", m.Body())
	}
}

func TestSendUpgradesWithSTARTTLS(t *testing.T) {
	srv := testenv.SMTP(t, testenv.SMTPOptions{User: "sluice", Pass: "pw", TLS: testenv.SMTPStartTLS})
	s, err := mail.New(srv.URL(), "noreply@sluice.example", mail.Options{TLSConfig: srv.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	if err := send(t, s, mail.Message{To: "dev@example.com", Subject: "hi", Body: "hello"}); err != nil {
		t.Fatal(err)
	}
	if got := srv.Received(); len(got) != 1 || !got[0].Authed || !got[0].OverTLS {
		t.Fatalf("received %+v, want one message, authenticated, over TLS", got)
	}
}

func TestSendOverImplicitTLS(t *testing.T) {
	srv := testenv.SMTP(t, testenv.SMTPOptions{User: "sluice", Pass: "pw", TLS: testenv.SMTPImplicitTLS})
	if !strings.HasPrefix(srv.URL(), "smtps://") {
		t.Fatalf("URL %q", srv.URL())
	}
	s, err := mail.New(srv.URL(), "noreply@sluice.example", mail.Options{TLSConfig: srv.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	if err := send(t, s, mail.Message{To: "dev@example.com", Subject: "hi", Body: "hello"}); err != nil {
		t.Fatal(err)
	}
	if got := srv.Received(); len(got) != 1 || !got[0].Authed || !got[0].OverTLS {
		t.Fatalf("received %+v", got)
	}
	// A client that does not trust the certificate sends nothing.
	untrusting, _ := mail.New(srv.URL(), "noreply@sluice.example", mail.Options{})
	if err := send(t, untrusting, mail.Message{To: "dev@example.com", Subject: "x", Body: "y"}); err == nil || len(srv.Received()) != 1 {
		t.Fatalf("an untrusted server got the message (err %v)", err)
	}
}

func TestSendRefusals(t *testing.T) {
	srv := testenv.SMTP(t, testenv.SMTPOptions{FailRcpt: 1})
	s, err := mail.New(srv.URL(), "noreply@sluice.example", mail.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("ServerCodeKept", func(t *testing.T) {
		err := send(t, s, mail.Message{To: "dev@example.com", Subject: "x", Body: "y"})
		if mail.Code(err) != 451 {
			t.Errorf("Code(%v) = %d, want 451", err, mail.Code(err))
		}
	})
	for _, tt := range []struct{ name, to, subject string }{
		{"ErrRecipientWithHeader", "dev@example.com\r\nBcc: other@example.com", "x"},
		{"ErrRecipientWithName", "Dev <dev@example.com>", "x"},
		{"ErrSubjectWithLineBreak", "dev@example.com", "x\r\nBcc: other@example.com"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := send(t, s, mail.Message{To: tt.to, Subject: tt.subject, Body: "y"}); !errors.Is(err, mail.ErrBadMessage) {
				t.Errorf("Send = %v, want ErrBadMessage", err)
			}
		})
	}
	if got := srv.Received(); len(got) != 0 {
		t.Errorf("received %d messages, want none", len(got))
	}
	t.Run("ErrEgressRefused", func(t *testing.T) {
		// The Public policy (a webhook's) refuses the loopback server: the
		// dial goes through the egress dialer given.
		public, _ := mail.New(srv.URL(), "noreply@sluice.example", mail.Options{Dialer: egress.NewDialer(egress.Options{})})
		err := send(t, public, mail.Message{To: "dev@example.com", Subject: "x", Body: "y"})
		if !errors.Is(err, egress.ErrRefused) {
			t.Errorf("Send through a Public dialer = %v, want egress.ErrRefused", err)
		}
		metadata, _ := mail.New("smtp://169.254.169.254:25", "noreply@sluice.example", mail.Options{})
		if err := send(t, metadata, mail.Message{To: "dev@example.com", Subject: "x", Body: "y"}); !errors.Is(err, egress.ErrRefused) {
			t.Errorf("Send to a link-local address with the default dialer = %v, want egress.ErrRefused", err)
		}
	})
}

func TestNew(t *testing.T) {
	tests := []struct{ url, from, err string }{
		{"smtp://u:p@mail.example.com:2525", "alerts@example.com", ""},
		{"smtps://mail.example.com", "Sluice <alerts@example.com>", ""},
		{"http://u:hunter2@mail.example.com", "alerts@example.com", "must start with smtp:// or smtps://"},
		{"smtp://", "alerts@example.com", "must name a host"},
		{"smtp://mail.example.com", "not an address", `bad From address "not an address"`},
	}
	for _, tc := range tests {
		s, err := mail.New(tc.url, tc.from, mail.Options{})
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != tc.err {
			t.Errorf("New(%q, %q) = %q, want %q", tc.url, tc.from, msg, tc.err)
		}
		if err == nil && s.From() != "alerts@example.com" {
			t.Errorf("From() = %q", s.From())
		}
	}
}
