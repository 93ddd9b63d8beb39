// Package ssotest runs a real OpenID Connect provider inside a test:
// zitadel's op package (discovery, authorization with PKCE, the token
// endpoint, signed ID tokens, keys) over an in-memory storage of this
// package's own. Its login page signs in whichever person the test chose
// with SignInAs, so a test drives a whole sign-in with a cookie jar.
//
// Its end_session_endpoint ends a session (recorded, see Ended) and sends
// the browser back to the sign-in page of a redirect URI's origin.
//
// Only tests import it; the portal never links it.
package ssotest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// ClientID and ClientSecret are the one client the provider knows.
const (
	ClientID     = "sluice-portal"
	ClientSecret = "ssotest-client-secret-0123456789"
)

// Person is someone the provider can sign in.
type Person struct {
	Subject       string
	Email         string
	EmailVerified bool
	Name          string
	Groups        []string
}

// Provider is a running OpenID Connect provider.
type Provider struct {
	// URL is the issuer.
	URL string

	srv *httptest.Server
	op  *op.Provider
	st  *storage
}

// Start runs a provider on a loopback port until the test ends. Browsers
// may be sent back only to redirectURIs.
func Start(t testing.TB, redirectURIs ...string) *Provider {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("ssotest: key: %v", err)
	}
	st := &storage{
		key:      key,
		keyID:    randomID(),
		redirect: redirectURIs,
		requests: map[string]*authRequest{},
		codes:    map[string]string{},
		people:   map[string]Person{},
	}
	p := &Provider{st: st}
	p.srv = httptest.NewUnstartedServer(nil)
	p.URL = "http://" + p.srv.Listener.Addr().String()
	var cryptoKey [32]byte
	_, _ = rand.Read(cryptoKey[:])
	p.op, err = op.NewProvider(&op.Config{CryptoKey: cryptoKey, CodeMethodS256: true},
		st, op.StaticIssuer(p.URL), op.WithAllowInsecure())
	if err != nil {
		t.Fatalf("ssotest: provider: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", p.login)
	mux.Handle("/", p.op)
	p.srv.Config.Handler = mux
	p.srv.Start()
	t.Cleanup(p.srv.Close)
	return p
}

// SignInAs makes the login page sign in person from now on; until a
// person is chosen, it refuses (see Refuse).
func (p *Provider) SignInAs(person Person) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	p.st.person = &person
}

// Refuse makes the login page send the browser back with access_denied,
// as a provider does for a person who cancels, until SignInAs.
func (p *Provider) Refuse() {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	p.st.person = nil
}

// AllowRedirect registers another redirect URI of the client.
func (p *Provider) AllowRedirect(uri string) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	p.st.redirect = append(p.st.redirect, uri)
}

// EndedSession is a sign-out the provider's end_session_endpoint ran:
// whose (the ID token hint's subject, "" without a hint) and for which
// client.
type EndedSession struct {
	Subject, ClientID string
}

// Ended are the sessions ended at the end_session_endpoint so far.
func (p *Provider) Ended() []EndedSession {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	return slices.Clone(p.st.ended)
}

// Secrets are the codes and access token ids the provider issued so far,
// for tests that check they appear in no log.
func (p *Provider) Secrets() []string {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	return slices.Clone(p.st.issued)
}

// login plays the provider's login page: the chosen person signs in at
// once, and the browser goes on to the authorization callback.
func (p *Provider) login(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("authRequestID")
	p.st.mu.Lock()
	req, ok := p.st.requests[id]
	person := p.st.person
	if ok && person != nil {
		req.person = *person
		p.st.people[person.Subject] = *person
		req.done = true
		req.authTime = time.Now()
	}
	p.st.mu.Unlock()
	switch {
	case !ok:
		http.Error(w, "no such authorization request", http.StatusBadRequest)
	case person == nil:
		// As a provider answers a person who cancels.
		http.Redirect(w, r, req.RedirectURI+"?"+url.Values{"error": {"access_denied"}, "state": {req.State}}.Encode(), http.StatusFound)
	default:
		http.Redirect(w, r, op.AuthCallbackURL(p.op)(op.ContextWithIssuer(r.Context(), p.URL), id), http.StatusFound)
	}
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// storage is op.Storage in memory: one client, one signing key, the
// authorization requests in flight.
type storage struct {
	key   *ecdsa.PrivateKey
	keyID string

	mu       sync.Mutex
	redirect []string
	person   *Person
	people   map[string]Person // by subject, as signed in last
	requests map[string]*authRequest
	codes    map[string]string // code -> request id
	issued   []string
	ended    []EndedSession
}

var errNotFound = errors.New("ssotest: not found")

// authRequest is one authorization in flight.
type authRequest struct {
	oidc.AuthRequest
	id       string
	person   Person
	done     bool
	authTime time.Time
}

func (a *authRequest) GetID() string                      { return a.id }
func (a *authRequest) GetACR() string                     { return "" }
func (a *authRequest) GetAMR() []string                   { return []string{"pwd"} }
func (a *authRequest) GetAudience() []string              { return []string{a.ClientID} }
func (a *authRequest) GetAuthTime() time.Time             { return a.authTime }
func (a *authRequest) GetClientID() string                { return a.ClientID }
func (a *authRequest) GetNonce() string                   { return a.Nonce }
func (a *authRequest) GetRedirectURI() string             { return a.RedirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType { return a.ResponseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode { return a.ResponseMode }
func (a *authRequest) GetScopes() []string                { return a.Scopes }
func (a *authRequest) GetState() string                   { return a.State }
func (a *authRequest) GetSubject() string                 { return a.person.Subject }
func (a *authRequest) Done() bool                         { return a.done }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge {
	if a.CodeChallenge == "" {
		return nil
	}
	return &oidc.CodeChallenge{Challenge: a.CodeChallenge, Method: a.CodeChallengeMethod}
}

func (s *storage) CreateAuthRequest(_ context.Context, r *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := &authRequest{AuthRequest: *r, id: randomID()}
	s.requests[a.id] = a
	return a, nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.requests[id]; ok {
		return a, nil
	}
	return nil, errNotFound
}

func (s *storage) AuthRequestByCode(_ context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.requests[s.codes[code]]; ok {
		return a, nil
	}
	return nil, errNotFound
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.codes[code] = id
	s.issued = append(s.issued, code)
	return nil
}

// DeleteAuthRequest ends the request and its code: a code is used once.
func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.requests, id)
	for code, rid := range s.codes {
		if rid == id {
			delete(s.codes, code)
		}
	}
	return nil
}

func (s *storage) CreateAccessToken(context.Context, op.TokenRequest) (string, time.Time, error) {
	id := randomID()
	s.mu.Lock()
	s.issued = append(s.issued, id)
	s.mu.Unlock()
	return id, time.Now().Add(5 * time.Minute), nil
}

func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, errors.New("ssotest: no refresh tokens")
}

func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, op.ErrInvalidRefreshToken
}

// TerminateSession records a sign-out at the end_session_endpoint.
func (s *storage) TerminateSession(_ context.Context, subject, clientID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = append(s.ended, EndedSession{Subject: subject, ClientID: clientID})
	return nil
}

func (s *storage) RevokeToken(context.Context, string, string, string) *oidc.Error { return nil }

func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

// signingKey is the provider's one key.
type signingKey struct {
	id  string
	key *ecdsa.PrivateKey
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.ES256 }
func (k signingKey) Key() any                                    { return k.key }
func (k signingKey) ID() string                                  { return k.id }

type publicKey struct{ signingKey }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.ES256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.key.PublicKey }

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	return signingKey{id: s.keyID, key: s.key}, nil
}

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.ES256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{publicKey{signingKey{id: s.keyID, key: s.key}}}, nil
}

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	if id != ClientID {
		return nil, errNotFound
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return client{redirect: slices.Clone(s.redirect), postLogout: postLogoutURIs(s.redirect)}, nil
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	if id != ClientID || secret != ClientSecret {
		return errors.New("ssotest: wrong client credentials")
	}
	return nil
}

// SetUserinfoFromScopes fills the ID token's claims (the client asks for
// them there: IDTokenUserinfoClaimsAssertion), with the groups claim
// always.
func (s *storage) SetUserinfoFromScopes(_ context.Context, ui *oidc.UserInfo, subject, _ string, scopes []string) error {
	s.mu.Lock()
	p := s.people[subject]
	s.mu.Unlock()
	ui.Subject = p.Subject
	if slices.Contains(scopes, oidc.ScopeEmail) {
		ui.Email, ui.EmailVerified = p.Email, oidc.Bool(p.EmailVerified)
	}
	if slices.Contains(scopes, oidc.ScopeProfile) {
		ui.Name = p.Name
	}
	if p.Groups != nil {
		ui.AppendClaims("groups", p.Groups)
	}
	return nil
}

func (s *storage) SetUserinfoFromToken(context.Context, *oidc.UserInfo, string, string, string) error {
	return nil
}

func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return nil
}

func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errNotFound
}

func (s *storage) ValidateJWTProfileScopes(_ context.Context, _ string, scopes []string) ([]string, error) {
	return scopes, nil
}

func (s *storage) Health(context.Context) error { return nil }

// postLogoutURIs are where the end_session_endpoint may send a browser
// back: the sign-in page (sso.SignedOutPath) on each redirect URI's
// origin, as an operator registers the portal.
func postLogoutURIs(redirect []string) []string {
	var out []string
	for _, r := range redirect {
		if u, err := url.Parse(r); err == nil {
			out = append(out, u.Scheme+"://"+u.Host+"/signin")
		}
	}
	return out
}

// client is the portal as the provider knows it: a confidential web
// client using the code flow.
type client struct{ redirect, postLogout []string }

func (c client) GetID() string                       { return ClientID }
func (c client) RedirectURIs() []string              { return c.redirect }
func (c client) PostLogoutRedirectURIs() []string    { return c.postLogout }
func (c client) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c client) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodBasic }
func (c client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c client) GrantTypes() []oidc.GrantType         { return []oidc.GrantType{oidc.GrantTypeCode} }
func (c client) LoginURL(id string) string            { return "/login?authRequestID=" + id }
func (c client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeBearer }
func (c client) IDTokenLifetime() time.Duration       { return 5 * time.Minute }
func (c client) DevMode() bool                        { return true } // http redirect URIs on loopback
func (c client) IsScopeAllowed(string) bool           { return false }
func (c client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c client) ClockSkew() time.Duration             { return 0 }
func (c client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
