package web

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// Sign-in attempts are limited by Sluice's own engine. Per address the limit
// is generous enough for an office behind one NAT; per account it stops
// password guessing whatever the number of addresses used.
var (
	signInPerIP = enforce.Limit{
		Name: "signin-ip", Algorithm: enforce.SlidingWindowLog,
		Limit: 20, Window: time.Minute, Mode: enforce.ModeReject,
	}
	signInPerAccount = enforce.Limit{
		Name: "signin-account", Algorithm: enforce.SlidingWindowLog,
		Limit: 10, Window: 15 * time.Minute, Mode: enforce.ModeReject,
	}
)

func (s *Server) signInForm(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.currentUser(r); ok {
		http.Redirect(w, r, localPath(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	f := views.SignInForm{Next: localPath(r.URL.Query().Get("next"))}
	s.render(w, r, http.StatusOK, views.SignIn(s.page(r, "Sign in", "signin"), f))
}

// signIn checks the sign-in rate limits, then the password, and on success
// starts a new session.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	f := views.SignInForm{
		Email: strings.TrimSpace(r.PostFormValue("email")),
		Next:  localPath(r.PostFormValue("next")),
	}
	password := r.PostFormValue("password")
	page := s.page(r, "Sign in", "signin")

	wait, err := s.signInAllowed(r, f.Email)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if wait > 0 {
		f.Limited = fmt.Sprintf("Too many sign-in attempts. Try again in %s.", humanWait(wait))
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
	case err != nil:
		s.error(w, r, err)
		return
	}
	if err := s.startSession(w, r, u); err != nil {
		s.error(w, r, err)
		return
	}
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

// signInAllowed spends one attempt from the address's and the account's
// budgets, and says how long to wait when either is spent. When the shared
// store is unreachable the attempt is counted in this instance's memory
// instead: the form stays usable (an operator must be able to sign in to see
// what is down) and guessing stays limited.
func (s *Server) signInAllowed(r *http.Request, email string) (time.Duration, error) {
	ip := enforce.ClientIP(r, s.deps.TrustedProxies)
	// The account's counter is named by a hash, so email addresses do not
	// sit in Redis key names.
	sum := sha256.Sum256([]byte(strings.ToLower(email)))
	checks := []enforce.Request{
		{Subject: "signin:ip:" + ip.String(), Route: "POST /signin", Limits: []enforce.Limit{signInPerIP}},
		{Subject: "signin:acct:" + hex.EncodeToString(sum[:12]), Route: "POST /signin", Limits: []enforce.Limit{signInPerAccount}},
	}
	for _, req := range checks {
		d, err := s.deps.Limiter.Allow(r.Context(), req)
		if err != nil {
			if r.Context().Err() != nil {
				return 0, err
			}
			s.log.Warn("sign-in limit: shared store failed, counting locally", "err", err)
			if d, err = s.localLimiter.Allow(r.Context(), req); err != nil {
				return 0, fmt.Errorf("sign-in limit: %w", err)
			}
		}
		if !d.Allowed {
			return d.Binding().RetryAfter, nil
		}
	}
	return 0, nil
}

func (s *Server) signOut(w http.ResponseWriter, r *http.Request) {
	if u, ok := s.currentUser(r); ok {
		s.log.Info("signed out", "user_id", u.ID)
	}
	s.endSession(w, r)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// localPath keeps a post-sign-in redirect on this site: only absolute paths,
// never "//host" or a scheme.
func localPath(p string) string {
	if p == "" || p[0] != '/' || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") || strings.ContainsAny(p, "\r\n") {
		return "/"
	}
	return p
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
	return nil
}
