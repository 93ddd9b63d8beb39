package web

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/seal"
	"github.com/sluicehq/sluice/internal/sso"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// A sign-in with SSO begins at GET /signin/sso, which sends the browser to
// the provider, and ends at GET /signin/sso/callback. What the callback must
// match (state, nonce, PKCE verifier) travels in a cookie sealed under the
// session secret, scoped to /signin/sso, for sso.FlowMaxAge: any instance
// can finish the sign-in, and a callback from a sign-in another browser
// began finds no matching cookie.
const ssoFlowCookie = "sluice_sso_flow"

// ssoFlowBinding is the additional data flow cookies are sealed with.
var ssoFlowBinding = []byte("sso flow")

func newSSOSealer(sessionSecret []byte) seal.Box {
	return seal.New(sessionSecret, "sluice sso flow")
}

// ssoStart begins a sign-in with the provider.
func (s *Server) ssoStart(w http.ResponseWriter, r *http.Request) {
	authURL, flow, err := s.deps.SSO.Begin(r.Context(), localPath(r.URL.Query().Get("next")), s.now())
	if err != nil {
		s.ssoFailed(w, r, err)
		return
	}
	plain, err := json.Marshal(flow)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.setFlowCookie(w, r, base64.RawURLEncoding.EncodeToString(s.ssoSealer.Seal(plain, ssoFlowBinding)), int(sso.FlowMaxAge/time.Second))
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

func (s *Server) setFlowCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: ssoFlowCookie, Value: value, Path: "/signin/sso", MaxAge: maxAge,
		HttpOnly: true, Secure: s.secureRequest(r),
		// Lax: the provider sends the browser back with a top-level GET
		// from its own site, which Lax cookies go along with.
		SameSite: http.SameSiteLaxMode,
	})
}

// flowFrom opens the browser's flow cookie; a missing or forged one is the
// zero Flow, which matches no callback.
func (s *Server) flowFrom(r *http.Request) sso.Flow {
	c, err := r.Cookie(ssoFlowCookie)
	if err != nil {
		return sso.Flow{}
	}
	sealed, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return sso.Flow{}
	}
	plain, err := s.ssoSealer.Open(sealed, ssoFlowBinding)
	if err != nil {
		return sso.Flow{}
	}
	var f sso.Flow
	if json.Unmarshal(plain, &f) != nil {
		return sso.Flow{}
	}
	return f
}

// ssoCallback finishes a sign-in: it checks the provider's answer against
// the browser's flow, decides the role from the claims, finds or makes the
// account and starts a session.
func (s *Server) ssoCallback(w http.ResponseWriter, r *http.Request) {
	flow := s.flowFrom(r)
	// A flow is used once, whatever happens next.
	s.setFlowCookie(w, r, "", -1)
	w.Header().Set("Cache-Control", "no-store")
	policy := s.deps.SSOPolicy
	id, err := s.deps.SSO.Complete(r.Context(), flow, sso.CallbackFrom(r.URL.Query()), policy.GroupsClaim, s.now())
	if err != nil {
		s.ssoFailed(w, r, err)
		return
	}
	role, err := policy.Role(id)
	if err != nil {
		s.log.Info("sso sign-in refused: no role", "sub", id.Subject)
		s.ssoFailed(w, r, err)
		return
	}
	var planID *int64
	if role == users.RoleDeveloper {
		def, err := s.defaultPlan(r)
		switch {
		case err == nil:
			planID = &def.ID
		case !errors.Is(err, plans.ErrNotFound):
			s.error(w, r, err)
			return
		}
	}
	res, err := s.ssoAccounts.SignIn(r.Context(), id, role, planID)
	if err != nil {
		s.log.Info("sso sign-in refused", "sub", id.Subject, "role", role, "reason", ssoReason(err))
		s.ssoFailed(w, r, err)
		return
	}
	u := res.User
	if err := s.startSessionWith(w, r, u, id.IDToken); err != nil {
		s.error(w, r, err)
		return
	}
	s.log.Info("signed in", "user_id", u.ID, "role", u.Role, "method", "sso", "created", res.Created, "linked", res.Linked)
	next := flow.Next
	if next == "" || next == "/" {
		next = "/app"
		if u.Role == users.RoleOperator {
			next = "/admin"
		}
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// ssoReason names a refusal in the log, without the error's text (which
// may hold an email address).
func ssoReason(err error) string {
	for _, e := range []error{users.ErrDisabled, sso.ErrEmailUnverified, sso.ErrDeveloperAccount, sso.ErrNoLongerOperator, sso.ErrNoPlan} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "other"
}

// ssoProblems are the pages a sign-in with SSO ends on when it signs no
// one in.
var ssoProblems = []struct {
	err    error
	status int
	views.SSOProblem
}{
	{sso.ErrBadState, http.StatusBadRequest, views.SSOProblem{Title: "Sign-in expired",
		Message: "This answer from the identity provider does not belong to a sign-in started in this browser, or it took longer than 10 minutes. Start again."}},
	{sso.ErrProviderRefused, http.StatusUnauthorized, views.SSOProblem{Title: "Not signed in",
		Message: "The identity provider did not sign you in (it was cancelled or refused there)."}},
	{sso.ErrBadToken, http.StatusBadGateway, views.SSOProblem{Title: "Sign-in failed",
		Message: "The identity provider's answer could not be verified. Try again; if it keeps failing, tell the operator who runs this portal."}},
	{sso.ErrUnavailable, http.StatusBadGateway, views.SSOProblem{Title: "Identity provider unavailable",
		Message: "The identity provider could not be reached. Try again in a moment, or sign in with a password."}},
	{sso.ErrNotPermitted, http.StatusForbidden, views.SSOProblem{Title: "No access",
		Message: "Your identity provider account is not in a group (or email domain) that may run this portal, and developers do not sign in with SSO here. Ask the operator who runs this portal."}},
	{users.ErrDisabled, http.StatusForbidden, views.SSOProblem{Title: "Account disabled",
		Message: "This account is disabled: an operator paused it and its API keys. Ask the operator who runs this portal to enable it again."}},
	{sso.ErrEmailUnverified, http.StatusForbidden, views.SSOProblem{Title: "No verified email",
		Message: "The identity provider did not vouch for an email address, which an account here needs. Verify your email there, or ask the operator."}},
	{sso.ErrDeveloperAccount, http.StatusForbidden, views.SSOProblem{Title: "Developer account",
		Message: "Your email belongs to a developer account here; SSO does not turn it into an operator account. Ask an operator to make you an operator, or sign in as the developer with your password."}},
	{sso.ErrNoLongerOperator, http.StatusForbidden, views.SSOProblem{Title: "No operator access",
		Message: "This is an operator account, but the identity provider no longer places you in an operator group (or email domain). Ask whoever manages your identity provider."}},
	{sso.ErrNoPlan, http.StatusServiceUnavailable, views.SSOProblem{Title: "Sign-up closed",
		Message: "No plan is marked for new developers, so no account can be made. Ask the operator."}},
}

// ssoFailed shows why a sign-in with SSO signed no one in; anything else is
// an internal error.
func (s *Server) ssoFailed(w http.ResponseWriter, r *http.Request, err error) {
	for _, p := range ssoProblems {
		if errors.Is(err, p.err) {
			switch {
			case p.status == http.StatusBadGateway:
				// The provider's side: the operator wants to know.
				s.log.Warn("sso sign-in failed", "err", err)
			case errors.Is(err, sso.ErrBadState), errors.Is(err, sso.ErrProviderRefused):
				// The error's text holds no state, code or token.
				s.log.Info("sso sign-in refused", "reason", err.Error())
			}
			s.render(w, r, p.status, views.SSORefused(s.page(r, p.Title, "signin"), p.SSOProblem))
			return
		}
	}
	s.error(w, r, err)
}
