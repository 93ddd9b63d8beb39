package sso_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/egress"
	"github.com/sluicehq/sluice/internal/sso"
	"github.com/sluicehq/sluice/internal/sso/ssotest"
)

// redirectURL is where the provider sends the browser back; no server
// listens there: the tests read the callback off the last redirect.
const redirectURL = "http://127.0.0.1:1/signin/sso/callback"

var alice = ssotest.Person{
	Subject: "alice-1", Email: "alice@ops.example", EmailVerified: true, Name: "Alice",
	Groups: []string{"staff", "sluice-operators"},
}

func newClient(t *testing.T, p *ssotest.Provider) *sso.Client {
	t.Helper()
	// As the portal does: every request to the provider through the
	// egress dialer, with the Internal policy (the provider listens on
	// loopback here).
	hc := egress.NewDialer(egress.Options{Rules: egress.Rules{Policy: egress.Internal}}).Client(egress.ClientOptions{MaxRedirects: 3})
	return sso.New(sso.Config{
		Issuer: p.URL, ClientID: ssotest.ClientID, ClientSecret: ssotest.ClientSecret, RedirectURL: redirectURL,
	}, hc)
}

// browse follows the provider's redirects from authURL the way a browser
// would, and returns the query of the redirect back to the portal.
func browse(t *testing.T, authURL string) url.Values {
	t.Helper()
	var back *url.URL
	hc := &http.Client{CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), redirectURL) {
			back = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err := hc.Get(authURL)
	if err != nil {
		t.Fatalf("browse to the provider: %v", err)
	}
	resp.Body.Close()
	if back == nil {
		t.Fatalf("the provider never sent the browser back: status %d", resp.StatusCode)
	}
	return back.Query()
}

func TestSignInFlow(t *testing.T) {
	ctx := context.Background()
	p := ssotest.Start(t, redirectURL)
	c := newClient(t, p)
	now := time.Now()

	// begin starts a flow whose authorization URL asks for what the
	// portal needs.
	begin := func(t *testing.T) (sso.Flow, url.Values) {
		t.Helper()
		authURL, flow, err := c.Begin(ctx, "/admin/plans", now)
		if err != nil {
			t.Fatalf("Begin: %v", err)
		}
		q, _ := url.Parse(authURL)
		for name, want := range map[string]string{
			"client_id": ssotest.ClientID, "redirect_uri": redirectURL, "response_type": "code",
			"state": flow.State, "nonce": flow.Nonce, "code_challenge_method": "S256",
		} {
			if got := q.Query().Get(name); got != want {
				t.Errorf("authorization URL %s = %q, want %q", name, got, want)
			}
		}
		if q.Query().Get("code_challenge") == "" || strings.Contains(authURL, flow.Verifier) {
			t.Errorf("authorization URL carries no challenge, or the verifier itself: %s", authURL)
		}
		if flow.Next != "/admin/plans" || flow.Until != now.Add(sso.FlowMaxAge).Unix() {
			t.Errorf("flow = %+v", flow)
		}
		return flow, browse(t, authURL)
	}

	t.Run("VerifiedIdentity", func(t *testing.T) {
		p.SignInAs(alice)
		flow, back := begin(t)
		id, err := c.Complete(ctx, flow, sso.CallbackFrom(back), "", now)
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		want := sso.Identity{Issuer: p.URL, Subject: "alice-1", Email: "alice@ops.example", EmailVerified: true, Name: "Alice",
			Groups: []string{"staff", "sluice-operators"}}
		if id.Issuer != want.Issuer || id.Subject != want.Subject || id.Email != want.Email ||
			id.EmailVerified != want.EmailVerified || id.Name != want.Name || !slices.Equal(id.Groups, want.Groups) {
			t.Fatalf("identity = %+v, want %+v", id, want)
		}
		// The code is used once.
		if _, err := c.Complete(ctx, flow, sso.CallbackFrom(back), "", now); !errors.Is(err, sso.ErrUnavailable) {
			t.Fatalf("second use of a code: %v, want ErrUnavailable", err)
		}
	})
	t.Run("ErrBadStateTampered", func(t *testing.T) {
		p.SignInAs(alice)
		flow, back := begin(t)
		cb := sso.CallbackFrom(back)
		cb.State += "x"
		if _, err := c.Complete(ctx, flow, cb, "", now); !errors.Is(err, sso.ErrBadState) {
			t.Fatalf("tampered state: %v, want ErrBadState", err)
		}
		// And the untampered callback still works: nothing was spent.
		if _, err := c.Complete(ctx, flow, sso.CallbackFrom(back), "", now); err != nil {
			t.Fatalf("the real callback after a forged one: %v", err)
		}
	})
	t.Run("ErrBadStateNoFlow", func(t *testing.T) {
		p.SignInAs(alice)
		_, back := begin(t)
		if _, err := c.Complete(ctx, sso.Flow{}, sso.CallbackFrom(back), "", now); !errors.Is(err, sso.ErrBadState) {
			t.Fatalf("no flow: %v, want ErrBadState", err)
		}
	})
	t.Run("ErrBadStateExpired", func(t *testing.T) {
		p.SignInAs(alice)
		flow, back := begin(t)
		late := now.Add(sso.FlowMaxAge + time.Second)
		if _, err := c.Complete(ctx, flow, sso.CallbackFrom(back), "", late); !errors.Is(err, sso.ErrBadState) {
			t.Fatalf("expired flow: %v, want ErrBadState", err)
		}
	})
	t.Run("ErrBadTokenNonce", func(t *testing.T) {
		p.SignInAs(alice)
		flow, back := begin(t)
		flow.Nonce = "another browser's nonce"
		if _, err := c.Complete(ctx, flow, sso.CallbackFrom(back), "", now); !errors.Is(err, sso.ErrBadToken) {
			t.Fatalf("wrong nonce: %v, want ErrBadToken", err)
		}
	})
	t.Run("ErrUnavailableWrongVerifier", func(t *testing.T) {
		// A stolen code is useless without this browser's PKCE verifier.
		p.SignInAs(alice)
		flow, back := begin(t)
		flow.Verifier = strings.Repeat("v", 43)
		_, err := c.Complete(ctx, flow, sso.CallbackFrom(back), "", now)
		if !errors.Is(err, sso.ErrUnavailable) || !strings.Contains(err.Error(), "invalid_grant") {
			t.Fatalf("wrong verifier: %v, want ErrUnavailable (invalid_grant)", err)
		}
	})
	t.Run("ErrBadTokenExpired", func(t *testing.T) {
		p.SignInAs(alice)
		flow, back := begin(t)
		flow.Until = now.Add(time.Hour).Unix()
		if _, err := c.Complete(ctx, flow, sso.CallbackFrom(back), "", now.Add(30*time.Minute)); !errors.Is(err, sso.ErrBadToken) {
			t.Fatalf("an ID token read after it expired: %v, want ErrBadToken", err)
		}
	})
	t.Run("ErrProviderRefused", func(t *testing.T) {
		p.Refuse()
		flow, back := begin(t)
		_, err := c.Complete(ctx, flow, sso.CallbackFrom(back), "", now)
		if !errors.Is(err, sso.ErrProviderRefused) || !strings.Contains(err.Error(), "access_denied") {
			t.Fatalf("refused at the provider: %v, want ErrProviderRefused (access_denied)", err)
		}
	})
	t.Run("GroupsClaimNamed", func(t *testing.T) {
		p.SignInAs(alice)
		flow, back := begin(t)
		id, err := c.Complete(ctx, flow, sso.CallbackFrom(back), "roles", now)
		if err != nil || id.Groups != nil {
			t.Fatalf("groups from an absent claim: %v, %v", id.Groups, err)
		}
	})
}

func TestProviderRequestsGoThroughEgress(t *testing.T) {
	p := ssotest.Start(t, redirectURL)
	// The Public policy refuses loopback: discovery must fail at the
	// dialer, proving the client given to New is the one used.
	hc := egress.NewDialer(egress.Options{}).Client(egress.ClientOptions{})
	c := sso.New(sso.Config{Issuer: p.URL, ClientID: ssotest.ClientID, ClientSecret: ssotest.ClientSecret, RedirectURL: redirectURL}, hc)
	_, _, err := c.Begin(context.Background(), "/", time.Now())
	if !errors.Is(err, sso.ErrUnavailable) || !errors.Is(err, egress.ErrRefused) {
		t.Fatalf("Begin through a Public dialer: %v, want ErrUnavailable and egress.ErrRefused", err)
	}
}

func TestPolicyRole(t *testing.T) {
	tests := []struct {
		name   string
		policy sso.Policy
		id     sso.Identity
		role   string
		err    error
	}{
		{"GroupMapsToOperator", sso.Policy{OperatorGroups: []string{"ops"}},
			sso.Identity{Email: "a@x.example", EmailVerified: true, Groups: []string{"dev", "ops"}}, "operator", nil},
		{"GroupsAreCaseSensitive", sso.Policy{OperatorGroups: []string{"ops"}},
			sso.Identity{Email: "a@x.example", EmailVerified: true, Groups: []string{"OPS"}}, "", sso.ErrNotPermitted},
		{"DomainMapsToOperator", sso.Policy{OperatorDomains: []string{"ops.example"}},
			sso.Identity{Email: "a@OPS.example", EmailVerified: true}, "operator", nil},
		{"UnverifiedEmailNoDomain", sso.Policy{OperatorDomains: []string{"ops.example"}},
			sso.Identity{Email: "a@ops.example"}, "", sso.ErrNotPermitted},
		{"SubdomainIsNotTheDomain", sso.Policy{OperatorDomains: []string{"ops.example"}},
			sso.Identity{Email: "a@evil.ops.example", EmailVerified: true}, "", sso.ErrNotPermitted},
		{"OthersDevelopersWhenOn", sso.Policy{OperatorGroups: []string{"ops"}, Developers: true},
			sso.Identity{Email: "a@x.example", EmailVerified: true, Groups: []string{"dev"}}, "developer", nil},
		{"OthersRefusedWhenOff", sso.Policy{OperatorGroups: []string{"ops"}},
			sso.Identity{Email: "a@x.example", EmailVerified: true}, "", sso.ErrNotPermitted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			role, err := tt.policy.Role(tt.id)
			if role != tt.role || !errors.Is(err, tt.err) || (tt.err == nil && err != nil) {
				t.Fatalf("Role = %q, %v; want %q, %v", role, err, tt.role, tt.err)
			}
		})
	}
}

func TestFailedDiscoveryRemembered(t *testing.T) {
	var asked atomic.Int32
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	hc := egress.NewDialer(egress.Options{Rules: egress.Rules{Policy: egress.Internal}}).Client(egress.ClientOptions{})
	c := sso.New(sso.Config{Issuer: down.URL, ClientID: "c", ClientSecret: "s", RedirectURL: redirectURL}, hc)
	for range 3 {
		if _, _, err := c.Begin(context.Background(), "/", time.Now()); !errors.Is(err, sso.ErrUnavailable) {
			t.Fatalf("Begin against a provider that is down: %v, want ErrUnavailable", err)
		}
	}
	// Sign-ins right after a failure do not queue behind new attempts.
	if n := asked.Load(); n != 1 {
		t.Fatalf("the provider was asked %d times, want once", n)
	}
}

// TestLogoutURL: sign-out goes to the provider's end_session_endpoint when
// its discovery document has one, stays here when it has none, and refuses
// one that is not an http(s) URL.
func TestLogoutURL(t *testing.T) {
	ctx := context.Background()
	t.Run("ZitadelPublishesOne", func(t *testing.T) {
		p := ssotest.Start(t, redirectURL)
		got, err := newClient(t, p).LogoutURL(ctx, "the-id-token")
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(got)
		q := u.Query()
		if !strings.HasPrefix(got, p.URL+"/end_session?") || q.Get("id_token_hint") != "the-id-token" ||
			q.Get("client_id") != ssotest.ClientID || q.Get("post_logout_redirect_uri") != "http://127.0.0.1:1/signin" {
			t.Fatalf("logout URL = %q", got)
		}
	})
	// A discovery document served by the test: what matters here is only
	// which end_session_endpoint it names.
	discovery := func(t *testing.T, endSession string) *sso.Client {
		var srv *httptest.Server
		srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			doc := `{"issuer":"` + srv.URL + `","authorization_endpoint":"` + srv.URL + `/auth","token_endpoint":"` + srv.URL + `/token","jwks_uri":"` + srv.URL + `/keys"`
			if endSession != "" {
				doc += `,"end_session_endpoint":"` + strings.ReplaceAll(endSession, "ISSUER", srv.URL) + `"`
			}
			_, _ = w.Write([]byte(doc + "}"))
		}))
		t.Cleanup(srv.Close)
		hc := egress.NewDialer(egress.Options{Rules: egress.Rules{Policy: egress.Internal}}).Client(egress.ClientOptions{})
		return sso.New(sso.Config{Issuer: srv.URL, ClientID: "c", ClientSecret: "s", RedirectURL: redirectURL}, hc)
	}
	t.Run("NoneStaysHere", func(t *testing.T) {
		if got, err := discovery(t, "").LogoutURL(ctx, "tok"); got != "" || err != nil {
			t.Fatalf("LogoutURL = %q, %v; want none", got, err)
		}
	})
	t.Run("NotHTTPRefused", func(t *testing.T) {
		if got, err := discovery(t, "javascript:alert(1)").LogoutURL(ctx, "tok"); got != "" || !errors.Is(err, sso.ErrUnavailable) {
			t.Fatalf("LogoutURL = %q, %v; want ErrUnavailable", got, err)
		}
	})
	t.Run("KeepsItsOwnQuery", func(t *testing.T) {
		got, err := discovery(t, "ISSUER/logout?tenant=a").LogoutURL(ctx, "")
		u, _ := url.Parse(got)
		if err != nil || u.Query().Get("tenant") != "a" || u.Query().Has("id_token_hint") || u.Query().Get("client_id") != "c" {
			t.Fatalf("LogoutURL = %q, %v", got, err)
		}
	})
}
