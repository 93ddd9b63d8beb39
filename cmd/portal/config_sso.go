package main

import (
	"errors"
	"log/slog"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/egress"
	"github.com/sluicehq/sluice/internal/sso"
)

// ssoConfig is sign-in with an OpenID Connect provider (issue 37): off
// while PORTAL_OIDC_ISSUER is unset.
type ssoConfig struct {
	// Issuer is the provider's issuer URL (PORTAL_OIDC_ISSUER).
	Issuer string
	// ClientID and ClientSecret are the portal's registration there
	// (PORTAL_OIDC_CLIENT_ID, PORTAL_OIDC_CLIENT_SECRET).
	ClientID, ClientSecret string
	// RedirectURL is the portal's callback as the browser reaches it
	// (PORTAL_OIDC_REDIRECT_URL), ending in sso.CallbackPath.
	RedirectURL string
	// Scopes are asked for besides openid (PORTAL_OIDC_SCOPES).
	Scopes []string
	// OperatorGroups and OperatorDomains make an operator
	// (PORTAL_OIDC_OPERATOR_GROUPS, PORTAL_OIDC_OPERATOR_DOMAINS);
	// GroupsClaim names the claim with the groups (PORTAL_OIDC_GROUPS_CLAIM).
	OperatorGroups, OperatorDomains []string
	GroupsClaim                     string
	// Developers lets everyone else sign in as a developer
	// (PORTAL_OIDC_DEVELOPERS).
	Developers bool
}

// check says which setting to fix when the SSO settings disagree.
func (c ssoConfig) check() error {
	if c.Issuer == "" {
		if c.ClientID != "" || c.ClientSecret != "" || c.RedirectURL != "" || len(c.OperatorGroups) > 0 || len(c.OperatorDomains) > 0 || c.Developers {
			return errors.New("invalid PORTAL_OIDC_ISSUER (-oidc-issuer): other PORTAL_OIDC_ settings are set, so sign-in with SSO needs the provider's issuer URL")
		}
		return nil
	}
	switch {
	case c.ClientID == "":
		return errors.New("invalid PORTAL_OIDC_CLIENT_ID (-oidc-client-id): PORTAL_OIDC_ISSUER is set, so the portal needs its client ID at the provider")
	case c.ClientSecret == "":
		return errors.New("invalid PORTAL_OIDC_CLIENT_SECRET (-oidc-client-secret): PORTAL_OIDC_ISSUER is set, so the portal needs its client secret at the provider")
	case c.RedirectURL == "":
		return errors.New("invalid PORTAL_OIDC_REDIRECT_URL (-oidc-redirect-url): PORTAL_OIDC_ISSUER is set, so the provider needs the portal's callback URL, e.g. https://portal.example.com" + sso.CallbackPath)
	case len(c.OperatorGroups) == 0 && len(c.OperatorDomains) == 0 && !c.Developers:
		return errors.New("invalid PORTAL_OIDC_OPERATOR_GROUPS (-oidc-operator-groups): PORTAL_OIDC_ISSUER is set but no group or email domain (PORTAL_OIDC_OPERATOR_DOMAINS) makes an operator and PORTAL_OIDC_DEVELOPERS is off, so SSO would sign no one in")
	}
	return nil
}

// client is the SSO client, nil when SSO is off. Requests to the provider
// go through the egress dialer with the Internal policy: the operator
// named the issuer, and identity providers often live on the operator's
// network; link-local and metadata addresses stay refused.
func (c ssoConfig) client(logger *slog.Logger) *sso.Client {
	if c.Issuer == "" {
		return nil
	}
	hc := egress.NewDialer(egress.Options{Rules: egress.Rules{Policy: egress.Internal}}).
		Client(egress.ClientOptions{MaxRedirects: 3})
	logger.Info("sign-in with SSO on", "issuer", c.Issuer, "operator_groups", len(c.OperatorGroups),
		"operator_domains", len(c.OperatorDomains), "developers", c.Developers)
	return sso.New(sso.Config{
		Issuer: c.Issuer, ClientID: c.ClientID, ClientSecret: c.ClientSecret,
		RedirectURL: c.RedirectURL, Scopes: c.Scopes,
	}, hc)
}

// policy is who may sign in with SSO, and as what.
func (c ssoConfig) policy() sso.Policy {
	return sso.Policy{
		OperatorGroups: c.OperatorGroups, OperatorDomains: c.OperatorDomains,
		Developers: c.Developers, GroupsClaim: c.GroupsClaim,
	}
}

// httpURL checks an http or https URL with a host; plain http only to a
// loopback host, since codes and tokens travel over it.
func httpURL(v string) (*url.URL, error) {
	u, err := url.Parse(v)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("not an http or https URL without user, query or fragment")
	}
	switch u.Scheme {
	case "https":
	case "http":
		h := u.Hostname()
		ip, err := netip.ParseAddr(h)
		if h != "localhost" && (err != nil || !ip.IsLoopback()) {
			return nil, errors.New("http only to a loopback host: use https")
		}
	default:
		return nil, errors.New("not an http or https URL")
	}
	return u, nil
}

// list splits a comma-separated setting, dropping empty entries.
func list(v string) []string {
	var out []string
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

var (
	domainName = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$`)
	claimName  = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,100}$`)
	scopeName  = regexp.MustCompile(`^[\x21\x23-\x5B\x5D-\x7E]{1,100}$`)
)

// ssoSettings are the settings of ssoConfig.
func ssoSettings() []setting {
	return []setting{
		{env: "PORTAL_OIDC_ISSUER", flag: "oidc-issuer",
			accepts: "the OpenID Connect provider's issuer URL (https, or http to a loopback host), e.g. https://login.example.com/realms/staff, or empty for no SSO",
			set: func(c *Config, v string) error {
				c.SSO.Issuer = v
				if v == "" {
					return nil
				}
				_, err := httpURL(v)
				return err
			}},
		{env: "PORTAL_OIDC_CLIENT_ID", flag: "oidc-client-id", accepts: "the portal's client ID at the provider",
			set: func(c *Config, v string) error {
				if len(v) > 255 {
					return errors.New("too long")
				}
				c.SSO.ClientID = v
				return nil
			}},
		{env: "PORTAL_OIDC_CLIENT_SECRET", flag: "oidc-client-secret", secret: true, accepts: "the portal's client secret at the provider",
			set: func(c *Config, v string) error {
				if len(v) > 1024 {
					return errors.New("too long")
				}
				c.SSO.ClientSecret = v
				return nil
			}},
		{env: "PORTAL_OIDC_REDIRECT_URL", flag: "oidc-redirect-url",
			accepts: "the portal's callback as browsers reach it, registered at the provider: https://<the portal's host>" + sso.CallbackPath,
			set: func(c *Config, v string) error {
				c.SSO.RedirectURL = v
				if v == "" {
					return nil
				}
				u, err := httpURL(v)
				if err != nil {
					return err
				}
				if u.Path != sso.CallbackPath {
					return errors.New("the path must be " + sso.CallbackPath)
				}
				return nil
			}},
		{env: "PORTAL_OIDC_SCOPES", flag: "oidc-scopes", def: "email,profile",
			accepts: "comma-separated scopes asked for besides openid, e.g. email,profile,groups",
			set: func(c *Config, v string) error {
				c.SSO.Scopes = list(v)
				for _, s := range c.SSO.Scopes {
					if !scopeName.MatchString(s) || s == "openid" {
						return errors.New("not a scope: " + strconv.Quote(s))
					}
				}
				return nil
			}},
		{env: "PORTAL_OIDC_OPERATOR_GROUPS", flag: "oidc-operator-groups",
			accepts: "comma-separated group names: someone whose groups claim holds one of them signs in as an operator",
			set: func(c *Config, v string) error {
				c.SSO.OperatorGroups = list(v)
				return nil
			}},
		{env: "PORTAL_OIDC_OPERATOR_DOMAINS", flag: "oidc-operator-domains",
			accepts: "comma-separated email domains, e.g. example.com: someone whose verified email is at one of them signs in as an operator",
			set: func(c *Config, v string) error {
				c.SSO.OperatorDomains = list(strings.ToLower(v))
				for _, d := range c.SSO.OperatorDomains {
					if !domainName.MatchString(d) {
						return errors.New("not a domain name: " + strconv.Quote(d))
					}
				}
				return nil
			}},
		{env: "PORTAL_OIDC_GROUPS_CLAIM", flag: "oidc-groups-claim", def: sso.DefaultGroupsClaim,
			accepts: "the ID token claim holding the groups, e.g. groups or roles",
			set: func(c *Config, v string) error {
				if !claimName.MatchString(v) {
					return errors.New("not a claim name")
				}
				c.SSO.GroupsClaim = v
				return nil
			}},
		{env: "PORTAL_OIDC_DEVELOPERS", flag: "oidc-developers", def: "false", accepts: "true or false: everyone else the provider signs in is a developer (else refused)", boolFlag: true,
			set: func(c *Config, v string) error {
				var err error
				c.SSO.Developers, err = strconv.ParseBool(v)
				return err
			}},
	}
}
