package web

import (
	"net/http"
	"net/url"
	"strings"
)

// ssoSignOutURL is the provider's end-session URL for a session begun
// with SSO, or "" to stay here: no SSO, no end_session_endpoint, a provider
// that cannot be reached (the session here has ended anyway) or an
// endpoint on another origin than the issuer's, which the page's
// form-action would not let the browser follow.
func (s *Server) ssoSignOutURL(r *http.Request, idToken string) string {
	if s.deps.SSO == nil {
		return ""
	}
	target, err := s.deps.SSO.LogoutURL(r.Context(), idToken)
	if err != nil {
		s.log.Warn("sso sign-out: the session here ended, the provider's was left", "err", err)
		return ""
	}
	if target == "" {
		return ""
	}
	if origin(target) != origin(s.deps.SSO.Issuer()) {
		s.log.Warn("sso sign-out: the provider's end_session_endpoint is on another origin than its issuer; the session here ended, the provider's was left")
		return ""
	}
	return target
}

// ssoFormAction adds the provider's origin to csp's form-action, so that
// the sign-out form's redirect to the provider's end_session_endpoint is
// one the browser follows (form-action applies to a form's redirects).
func ssoFormAction(csp, issuer string) string {
	o := origin(issuer)
	if o == "" {
		return csp
	}
	return strings.Replace(csp, "form-action 'self'", "form-action 'self' "+o, 1)
}

// origin is scheme://host[:port] of an absolute URL, or "".
func origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return ""
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
}
