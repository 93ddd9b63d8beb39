package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestAlertSettings(t *testing.T) {
	t.Run("Defaults", func(t *testing.T) {
		cfg, _, err := LoadConfig(nil, envOf(map[string]string{"HOME": "/home/u"}), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.AlertInterval != 5*time.Second || cfg.SMTPURL != "" || cfg.SMTPFrom != "sluice@localhost" || cfg.OutboundAllow.String() != "" {
			t.Fatalf("alert defaults: %v %q %q %q", cfg.AlertInterval, cfg.SMTPURL, cfg.SMTPFrom, cfg.OutboundAllow)
		}
	})
	t.Run("Set", func(t *testing.T) {
		cfg, _, err := LoadConfig([]string{"-alert-interval=250ms"}, envOf(map[string]string{
			"HOME": "/home/u", "PORTAL_SMTP_URL": "smtps://a:b@mail.example.com", "PORTAL_SMTP_FROM": "Alerts <alerts@example.com>",
			"PORTAL_OUTBOUND_ALLOW": "10.0.0.0/8, hooks.internal", "PORTAL_PUBLIC_URL": "https://portal.example.com/",
		}), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.PublicURL != "https://portal.example.com" {
			t.Errorf("public URL %q, want it without the trailing slash", cfg.PublicURL)
		}
		if got := cfg.OutboundAllow.String(); got != "10.0.0.0/8,hooks.internal" {
			t.Errorf("outbound allowlist %q", got)
		}
		if cfg.AlertInterval != 250*time.Millisecond || cfg.SMTPURL != "smtps://a:b@mail.example.com" || cfg.SMTPFrom != "alerts@example.com" {
			t.Fatalf("alert settings: %v %q %q", cfg.AlertInterval, cfg.SMTPURL, cfg.SMTPFrom)
		}
	})
	tests := []struct {
		name, env, value, want string
	}{
		{"ErrSMTPSchemeWithPasswordHidden", "PORTAL_SMTP_URL", "http://alerts:hunter2@mail.example.com",
			"invalid PORTAL_SMTP_URL (-smtp-url) (value hidden): must start with smtp:// or smtps://"},
		{"ErrSMTPNoHost", "PORTAL_SMTP_URL", "smtp://", "invalid PORTAL_SMTP_URL (-smtp-url) (value hidden): must name a host"},
		{"ErrFrom", "PORTAL_SMTP_FROM", "nobody", `invalid PORTAL_SMTP_FROM (-smtp-from) "nobody": not an email address`},
		{"ErrPublicURLNotAbsolute", "PORTAL_PUBLIC_URL", "portal.example.com", `invalid PORTAL_PUBLIC_URL (-public-url) "portal.example.com": not an absolute http or https URL`},
		{"ErrPublicURLWithPath", "PORTAL_PUBLIC_URL", "https://portal.example.com/app", `invalid PORTAL_PUBLIC_URL (-public-url) "https://portal.example.com/app": must be scheme and host only`},
		{"ErrIntervalTooShort", "PORTAL_ALERT_INTERVAL", "1ms", `invalid PORTAL_ALERT_INTERVAL (-alert-interval) "1ms": out of range`},
		{"ErrOutboundAllow", "PORTAL_OUTBOUND_ALLOW", "10.0.0.0/8,0177.0.0.1", `invalid PORTAL_OUTBOUND_ALLOW (-outbound-allow) "10.0.0.0/8,0177.0.0.1": "0177.0.0.1" is not an IP address, a CIDR prefix or a host name`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := LoadConfig(nil, envOf(map[string]string{"HOME": "/home/u", tc.env: tc.value}), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatal("the error shows the password")
			}
		})
	}
}
