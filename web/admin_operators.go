package web

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/resets"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// operatorsList shows the operators, the invite form and the reset-link form.
func (s *Server) operatorsList(w http.ResponseWriter, r *http.Request) {
	s.renderOperators(w, r, http.StatusOK, views.OperatorsForm{}, nil)
}

func (s *Server) renderOperators(w http.ResponseWriter, r *http.Request, status int, f views.OperatorsForm, link *views.ResetLinkShown) {
	list, err := s.deps.Users.List(r.Context(), users.ListFilter{Role: users.RoleOperator, Limit: 1000})
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.render(w, r, status, views.OperatorsPage(s.page(r, "Operators", "operators"), list, f, link))
}

// operatorInvite creates an operator account and a reset link for it in one
// transaction. The account's first password is random and never shown: the
// new operator chooses theirs through the link, so no password travels.
func (s *Server) operatorInvite(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	f := views.OperatorsForm{Email: strings.TrimSpace(r.PostFormValue("email")), Errors: views.FieldErrors{}}
	pw, err := users.GeneratePassword()
	if err != nil {
		s.error(w, r, err)
		return
	}
	var (
		u     users.User
		token string
		shown views.ResetLinkShown
		fe    users.FieldErrors
		actor = s.actor(r)
	)
	err = pgx.BeginFunc(r.Context(), s.deps.Pool, func(tx pgx.Tx) error {
		var err error
		if u, err = users.NewRepo(tx).Create(r.Context(), users.NewUser{Email: f.Email, Password: pw, Role: users.RoleOperator}); err != nil {
			return err
		}
		if err := audit.Record(r.Context(), tx, actor, "user.create", audit.ObjectUser, strconv.FormatInt(u.ID, 10), nil, u); err != nil {
			return err
		}
		token, shown.Expires, err = s.resets.Create(r.Context(), tx, actor, u.ID)
		return err
	})
	switch {
	case errors.As(err, &fe):
		if fe["email"] != "" {
			f.Errors["email"] = fe["email"]
		} else {
			f.Errors["email"] = "could not create this account"
		}
		s.renderOperators(w, r, http.StatusUnprocessableEntity, f, nil)
		return
	case errors.Is(err, users.ErrEmailTaken):
		f.Errors["email"] = "already has an account; make a reset link for it instead"
		s.renderOperators(w, r, http.StatusUnprocessableEntity, f, nil)
		return
	case err != nil:
		s.error(w, r, err)
		return
	}
	s.log.Info("operator invited", "user_id", u.ID)
	shown.Email, shown.URL, shown.Invited = u.Email, s.publicBase(r)+"/reset/"+token, true
	s.renderOperators(w, r, http.StatusCreated, views.OperatorsForm{}, &shown)
}

// resetLinkCreate makes a one-time reset link for any account and shows it
// once (the page itself, never a redirect: the link is in no URL).
func (s *Server) resetLinkCreate(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	f := views.OperatorsForm{ResetEmail: strings.TrimSpace(r.PostFormValue("reset_email")), Errors: views.FieldErrors{}}
	u, err := s.deps.Users.ByEmail(r.Context(), f.ResetEmail)
	if errors.Is(err, users.ErrNotFound) {
		f.Errors["reset_email"] = "no account has this email"
		s.renderOperators(w, r, http.StatusUnprocessableEntity, f, nil)
		return
	}
	if err != nil {
		s.error(w, r, err)
		return
	}
	token, expires, err := s.resets.Create(r.Context(), s.deps.Pool, s.actor(r), u.ID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.log.Info("password reset link made", "user_id", u.ID)
	s.renderOperators(w, r, http.StatusCreated, views.OperatorsForm{},
		&views.ResetLinkShown{Email: u.Email, URL: s.publicBase(r) + "/reset/" + token, Expires: expires})
}

// resetForm is the public page a reset link opens.
func (s *Server) resetForm(w http.ResponseWriter, r *http.Request) {
	// The token is in the path: no page it leads to may see it.
	w.Header().Set("Referrer-Policy", "no-referrer")
	token := r.PathValue("token")
	ok, err := s.resets.Valid(r.Context(), token)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if !ok {
		s.render(w, r, http.StatusNotFound, views.ResetInvalid(s.page(r, "Reset link", "")))
		return
	}
	s.render(w, r, http.StatusOK, views.ResetPassword(s.page(r, "Choose a password", ""), views.ResetForm{Token: token}))
}

// resetPassword sets the password through a link, which then stops working,
// and signs the account out everywhere; the user then signs in.
func (s *Server) resetPassword(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Referrer-Policy", "no-referrer")
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	token := r.PathValue("token")
	u, err := s.resets.Redeem(r.Context(), token, r.PostFormValue("password"))
	var fe users.FieldErrors
	switch {
	case errors.Is(err, resets.ErrInvalid):
		s.render(w, r, http.StatusNotFound, views.ResetInvalid(s.page(r, "Reset link", "")))
		return
	case errors.As(err, &fe):
		s.render(w, r, http.StatusUnprocessableEntity, views.ResetPassword(s.page(r, "Choose a password", ""),
			views.ResetForm{Token: token, Errors: views.FieldErrors{"password": fe["password"]}}))
		return
	case err != nil:
		s.error(w, r, err)
		return
	}
	s.log.Info("password reset through a link", "user_id", u.ID)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}
