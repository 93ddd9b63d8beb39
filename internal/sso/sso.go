// Package sso signs people in with an OpenID Connect provider: the
// authorization code flow with PKCE, a state and a nonce bound to the
// browser that began it, and an ID token verified against the provider's
// published keys (package go-oidc does the verifying, package oauth2 the
// exchange). Which role a person gets comes from the ID token's claims
// (Policy); which account they sign in to from Accounts.
//
// Every request to the provider (discovery, the keys, the token exchange)
// goes through the *http.Client given to New: the portal passes one from
// package egress with the Internal policy, since the operator, not a user,
// named the issuer and identity providers often live on the operator's own
// network.
package sso

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// CallbackPath is where the provider sends the browser back; a
// Config.RedirectURL must have this path.
const CallbackPath = "/signin/sso/callback"

// DefaultGroupsClaim is the ID token claim read for group names unless
// Policy.GroupsClaim says otherwise.
const DefaultGroupsClaim = "groups"

// FlowMaxAge bounds how long a person may take at the provider between
// beginning a sign-in and coming back.
const FlowMaxAge = 10 * time.Minute

// Errors from Client and Policy (possibly wrapped).
var (
	// ErrUnavailable means the provider could not be reached or answered
	// nonsense: discovery, keys or the token exchange failed.
	ErrUnavailable = errors.New("identity provider unavailable")
	// ErrBadState means the callback does not belong to a sign-in this
	// browser began: no flow, an expired one, or a state that differs.
	ErrBadState = errors.New("sign-in state does not match")
	// ErrProviderRefused means the provider sent the browser back with an
	// error instead of a code (the person cancelled, or was refused there).
	ErrProviderRefused = errors.New("identity provider refused the sign-in")
	// ErrBadToken means the ID token failed verification: signature,
	// issuer, audience, expiry or nonce.
	ErrBadToken = errors.New("ID token rejected")
	// ErrNotPermitted means the person's claims give them no role here.
	ErrNotPermitted = errors.New("not permitted to sign in with SSO")
	// ErrEmailUnverified means the provider vouches for no email address,
	// which an account needs.
	ErrEmailUnverified = errors.New("identity provider gave no verified email")
)

// Config is how the portal is registered with the provider.
type Config struct {
	// Issuer is the provider's issuer URL, as its discovery document
	// states it.
	Issuer string
	// ClientID and ClientSecret are the portal's client credentials.
	ClientID, ClientSecret string
	// RedirectURL is the portal's callback, ending in CallbackPath.
	RedirectURL string
	// Scopes are asked for besides "openid"; nil means email and profile.
	Scopes []string
}

// Client runs the sign-in flow against one provider. Discovery happens at
// the first sign-in (and again after a failure), so a provider that is down
// when the portal starts delays nobody else. Safe for concurrent use.
type Client struct {
	cfg  Config
	http *http.Client

	mu       sync.Mutex
	provider *oidc.Provider
	// failed and failure are the last failed discovery: for
	// discoveryRetry after it, sign-ins get its error at once rather
	// than queueing behind another attempt at a provider that is down.
	failed  time.Time
	failure error
}

// discoveryRetry is how long a failed discovery is answered from memory.
const discoveryRetry = 5 * time.Second

// New returns a Client for cfg whose requests to the provider go through
// hc.
func New(cfg Config, hc *http.Client) *Client {
	if cfg.Scopes == nil {
		cfg.Scopes = []string{"email", "profile"}
	}
	return &Client{cfg: cfg, http: hc}
}

// Issuer is the configured issuer URL.
func (c *Client) Issuer() string { return c.cfg.Issuer }

func (c *Client) ctx(ctx context.Context) context.Context {
	return context.WithValue(oidc.ClientContext(ctx, c.http), oauth2.HTTPClient, c.http)
}

// discover returns the provider's metadata, fetching it once it is needed.
func (c *Client) discover(ctx context.Context) (*oidc.Provider, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.provider != nil {
		return c.provider, nil
	}
	if c.failure != nil && time.Since(c.failed) < discoveryRetry {
		return nil, c.failure
	}
	p, err := oidc.NewProvider(c.ctx(ctx), c.cfg.Issuer)
	if err != nil {
		err = fmt.Errorf("discover %s: %w: %w", c.cfg.Issuer, ErrUnavailable, err)
		if ctx.Err() == nil { // a sign-in abandoned midway says nothing of the provider
			c.failed, c.failure = time.Now(), err
		}
		return nil, err
	}
	c.provider = p
	return p, nil
}

func (c *Client) oauth2(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{
		ClientID:     c.cfg.ClientID,
		ClientSecret: c.cfg.ClientSecret,
		Endpoint:     p.Endpoint(),
		RedirectURL:  c.cfg.RedirectURL,
		Scopes:       append([]string{oidc.ScopeOpenID}, c.cfg.Scopes...),
	}
}

// Flow is what a browser carries between Begin and Complete (the portal
// seals it in a cookie): the values the callback must match, and where to
// go afterwards. None of it may be shown or logged.
type Flow struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	// Next is the local path to go to after signing in.
	Next string `json:"x,omitempty"`
	// Until is when the flow expires (unix seconds).
	Until int64 `json:"u"`
}

// Begin starts a sign-in: it returns the provider's authorization URL to
// send the browser to, and the Flow the browser must bring back.
func (c *Client) Begin(ctx context.Context, next string, now time.Time) (string, Flow, error) {
	p, err := c.discover(ctx)
	if err != nil {
		return "", Flow{}, err
	}
	f := Flow{
		State:    randomToken(),
		Nonce:    randomToken(),
		Verifier: oauth2.GenerateVerifier(),
		Next:     next,
		Until:    now.Add(FlowMaxAge).Unix(),
	}
	u := c.oauth2(p).AuthCodeURL(f.State, oauth2.S256ChallengeOption(f.Verifier), oidc.Nonce(f.Nonce))
	return u, f, nil
}

// Callback is the provider's answer as the browser brought it back.
type Callback struct {
	State, Code string
	// Error is the provider's error code (e.g. access_denied), if any.
	Error string
}

// CallbackFrom reads the callback's query.
func CallbackFrom(q url.Values) Callback {
	return Callback{State: q.Get("state"), Code: q.Get("code"), Error: q.Get("error")}
}

// Identity is who the provider says signed in, from a verified ID token.
type Identity struct {
	// Issuer and Subject identify the person at the provider for good;
	// the email may change.
	Issuer, Subject string
	Email           string
	EmailVerified   bool
	Name            string
	// Groups are the values of the groups claim (Policy.GroupsClaim).
	Groups []string
	// IDToken is the verified ID token as the provider signed it, kept
	// with the session to name it to the provider at sign-out (LogoutURL).
	// It is never shown or logged.
	IDToken string `json:"-"`
}

// Complete checks the callback against the flow this browser carried,
// exchanges the code (with the PKCE verifier) and verifies the ID token:
// signature, issuer, audience, expiry and nonce. groupsClaim names the
// claim holding group names ("" for DefaultGroupsClaim).
func (c *Client) Complete(ctx context.Context, f Flow, cb Callback, groupsClaim string, now time.Time) (Identity, error) {
	// The state is compared before anything else, so a forged callback
	// learns nothing, not even whether the provider is up.
	if f.State == "" || now.Unix() > f.Until || subtle.ConstantTimeCompare([]byte(f.State), []byte(cb.State)) != 1 {
		return Identity{}, ErrBadState
	}
	if cb.Error != "" {
		return Identity{}, fmt.Errorf("%w: %s", ErrProviderRefused, errorCode(cb.Error))
	}
	if cb.Code == "" {
		return Identity{}, fmt.Errorf("%w: no code", ErrProviderRefused)
	}
	p, err := c.discover(ctx)
	if err != nil {
		return Identity{}, err
	}
	ctx = c.ctx(ctx)
	tok, err := c.oauth2(p).Exchange(ctx, cb.Code, oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return Identity{}, fmt.Errorf("token exchange: %w: %s", ErrUnavailable, exchangeError(err))
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Identity{}, fmt.Errorf("%w: the token response has no id_token", ErrBadToken)
	}
	// Verifier shares the provider's one key set, fetched through c.http
	// (the client discovery ran with) and refreshed when a token names a
	// key it lacks.
	idt, err := p.Verifier(&oidc.Config{ClientID: c.cfg.ClientID, Now: func() time.Time { return now }}).Verify(ctx, raw)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrBadToken, err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(f.Nonce)) != 1 {
		return Identity{}, fmt.Errorf("%w: nonce does not match", ErrBadToken)
	}
	id, err := identityFrom(idt, groupsClaim)
	id.IDToken = raw
	return id, err
}

// SignedOutPath is where the provider sends the browser back after a
// sign-out it ended (LogoutURL): the sign-in page, on the callback's
// origin. The provider must list it among the client's post-logout
// redirect URIs.
const SignedOutPath = "/signin"

// LogoutURL returns where to send a browser signing out, so that the
// provider ends its own session too (OpenID Connect RP-Initiated Logout):
// the provider's end_session_endpoint with the session's ID token as a
// hint, the client id, and the sign-in page to come back to. It is "" when
// the provider publishes no end_session_endpoint; an error when the
// provider cannot be reached (discovery) or publishes a URL that is not
// http(s).
func (c *Client) LogoutURL(ctx context.Context, idTokenHint string) (string, error) {
	p, err := c.discover(ctx)
	if err != nil {
		return "", err
	}
	var meta struct {
		EndSession string `json:"end_session_endpoint"`
	}
	if err := p.Claims(&meta); err != nil || meta.EndSession == "" {
		return "", nil
	}
	u, err := url.Parse(meta.EndSession)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("%w: end_session_endpoint is not an http(s) URL", ErrUnavailable)
	}
	back, err := url.Parse(c.cfg.RedirectURL)
	if err != nil {
		return "", fmt.Errorf("redirect URL: %w", err)
	}
	back = &url.URL{Scheme: back.Scheme, Host: back.Host, Path: SignedOutPath}
	q := u.Query()
	if idTokenHint != "" {
		q.Set("id_token_hint", idTokenHint)
	}
	q.Set("client_id", c.cfg.ClientID)
	q.Set("post_logout_redirect_uri", back.String())
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// identityFrom reads the claims Sluice uses.
func identityFrom(idt *oidc.IDToken, groupsClaim string) (Identity, error) {
	var std struct {
		Email         string `json:"email"`
		EmailVerified any    `json:"email_verified"`
		Name          string `json:"name"`
	}
	var all map[string]any
	if err := idt.Claims(&std); err != nil {
		return Identity{}, fmt.Errorf("%w: claims: %w", ErrBadToken, err)
	}
	if err := idt.Claims(&all); err != nil {
		return Identity{}, fmt.Errorf("%w: claims: %w", ErrBadToken, err)
	}
	if groupsClaim == "" {
		groupsClaim = DefaultGroupsClaim
	}
	return Identity{
		Issuer: idt.Issuer, Subject: idt.Subject,
		Email: strings.TrimSpace(std.Email), EmailVerified: truthy(std.EmailVerified), Name: std.Name,
		Groups: stringsOf(all[groupsClaim]),
	}, nil
}

// truthy reads email_verified, which some providers send as a string.
func truthy(v any) bool {
	switch b := v.(type) {
	case bool:
		return b
	case string:
		return strings.EqualFold(b, "true")
	}
	return false
}

// stringsOf reads a claim that is a list of strings or one string.
func stringsOf(v any) []string {
	switch g := v.(type) {
	case string:
		return []string{g}
	case []any:
		var out []string
		for _, e := range g {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// errorCode keeps a provider's error code printable and short: it comes
// from the query string, which anyone can write.
func errorCode(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '?'
	}, s)
}

// exchangeError says why a token exchange failed without the response
// body, which a provider may fill with anything.
func exchangeError(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		if re.ErrorCode != "" {
			return "provider answered " + errorCode(re.ErrorCode)
		}
		if re.Response != nil {
			return "provider answered " + re.Response.Status
		}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		// The URL is the token endpoint's; the code travels in the body.
		return ue.Op + " " + ue.URL + ": " + ue.Err.Error()
	}
	return "exchange failed"
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// Policy decides who may sign in with SSO, and as what.
type Policy struct {
	// OperatorGroups: a person in any of these groups is an operator.
	OperatorGroups []string
	// OperatorDomains: a person whose verified email is at one of these
	// domains (compared case-insensitively) is an operator.
	OperatorDomains []string
	// Developers lets everyone else sign in as a developer; without it
	// they are refused.
	Developers bool
	// GroupsClaim names the ID token claim with the groups; "" means
	// DefaultGroupsClaim.
	GroupsClaim string
}

// Role returns the role id's claims earn: RoleOperator, RoleDeveloper, or
// ErrNotPermitted.
func (p Policy) Role(id Identity) (string, error) {
	for _, g := range id.Groups {
		if slices.Contains(p.OperatorGroups, g) {
			return "operator", nil
		}
	}
	if id.EmailVerified {
		if _, domain, ok := strings.Cut(id.Email, "@"); ok {
			for _, d := range p.OperatorDomains {
				if strings.EqualFold(d, domain) {
					return "operator", nil
				}
			}
		}
	}
	if p.Developers {
		return "developer", nil
	}
	return "", ErrNotPermitted
}
