package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/gorilla/sessions"

	"github.com/sluicehq/sluice/internal/pgsession"
	"github.com/sluicehq/sluice/internal/users"
)

const (
	// sessionCookie names the session cookie over plain HTTP;
	// secureSessionCookie over HTTPS, where the __Host- prefix makes the
	// browser refuse one set with a Domain, a Path other than /, or from
	// anywhere but a secure page of this very host: no sibling host and no
	// plain-HTTP page on another port (the reverse proxy's listener) can
	// plant one.
	sessionCookie       = "sluice_session"
	secureSessionCookie = "__Host-sluice_session"
	// sessionMaxAge bounds a session from its sign-in, however active; the
	// server ends it earlier at sign-out, "sign out everywhere" and a
	// password change.
	sessionMaxAge = 12 * time.Hour

	keyUserID   = "uid"
	keyRole     = "role"
	keyIssuedAt = "iat"
	// keySSOIDToken is the ID token of a session begun with SSO, the hint
	// its sign-out gives the provider (signOut).
	keySSOIDToken = "sso_idt"
)

// newSessionStore keeps sessions in Postgres (package pgsession), so that
// ending one ends it for every copy of its cookie.
func newSessionStore(deps Deps, now func() time.Time) *pgsession.Store {
	return pgsession.New(deps.Pool, deps.SessionSecret, pgsession.Options{
		Cookie: sessions.Options{
			Path:     "/",
			MaxAge:   int(sessionMaxAge / time.Second),
			HttpOnly: true,
			SameSite: http.SameSiteLaxMode,
		},
		UserKey: keyUserID,
		Now:     now,
	})
}

// secureRequest reports whether the browser reached us over TLS, directly or
// through a trusted proxy that says so.
func (s *Server) secureRequest(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if r.Header.Get("X-Forwarded-Proto") != "https" {
		return false
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	for _, p := range s.deps.TrustedProxies {
		if p.Contains(peer.Addr().Unmap()) {
			return true
		}
	}
	return false
}

// sessionCookieName is the session cookie's name for r: over HTTPS only the
// __Host- one is read and written, so a plain cookie of that name, which
// any page of the host name could set, is ignored.
func (s *Server) sessionCookieName(r *http.Request) string {
	if s.secureRequest(r) {
		return secureSessionCookie
	}
	return sessionCookie
}

// session returns the request's session (loaded once per request); a
// cookie naming no live session yields a fresh empty one.
func (s *Server) session(r *http.Request) (*sessions.Session, error) {
	sess, err := s.sessions.Get(r, s.sessionCookieName(r))
	if err != nil {
		return nil, err
	}
	return sess, nil
}

// startSession gives the user a session under a new identifier: whatever
// identifier the browser had is ended first, so a session fixed before
// sign-in is worthless.
func (s *Server) startSession(w http.ResponseWriter, r *http.Request, u users.User) error {
	return s.startSessionWith(w, r, u, "")
}

// startSessionWith is startSession for a sign-in with SSO whose ID token
// (idToken, "" for none) the session keeps for its sign-out.
func (s *Server) startSessionWith(w http.ResponseWriter, r *http.Request, u users.User, idToken string) error {
	sess, err := s.session(r)
	if err != nil {
		return err
	}
	if err := s.sessions.Renew(r.Context(), sess); err != nil {
		return err
	}
	sess.Values = map[any]any{
		keyUserID:   u.ID,
		keyRole:     u.Role,
		keyIssuedAt: s.now().Unix(),
	}
	if idToken != "" {
		sess.Values[keySSOIDToken] = idToken
	}
	sess.Options = s.cookieOptions(r, int(sessionMaxAge/time.Second))
	if err := sess.Save(r, w); err != nil {
		return fmt.Errorf("save session: %w", err)
	}
	return nil
}

// endSession ends the request's session on the server and expires its
// cookie.
func (s *Server) endSession(w http.ResponseWriter, r *http.Request) error {
	sess, err := s.session(r)
	if err != nil {
		return err
	}
	sess.Options = s.cookieOptions(r, -1)
	if err := sess.Save(r, w); err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	return nil
}

// cookieOptions scope the session cookie: HttpOnly (no script reads it, a
// proxied page's least of all), SameSite=Lax (not sent with another site's
// requests but top-level navigations), Path / and no Domain (this host
// only), Secure over HTTPS.
func (s *Server) cookieOptions(r *http.Request, maxAge int) *sessions.Options {
	return &sessions.Options{
		Path:     "/",
		MaxAge:   maxAge,
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
		Secure:   s.secureRequest(r),
	}
}

type ctxKey int

const viewerKey ctxKey = iota

// viewerState is what withViewer found: the user, or why there is none.
type viewerState struct {
	user users.User
	ok   bool
	err  error
	// roleChanged: the session began under another role.
	roleChanged bool
}

// withViewer loads the signed-in user once per request, so handlers and the
// layout agree on who is looking. When the user's role changed since the
// session began, the session moves to a new identifier first.
func (s *Server) withViewer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := s.loadViewer(r)
		if st.ok && st.roleChanged {
			if err := s.renewSession(w, r, st.user); err != nil {
				st = viewerState{err: err}
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), viewerKey, st)))
	})
}

// renewSession moves the session to a new identifier with the user's
// current role, keeping its sign-in time.
func (s *Server) renewSession(w http.ResponseWriter, r *http.Request, u users.User) error {
	sess, err := s.session(r)
	if err != nil {
		return err
	}
	if err := s.sessions.Renew(r.Context(), sess); err != nil {
		return err
	}
	sess.Values[keyRole] = u.Role
	sess.Options = s.cookieOptions(r, int(sessionMaxAge/time.Second))
	if err := sess.Save(r, w); err != nil {
		return fmt.Errorf("renew session: %w", err)
	}
	s.log.Info("session renewed after a role change", "user_id", u.ID, "role", u.Role)
	return nil
}

func (s *Server) loadViewer(r *http.Request) viewerState {
	sess, err := s.session(r)
	if err != nil {
		return viewerState{err: fmt.Errorf("load session: %w", err)}
	}
	id, ok := sess.Values[keyUserID].(int64)
	if !ok || id <= 0 {
		return viewerState{}
	}
	if iat, ok := sess.Values[keyIssuedAt].(int64); !ok || s.now().Sub(time.Unix(iat, 0)) > sessionMaxAge {
		return viewerState{}
	}
	u, err := s.deps.Users.ByID(r.Context(), id)
	switch {
	case errors.Is(err, users.ErrNotFound):
		// The account is gone; the cookie means nothing any more.
		return viewerState{}
	case err != nil:
		return viewerState{err: fmt.Errorf("load signed-in user: %w", err)}
	}
	if u.DisabledAt != nil {
		// Disabled since signing in: the session no longer stands.
		return viewerState{}
	}
	role, _ := sess.Values[keyRole].(string)
	return viewerState{user: u, ok: true, roleChanged: role != u.Role}
}

// currentUser returns the signed-in user, if any. Handlers behind
// requireRole can rely on ok being true.
func (s *Server) currentUser(r *http.Request) (users.User, bool) {
	st, found := r.Context().Value(viewerKey).(viewerState)
	if !found {
		st = s.loadViewer(r)
	}
	return st.user, st.ok
}

// actor names the signed-in person in the audit log (under /app, the
// member acting, not the organisation's account).
func (s *Server) actor(r *http.Request) string {
	u, _ := s.person(r)
	return fmt.Sprintf("user:%d", u.ID)
}

// requireRole lets only signed-in users with the role ("" for any role)
// through. Anonymous
// visitors are sent to sign in (pages) or get 401 (htmx fragments, which
// cannot follow a redirect usefully); users with another role get 403.
func (s *Server) requireRole(role string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, found := r.Context().Value(viewerKey).(viewerState)
		if !found {
			st = s.loadViewer(r)
		}
		switch {
		case st.err != nil:
			s.error(w, r, st.err)
		case !st.ok && isHTMX(r):
			w.Header().Set("HX-Redirect", signInURL(r))
			s.error(w, r, errUnauthenticated)
		case !st.ok && r.Method == http.MethodGet:
			http.Redirect(w, r, signInURL(r), http.StatusSeeOther)
		case !st.ok:
			s.error(w, r, errUnauthenticated)
		case role != "" && st.user.Role != role:
			s.error(w, r, errForbidden)
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// isHTMX reports whether htmx asked for a fragment. A history restore (the
// back button after hx-push-url missed htmx's cache) needs the whole page,
// although htmx marks it as its own request.
func isHTMX(r *http.Request) bool {
	return r.Header.Get("HX-Request") == "true" && r.Header.Get("HX-History-Restore-Request") != "true"
}

func signInURL(r *http.Request) string {
	if r.URL.Path == "" || r.URL.Path == "/" {
		return "/signin"
	}
	return "/signin?next=" + url.QueryEscape(r.URL.Path)
}
