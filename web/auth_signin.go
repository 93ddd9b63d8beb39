package web

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

func (s *Server) signInForm(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.currentUser(r); ok {
		http.Redirect(w, r, localPath(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	f := views.SignInForm{Next: localPath(r.URL.Query().Get("next")), SSO: s.deps.SSO != nil, SignedUp: r.URL.Query().Get("signed_up") == "1"}
	s.render(w, r, http.StatusOK, views.SignIn(s.page(r, "Sign in", "signin"), f))
}

// signIn checks that the attempt need not wait (see package signin), then
// the password. A success gives back what the attempt counted, starts a new
// session and renews the browser's device cookie, so that guesses from
// elsewhere never slow this browser's next sign-in down.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	f := views.SignInForm{
		Email: strings.TrimSpace(r.PostFormValue("email")),
		Next:  localPath(r.PostFormValue("next")),
		SSO:   s.deps.SSO != nil,
	}
	password := r.PostFormValue("password")
	page := s.page(r, "Sign in", "signin")
	// The attempt is counted as a failure before the password is checked,
	// so parallel guesses cannot slip past the count; a success gives it
	// back.
	pass, wait, err := s.throttle.Attempt(r.Context(), f.Email, s.signInClient(r, f.Email))
	if err != nil {
		s.error(w, r, err)
		return
	}
	if wait > 0 {
		f.Limited = fmt.Sprintf("Too many failed sign-ins. Try again in %s.", humanWait(wait))
		w.Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(wait.Seconds()))))
		s.render(w, r, http.StatusTooManyRequests, views.SignIn(page, f))
		return
	}

	u, err := s.deps.Users.Authenticate(r.Context(), f.Email, password)
	switch {
	case errors.Is(err, users.ErrBadCredentials):
		f.Error = "Wrong email or password."
		s.render(w, r, http.StatusUnauthorized, views.SignIn(page, f))
		return
	case errors.Is(err, users.ErrDisabled):
		// The password was right: the attempt is no guess, so it is given
		// back, and the person learns why and whom to ask.
		if err := s.throttle.Succeeded(r.Context(), pass); err != nil {
			s.error(w, r, err)
			return
		}
		f.Error = "This account is disabled: an operator paused it and its API keys. Ask the operator who runs this portal to enable it again."
		s.render(w, r, http.StatusForbidden, views.SignIn(page, f))
		return
	case err != nil:
		s.error(w, r, err)
		return
	}
	if err := s.throttle.Succeeded(r.Context(), pass); err != nil {
		s.error(w, r, err)
		return
	}
	if err := s.startSession(w, r, u); err != nil {
		s.error(w, r, err)
		return
	}
	s.rememberDevice(w, r, f.Email)
	s.log.Info("signed in", "user_id", u.ID, "role", u.Role)
	next := f.Next
	if next == "/" {
		next = "/app"
		if u.Role == users.RoleOperator {
			next = "/admin"
		}
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// signOut ends the session; one begun with SSO is then sent to the
// provider to end its session there too (ssoSignOutURL).
func (s *Server) signOut(w http.ResponseWriter, r *http.Request) {
	u, signedIn := s.currentUser(r)
	if signedIn {
		s.log.Info("signed out", "user_id", u.ID)
	}
	idToken := ""
	if sess, err := s.session(r); err == nil && signedIn {
		idToken, _ = sess.Values[keySSOIDToken].(string)
	}
	if err := s.endSession(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	next := "/signin"
	if idToken != "" {
		if target := s.ssoSignOutURL(r, idToken); target != "" {
			next = target
		}
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// localPath keeps a post-sign-in redirect on this site. Browsers are lenient
// with a Location: they drop tabs and newlines anywhere, read a backslash as
// a slash and an "https:host" as another site, so a check on the raw string's
// first characters lets "/\t/evil.example" through. The target is parsed
// instead, and only a path on this site (with its query) survives, rebuilt
// from the parse; anything a browser could read as another host is "/".
func localPath(p string) string {
	if p == "" || p[0] != '/' || !utf8.ValidString(p) {
		return "/"
	}
	for _, c := range p {
		// Control characters (tab, CR, LF, NUL...) and backslashes have no
		// business in a path of ours, and browsers rewrite them.
		if c < 0x20 || c == 0x7f || c == '\\' {
			return "/"
		}
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	// "/%2F/evil.example" decodes to "//evil.example" (and "/%5C" to "/\\"): a proxy or a later
	// redirect that decodes the path would leave the site.
	if !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") || strings.HasPrefix(u.Path, "/\\") {
		return "/"
	}
	out := url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}
	return out.String()
}

// clientAddr is the address sign-in failures are counted under.
func (s *Server) clientAddr(r *http.Request) netip.Addr {
	return httplimit.ClientIP(r, s.deps.TrustedProxies)
}

// humanWait says a wait the way people read it.
func humanWait(d time.Duration) string {
	secs := int(math.Ceil(d.Seconds()))
	switch {
	case secs <= 1:
		return "1 second"
	case secs < 120:
		return fmt.Sprintf("%d seconds", secs)
	default:
		return fmt.Sprintf("%d minutes", (secs+59)/60)
	}
}

// parseForm parses a bounded form body.
func parseForm(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("parse form: %w", err)
		}
		return fmt.Errorf("parse form: %w: %w", errBadRequest, err)
	}
	return checkText(r.PostForm)
}

// checkText refuses values Postgres could not store or compare (a NUL
// byte, invalid UTF-8), naming the first such field, so they are answered
// 400 before any query rather than failing inside one as a 500.
func checkText(values url.Values) error {
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if msg := textProblem(name); msg != "" {
			return &badTextError{field: "a field name", message: msg}
		}
		for _, v := range values[name] {
			if msg := textProblem(v); msg != "" {
				return &badTextError{field: name, message: msg}
			}
		}
	}
	return nil
}

// badTextError is a field whose text was refused by checkText.
type badTextError struct{ field, message string }

func (e *badTextError) Error() string { return e.field + ": " + e.message }
