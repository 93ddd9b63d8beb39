package web

import (
	"context"
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
	me, _ := s.currentUser(r)
	f.Self = me.ID
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

// operatorDemote makes an operator a developer (on the default plan).
func (s *Server) operatorDemote(w http.ResponseWriter, r *http.Request) {
	s.operatorChange(w, r, "user.demote", "is now a developer on the default plan.", (*users.Repo).DemoteOperator)
}

// operatorRemove deletes an operator's account and its API tokens.
func (s *Server) operatorRemove(w http.ResponseWriter, r *http.Request) {
	s.operatorChange(w, r, "user.delete", "is no longer an operator: the account and its API tokens are gone.", (*users.Repo).RemoveOperator)
}

// operatorChange runs a demote or remove in one audited transaction. It
// refuses the last operator, and the signed-in operator's own account
// unless confirm_self was ticked; after changing their own account the
// operator is signed out of the dashboard.
func (s *Server) operatorChange(w http.ResponseWriter, r *http.Request, action, done string,
	change func(*users.Repo, context.Context, int64) (users.User, error)) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	me, _ := s.currentUser(r)
	self := id == me.ID
	if self && r.PostFormValue("confirm_self") == "" {
		s.renderOperators(w, r, http.StatusUnprocessableEntity, views.OperatorsForm{
			Refused: "That is your own account: tick \"this is me\" to confirm, and you lose the dashboard at once."}, nil)
		return
	}
	actor := s.actor(r)
	var before users.User
	err := pgx.BeginFunc(r.Context(), s.deps.Pool, func(tx pgx.Tx) error {
		var err error
		repo := users.NewRepo(tx)
		if before, err = repo.ByID(r.Context(), id); err != nil {
			return err
		}
		after, err := change(repo, r.Context(), id)
		if err != nil {
			return err
		}
		var recorded any = after
		if action == "user.delete" {
			recorded = nil
		}
		return audit.Record(r.Context(), tx, actor, action, audit.ObjectUser, strconv.FormatInt(id, 10), before, recorded)
	})
	switch {
	case errors.Is(err, users.ErrLastOperator):
		s.renderOperators(w, r, http.StatusConflict, views.OperatorsForm{
			Refused: before.Email + " is the last operator: invite another operator first, or nobody could run this portal."}, nil)
		return
	case errors.Is(err, users.ErrNotFound):
		s.error(w, r, errNotFound)
		return
	case err != nil:
		s.error(w, r, err)
		return
	}
	s.log.Info("operator changed", "action", action, "user_id", id)
	if self {
		if err := s.endSession(w, r); err != nil {
			s.error(w, r, err)
			return
		}
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
		return
	}
	s.renderOperators(w, r, http.StatusOK, views.OperatorsForm{Done: before.Email + " " + done}, nil)
}
