package web

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/signin"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// account shows the signed-in user's own page: password and sessions.
func (s *Server) account(w http.ResponseWriter, r *http.Request) {
	u, _ := s.currentUser(r)
	has, err := s.deps.Users.HasPassword(r.Context(), u.ID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	f := views.AccountForm{Email: u.Email, NoPassword: !has}
	if r.URL.Query().Get("changed") == "password" {
		f.Notice = "Your password was changed. Every other session of this account was signed out."
	}
	s.render(w, r, http.StatusOK, views.Account(s.page(r, "Your account", "account"), f))
}

// changePassword checks the current password, sets the new one, ends every
// other session of the account and moves this one to a new identifier.
func (s *Server) changePassword(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	u, _ := s.currentUser(r)
	f := views.AccountForm{Email: u.Email, Errors: views.FieldErrors{}}
	page := s.page(r, "Your account", "account")
	has, err := s.deps.Users.HasPassword(r.Context(), u.ID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if !has {
		// An account made by SSO: no current password could ever be right,
		// so a guess is not counted against the device either.
		f.NoPassword = true
		f.Errors["form"] = "this account signs in with SSO and has no password to change"
		s.render(w, r, http.StatusConflict, views.Account(page, f))
		return
	}
	// A session left open on a shared computer must not become a way to
	// guess the password: wrong current passwords count as failed sign-ins,
	// of the signed-in device (its own budget, which guesses at the sign-in
	// form from elsewhere do not spend).
	client := signin.Client{Addr: s.clientAddr(r), Device: signedInDevice}
	pass, wait, err := s.throttle.Attempt(r.Context(), u.Email, client)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if wait > 0 {
		f.Errors["current_password"] = "too many wrong passwords; try again in " + humanWait(wait)
		s.render(w, r, http.StatusTooManyRequests, views.Account(page, f))
		return
	}
	_, err = s.deps.Users.ChangePassword(r.Context(), u.ID, r.PostFormValue("current_password"), r.PostFormValue("new_password"))
	var fe users.FieldErrors
	switch {
	case errors.Is(err, users.ErrBadCredentials):
		f.Errors["current_password"] = "is not your current password"
		s.render(w, r, http.StatusUnprocessableEntity, views.Account(page, f))
		return
	case errors.As(err, &fe):
		// The current password was right (it is checked first).
		if err := s.throttle.Succeeded(r.Context(), pass); err != nil {
			s.error(w, r, err)
			return
		}
		for k, v := range fe {
			f.Errors[k] = v
		}
		s.render(w, r, http.StatusUnprocessableEntity, views.Account(page, f))
		return
	case err != nil:
		s.error(w, r, err)
		return
	}
	if err := s.throttle.Succeeded(r.Context(), pass); err != nil {
		s.error(w, r, err)
		return
	}
	if err := s.renewSession(w, r, u); err != nil {
		s.error(w, r, err)
		return
	}
	sess, err := s.session(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	n, err := s.sessions.EndUser(r.Context(), u.ID, sess.ID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.log.Info("password changed", "user_id", u.ID, "sessions_ended", n)
	http.Redirect(w, r, "/account?changed=password", http.StatusSeeOther)
}

// signOutEverywhere ends every session of the account, this one included.
func (s *Server) signOutEverywhere(w http.ResponseWriter, r *http.Request) {
	u, _ := s.currentUser(r)
	n, err := s.sessions.EndUser(r.Context(), u.ID, "")
	if err != nil {
		s.error(w, r, err)
		return
	}
	if err := s.endSession(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	s.log.Info("signed out everywhere", "user_id", u.ID, "sessions_ended", n)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}
