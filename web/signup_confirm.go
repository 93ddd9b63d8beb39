package web

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/mail"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// signUpByMail keeps a valid sign-up until the emailed link confirms it,
// and answers every valid sign-up alike: a registered address gets an
// email saying so instead of a link, after the same password hashing, and
// the same page. Both send one email before answering, so an SMTP failure
// is said, alike, to both.
func (s *Server) signUpByMail(w http.ResponseWriter, r *http.Request, page views.Page, f views.SignUpForm, password string) {
	token, expires, err := s.deps.Users.StartSignup(r.Context(), users.NewUser{
		Email: f.Email, Password: password, Role: users.RoleDeveloper, PlanID: &f.Chosen,
	}, s.now())
	var fe users.FieldErrors
	var msg mail.Message
	switch {
	case errors.Is(err, users.ErrEmailTaken):
		msg = registeredNotice(f.Email, s.link("/signin"), s.link("/password/forgot"))
	case errors.As(err, &fe):
		for k, v := range fe {
			f.Errors[k] = v
		}
		s.render(w, r, http.StatusUnprocessableEntity, views.SignUp(page, f))
		return
	case err != nil:
		s.error(w, r, err)
		return
	default:
		msg = confirmationMail(f.Email, s.link("/signup/confirm/"+token), expires)
	}
	if err := s.deps.Mailer.Send(r.Context(), msg); err != nil {
		s.log.Warn("sign-up email not sent", "err", err)
		f.Errors["form"] = "We could not send the email just now. Try again in a few minutes."
		s.render(w, r, http.StatusServiceUnavailable, views.SignUp(page, f))
		return
	}
	http.Redirect(w, r, "/signup/sent", http.StatusSeeOther)
}

func confirmationMail(to, link string, expires time.Time) mail.Message {
	return mail.Message{To: to, Subject: "Confirm your Sluice developer account", Body: fmt.Sprintf(
		"Someone, probably you, signed up with this address.\n\n"+
			"To finish creating the account, open this link and enter the password you chose:\n\n%s\n\n"+
			"The link works once, until %s. If you did not sign up, ignore this email: no account is made.\n",
		link, expires.UTC().Format("2006-01-02 15:04 MST"))}
}

func registeredNotice(to, signIn, forgot string) mail.Message {
	return mail.Message{To: to, Subject: "You already have a Sluice developer account", Body: fmt.Sprintf(
		"Someone, probably you, tried to sign up with this address, which already has an account. Nothing was changed.\n\n"+
			"Sign in: %s\nForgot your password? %s\n\n"+
			"If it was not you, you can ignore this email.\n", signIn, forgot)}
}

func (s *Server) signUpSent(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, views.SignUpSent(s.page(r, "Check your email", "signup")))
}

// signUpConfirmForm is the page a confirmation link opens: a form, so that
// a mail scanner following the link makes no account.
func (s *Server) signUpConfirmForm(w http.ResponseWriter, r *http.Request) {
	// The token is in the path: no page it leads to may see it.
	w.Header().Set("Referrer-Policy", "no-referrer")
	token := r.PathValue("token")
	email, err := s.deps.Users.PendingSignup(r.Context(), token, s.now())
	if errors.Is(err, users.ErrSignupInvalid) {
		s.render(w, r, http.StatusNotFound, views.SignUpConfirmInvalid(s.page(r, "Sign-up link", "")))
		return
	}
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, views.SignUpConfirm(s.page(r, "Finish signing up", ""), views.SignUpConfirmForm{Token: token, Email: email}))
}

// signUpConfirm makes the account when the password is the one chosen at
// sign-up, uses the link up and signs the developer in.
func (s *Server) signUpConfirm(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Referrer-Policy", "no-referrer")
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	token := r.PathValue("token")
	var u users.User
	err := pgx.BeginFunc(r.Context(), s.deps.Pool, func(tx pgx.Tx) error {
		var err error
		u, err = users.NewRepo(tx).ConfirmSignup(r.Context(), token, r.PostFormValue("password"), s.now())
		return err
	})
	switch {
	case errors.Is(err, users.ErrSignupInvalid):
		s.render(w, r, http.StatusNotFound, views.SignUpConfirmInvalid(s.page(r, "Sign-up link", "")))
		return
	case errors.Is(err, users.ErrBadCredentials):
		email, _ := s.deps.Users.PendingSignup(r.Context(), token, s.now())
		s.render(w, r, http.StatusUnprocessableEntity, views.SignUpConfirm(s.page(r, "Finish signing up", ""), views.SignUpConfirmForm{
			Token: token, Email: email, Errors: views.FieldErrors{"password": "is not the password chosen at sign-up"},
		}))
		return
	case err != nil:
		s.error(w, r, err)
		return
	}
	if err := s.startSession(w, r, u); err != nil {
		s.error(w, r, err)
		return
	}
	s.log.Info("developer signed up", "user_id", u.ID, "plan_id", u.PlanID, "confirmed", true)
	http.Redirect(w, r, "/app/keys", http.StatusSeeOther)
}
