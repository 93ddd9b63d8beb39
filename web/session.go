package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/gorilla/sessions"

	"github.com/sluicehq/sluice/internal/users"
)

const (
	sessionCookie = "sluice_session"
	// sessionMaxAge bounds how long a copied cookie stays usable: the cookie
	// store has no server-side record to delete, so sign-out ends the
	// session in the browser and the age ends it everywhere.
	sessionMaxAge = 12 * time.Hour

	keyUserID   = "uid"
	keySID      = "sid"
	keyIssuedAt = "iat"
)

// newSessionStore derives separate signing and encryption keys from the one
// secret, so a leaked signature key alone does not reveal cookie contents.
func newSessionStore(secret []byte) *sessions.CookieStore {
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	store := sessions.NewCookieStore(derive("sluice session signing"), derive("sluice session encryption"))
	store.Options = &sessions.Options{
		Path:     "/",
		MaxAge:   int(sessionMaxAge / time.Second),
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
	}
	store.MaxAge(int(sessionMaxAge / time.Second))
	return store
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

// session returns the request's session; a cookie that fails to decode (an
// old secret, tampering) yields a fresh empty session.
func (s *Server) session(r *http.Request) *sessions.Session {
	sess, err := s.sessions.Get(r, sessionCookie)
	if err != nil {
		sess, _ = s.sessions.New(r, sessionCookie)
		sess.IsNew = true
	}
	return sess
}

// startSession replaces whatever session the browser had with a new one for
// the user: a new session id, so a session fixed before sign-in is worthless.
func (s *Server) startSession(w http.ResponseWriter, r *http.Request, u users.User) error {
	sid := make([]byte, 18)
	if _, err := rand.Read(sid); err != nil {
		return fmt.Errorf("session id: %w", err)
	}
	sess, _ := s.sessions.New(r, sessionCookie)
	sess.Values = map[any]any{
		keyUserID:   u.ID,
		keySID:      base64.RawURLEncoding.EncodeToString(sid),
		keyIssuedAt: s.now().Unix(),
	}
	sess.Options = s.cookieOptions(r, int(sessionMaxAge/time.Second))
	if err := sess.Save(r, w); err != nil {
		return fmt.Errorf("save session: %w", err)
	}
	return nil
}

// endSession deletes the session cookie.
func (s *Server) endSession(w http.ResponseWriter, r *http.Request) {
	sess, _ := s.sessions.New(r, sessionCookie)
	sess.Options = s.cookieOptions(r, -1)
	if err := sess.Save(r, w); err != nil {
		s.log.Error("end session", "err", err)
	}
}

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
}

// withViewer loads the signed-in user once per request, so handlers and the
// layout agree on who is looking.
func (s *Server) withViewer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := s.loadViewer(r)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), viewerKey, st)))
	})
}

func (s *Server) loadViewer(r *http.Request) viewerState {
	sess := s.session(r)
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
	return viewerState{user: u, ok: true}
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

// actor names the signed-in user in the audit log.
func (s *Server) actor(r *http.Request) string {
	u, _ := s.currentUser(r)
	return fmt.Sprintf("user:%d", u.ID)
}

// requireRole lets only signed-in users with the role through. Anonymous
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
		case st.user.Role != role:
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
